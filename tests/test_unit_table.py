"""`cebench.render.table`: which columns a width leaves out and in which order, the one
that comes back, `keep`, group lines, alignment and notes, on a table built by hand."""
from __future__ import annotations

import pytest
from rich.text import Text

from cebench.render.table import GAP, Column, ColumnNote, Table, choose, render

# Column widths (the wider of header and cells): name 5, big 10, mid 5, wide 20, tail 4.
COLUMNS = [Column("name", "name", right=False), Column("big", "big", priority=1), Column("mid", "mid", priority=2),
           Column("wide", "wide", priority=3), Column("tail", "tail", priority=2)]
FULL = 5 + 10 + 5 + 20 + 4 + 4 * len(GAP)  # 52


def table() -> Table:
    t = Table(list(COLUMNS), title="a title", notes=["a note", "another"])
    t.add_group("shape one")
    t.add_row("alpha", "1234567890", "12345", "x" * 20, "abc")
    t.add_row("b", "1", Text("2", style="red"), "3", "4")
    return t


@pytest.mark.parametrize("width,hidden", [
    (None, []),
    (FULL, []),
    (FULL - 1, ["wide"]),  # the highest priority number goes first
    (30, ["wide"]),
    (29, ["wide", "tail"]),  # of equal priorities the rightmost goes first
    (24, ["wide", "tail"]),
    (23, ["mid", "wide"]),  # mid had to go too, then tail (narrower) fits again and comes back
    (17, ["mid", "wide", "tail"]),
    (16, ["big", "wide", "tail"]),  # without big, mid fits again
    (10, ["big", "mid", "wide", "tail"]),
])
def test_columns_drop_by_priority_and_a_narrower_one_comes_back(width, hidden):
    shown, got = choose(table(), width)
    assert got == hidden  # in the table's order
    assert [COLUMNS[i].key for i in shown] == [c.key for c in COLUMNS if c.key not in hidden]
    assert render(table(), width).hidden == hidden


def test_every_line_fits_every_width_the_always_shown_columns_fit():
    for width in range(5, FULL + 5):
        body = render(table(), width).body.plain.splitlines()
        rows = [line for line in body if not line.startswith("── ")]
        assert max(len(line) for line in rows) <= width, (width, body)
        cells = {cell for line in rows[2:] for cell in line.split()}
        assert {"alpha", "b"} <= cells and "…" not in "".join(body)  # a cell is shown whole or not at all
        (group,) = [line for line in body if line.startswith("── ")]
        assert len(group) == max(len(rows[1]), len("── shape one ") + 2)  # across the table, the label whole


def test_a_width_below_the_always_shown_columns_shows_them_anyway():
    rendered = render(table(), 3)
    assert rendered.hidden == ["big", "mid", "wide", "tail"]
    assert rendered.body.plain.splitlines()[0] == "name"


def test_keep_shows_exactly_those_and_the_always_shown_ones():
    rendered = render(table(), 10, keep=["wide"])  # whatever the width
    assert rendered.hidden == ["big", "mid", "tail"]
    assert rendered.body.plain.splitlines()[0].split() == ["name", "wide"]
    with pytest.raises(ValueError, match="unknown column\\(s\\) nope, gone"):
        choose(table(), None, keep=["nope", "mid", "gone"])


def test_layout_alignment_rule_group_line_title_and_notes():
    rendered = render(table(), None)
    lines = rendered.body.plain.splitlines()
    assert lines == [
        "name          big    mid                  wide  tail",
        "━" * FULL,
        "── shape one " + "─" * (FULL - len("── shape one ")),
        "alpha  1234567890  12345  xxxxxxxxxxxxxxxxxxxx   abc",
        "b               1      2                     3     4",
    ]
    assert rendered.title.plain == "a title" and [n.plain for n in rendered.notes] == ["a note", "another"]
    red = [span for span in rendered.body.spans if span.style == "red"]
    assert len(red) == 1 and rendered.body.plain[red[0].start:red[0].end] == "2"  # a cell's style is kept


def test_a_group_line_longer_than_the_table_keeps_two_rule_characters():
    t = Table([Column("a", "a")])
    t.add_group("a very long label")
    t.add_row("1")
    assert render(t, None).body.plain.splitlines()[2] == "── a very long label ──"


def test_widths_count_terminal_cells_not_characters():
    t = Table([Column("k", "k", right=False), Column("v", "v", priority=1)])
    t.add_row("中文", "x")  # two characters, four cells
    assert render(t, None).body.plain.splitlines()[2] == "中文  x"
    assert render(t, 6).hidden == ["v"] and render(t, 7).hidden == []


def test_a_row_of_the_wrong_length_is_refused():
    with pytest.raises(AssertionError):
        table().add_row("only one")


def test_a_note_on_columns_says_only_what_the_shown_ones_need():
    table = Table([Column("a", "a"), Column("wide", "w" * 30, priority=1), Column("b", "b", priority=2)])
    table.add_row("1", "2", "3")
    table.notes += ["always", ColumnNote((("wide", "w: a wide one"), ("b", "b: another"))), ColumnNote((("b", "b"),))]
    assert [str(n) for n in render(table, None).notes] == ["always", "w: a wide one; b: another", "b"]
    assert [str(n) for n in render(table, 10).notes] == ["always", "b: another", "b"]  # wide left out
    assert [str(n) for n in render(table, 1).notes] == ["always"]  # both left out: no note at all


def test_a_group_line_wider_than_the_terminal_breaks_after_a_separator():
    t = Table([Column("a", "a")])
    t.add_group("alpha · beta · gamma")
    t.add_row("1")
    assert render(t, 20).body.plain.splitlines()[2:5] == ["── alpha · beta ·", "   gamma ──", "1"]
    assert render(t, None).body.plain.splitlines()[2] == "── alpha · beta · gamma ──"
    t = Table([Column("a", "a")])
    t.add_group("unbroken-label-of-thirty-cells")  # no separator: whole, past the width
    assert render(t, 20).body.plain.splitlines()[2] == "── unbroken-label-of-thirty-cells ──"
