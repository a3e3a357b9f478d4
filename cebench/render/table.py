"""A plain-text table that fits the terminal: every cell whole, never cut with "…".

Columns have a priority: 0 is always shown; when the table is wider than the terminal,
the columns of the highest priority are dropped first, and `render` says which, so a
footer can tell the reader how to see them. Group rows (a line across the table, e.g. one
shape) take no column; one wider than the terminal breaks after a " · ". Cells are rich
`Text` (styles kept) or plain strings. A column may carry its cell (`Column.read`) and which
tables have it (`Column.when`), declared once: `Table.of` picks the columns a source has, and
`Table.add` reads a row's cells from what it is made of.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rich.text import Text

GAP = "  "  # between columns
SEPARATOR = " · "  # between the parts of a group row's label, where a long one breaks


Cell = Text | str  # a table's cell: rich text (its style kept) or plain


@dataclass(frozen=True)
class Column:
    """`key` names the column for `--columns`; `priority` 0 is never dropped, higher
    numbers are dropped first on a narrow terminal. `read`: its cell of a row, from what the
    row is made of (`Table.add`); `when`: whether a table of a given source has it (None:
    every one, `Table.of`)."""

    key: str
    header: str
    right: bool = True
    priority: int = 0
    read: Callable[[Any], Cell] | None = None
    when: Callable[[Any], bool] | None = None


@dataclass(frozen=True)
class ColumnNote:
    """A note on some columns: (column key, text) parts, of which the parts of the columns
    shown are printed, joined by '; ' (none shown: no note); with `of_hidden`, the parts of
    the columns left out instead (what the reader would miss), after `lead`."""

    parts: tuple[tuple[str, str], ...]
    of_hidden: bool = False
    lead: str = ""

    def text(self, hidden: Sequence[str] = ()) -> str:
        """The parts of the columns not `hidden` (`of_hidden`: those hidden), joined after
        `lead` ('' when none is left)."""
        picked = [text for key, text in self.parts if (key in hidden) == self.of_hidden]
        return self.lead + "; ".join(picked) if picked else ""


@dataclass
class Table:
    """Rows of cells, one per column, and group lines between them; `notes` go below (a
    `ColumnNote` only for the columns shown)."""

    columns: list[Column]
    title: str | None = None
    rows: list[list[Text | str] | str] = field(default_factory=list)
    notes: list[str | ColumnNote] = field(default_factory=list)

    @classmethod
    def of(cls, declared: Sequence[Column], source: object, title: str | None = None, **headers: str) -> Table:
        """A table of the `declared` columns that `source` has (`Column.when`), in their order,
        each header formatted with `headers` ('vs {base}')."""
        columns = [replace(c, header=c.header.format(**headers) if headers else c.header) for c in declared
                   if c.when is None or c.when(source)]
        return cls(columns, title=title)

    def add(self, row: object, style: str = "") -> None:
        """A row whose cells each column reads from `row` (`Column.read`); its plain cells in
        `style` (a `Text` cell keeps its own)."""
        cells = [c.read(row) for c in self.columns if c.read is not None]
        assert len(cells) == len(self.columns), [c.key for c in self.columns if c.read is None]
        self.add_row(*(Text(cell, style=style) if isinstance(cell, str) and style else cell for cell in cells))

    def add_row(self, *cells: Text | str) -> None:
        assert len(cells) == len(self.columns), (len(cells), [c.key for c in self.columns])
        self.rows.append(list(cells))

    def add_group(self, label: str) -> None:
        """A line across the table that heads the rows after it."""
        self.rows.append(label)

    def keys(self) -> list[str]:
        return [c.key for c in self.columns]


def _text(cell: Text | str) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)


def _widths(table: Table) -> list[int]:
    cells = [r for r in table.rows if not isinstance(r, str)]
    return [max([len(c.header)] + [_text(row[i]).cell_len for row in cells]) for i, c in enumerate(table.columns)]


def choose(table: Table, width: int | None, keep: Sequence[str] | None = None) -> tuple[list[int], list[str]]:
    """Indices of the columns to show and the keys of those dropped. `keep` (column keys)
    shows exactly those; otherwise all when `width` is None, else the most important that fit."""
    if keep is not None:
        unknown = [k for k in keep if k not in table.keys()]
        if unknown:
            raise ValueError(f"unknown column(s) {', '.join(unknown)} (choose from {', '.join(table.keys())})")
        shown = [i for i, c in enumerate(table.columns) if c.key in keep or c.priority == 0]
    else:
        widths = _widths(table)
        shown = list(range(len(table.columns)))
        while width is not None and sum(widths[i] for i in shown) + len(GAP) * (len(shown) - 1) > width:
            droppable = [i for i in shown if table.columns[i].priority > 0]
            if not droppable:
                break
            shown.remove(max(droppable, key=lambda i: (table.columns[i].priority, i)))
        for i in sorted(set(range(len(table.columns))) - set(shown), key=lambda i: (table.columns[i].priority, i)):
            if width is not None and sum(widths[j] for j in shown) + widths[i] + len(GAP) * len(shown) <= width:
                shown = sorted(shown + [i])  # a narrower column that still fits comes back
    hidden = [c.key for i, c in enumerate(table.columns) if i not in shown]
    return shown, hidden


@dataclass(frozen=True)
class Rendered:
    """A rendered table: the body lines fit the width; the title and notes are prose (wrap
    them); `hidden` are the keys of the columns left out to fit."""

    title: Text | None
    body: Text
    notes: list[Text]
    hidden: list[str]


def _group_lines(label: str, width: int | None) -> list[str]:
    """A group row's label as lines of at most `width` cells with room for the rule after it
    (None: one line): broken after a " · " (the label's parts), continued indented."""
    words = label.split(SEPARATOR)
    lines, line = [], f"── {words[0]}"
    for word in words[1:]:
        if width is not None and len(line) + len(SEPARATOR) + len(word) + 3 > width:
            lines.append(line + SEPARATOR.rstrip())
            line = f"   {word}"
        else:
            line += SEPARATOR + word
    return [*lines, line + " "]


def render(table: Table, width: int | None, keep: Sequence[str] | None = None) -> Rendered:
    """The table's body as text lines of at most `width` cells (None: as wide as it needs)."""
    shown, hidden = choose(table, width, keep)
    widths = _widths(table)
    total = sum(widths[i] for i in shown) + len(GAP) * (len(shown) - 1)

    def line(cells: Sequence[Text | str], style: str = "") -> Text:
        out = Text(style=style)
        for n, i in enumerate(shown):
            cell = _text(cells[i])
            pad = " " * (widths[i] - cell.cell_len)
            out.append(GAP if n else "")
            out.append_text(Text(pad) + cell if table.columns[i].right else cell + Text(pad))
        out.rstrip()
        return out

    lines = [line([c.header for c in table.columns], style="bold"), Text("━" * total, style="dim")]
    for row in table.rows:
        if isinstance(row, str):
            *heads, label = _group_lines(row, width)
            lines.extend(Text(head, style="cyan") for head in heads)
            lines.append(Text(label + "─" * max(total - len(label), 2), style="cyan"))
        else:
            lines.append(line(row))
    title = Text(table.title, style="bold") if table.title else None
    notes = [n if isinstance(n, str) else n.text(hidden) for n in table.notes]
    return Rendered(title, Text("\n").join(lines), [Text(n, style="dim") for n in notes if n], hidden)
