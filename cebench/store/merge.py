"""Merging results CSVs (the shards of one sweep, say) into one: schemas checked, exact
repeats dropped, a point measured differently in two files refused, and the shards of each
grid counted, so that shards of two grids never pass for one whole sweep."""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from cebench.core.errors import UsageError
from cebench.core.shard import Shard, parse
from cebench.store.files import predicted, read_rows, write_new, written_with
from cebench.store.frame import validated
from cebench.store.schema import BEFORE, COLUMNS, KEY_COLUMNS, SCHEMA_VERSION

SHOWN = 8  # missing shards named at most; the rest are counted


@dataclass
class Merged:
    """Rows in this release's columns, in input order, and what merging did: rows read per
    file, exact repeats dropped, earlier rows of a point a file measured again dropped
    (`superseded`: the last is kept, as `show` does), and the shards the rows come from:
    (their `grid` column, '' in files from before it; the shard)."""

    rows: list[tuple[str, ...]] = field(default_factory=list)
    read: dict[Path, int] = field(default_factory=dict)
    repeats: int = 0
    superseded: int = 0
    shards: set[tuple[str, Shard]] = field(default_factory=set)

    def missing_shards(self) -> tuple[int, list[tuple[str, Shard]]]:
        """How many shards none of the rows come from, of each grid and shard count the rows
        name, and the first `SHOWN` of them (grid, shard); a count may be huge."""
        first: list[tuple[str, Shard]]
        total, first = 0, []
        for grid, n in sorted({(g, s.count) for g, s in self.shards}):
            present = {s.index for g, s in self.shards if (g, s.count) == (grid, n)}
            total += n - len(present)
            i = 0
            while len(first) < SHOWN and i < n:  # at most len(present) + SHOWN steps
                if i not in present:
                    first.append((grid, Shard(i, n)))
                i += 1
        return total, first


def _describe(key: tuple[str, ...]) -> str:
    return " ".join(f"{c}={v}" for c, v in zip(KEY_COLUMNS, key, strict=True) if v)


def merge(paths: list[Path]) -> Merged:
    """The rows of every CSV in `paths`. `UsageError` for a file that is not a readable
    cebench CSV, one written by a newer release (columns this one does not know, or a
    newer `schema_version`), or a point (its key columns; predicted and measured rows
    apart) whose rows in two files differ: merging must not pick one measurement over
    another silently, or predictions (`cebench predict`) beside measurements: a results CSV
    holds one kind of row, as `predict --out` and `sweep --out` keep it. Within one file the
    last row of a point is kept (a point measured again: `sweep --resume` after an error)."""
    merged = Merged()
    seen: set[tuple[str, ...]] = set()
    owner: dict[tuple[str, ...], Path] = {}
    kinds: dict[bool, tuple[Path, int]] = {}  # predicted or not → the first file and line of that kind
    for path in paths:
        data = read_rows(path)
        unknown = [c for c in data.header if c not in COLUMNS]
        if unknown:
            raise UsageError(f"{path}: written by a newer cebench (columns {', '.join(unknown)}); merge it with "
                             "that release")
        if data.rows:  # (a shard killed in its first point left a header alone: nothing to check)
            validated(data)  # every value checked, as show, plot and check will read them
        merged.read[path] = len(data.rows)
        last: dict[tuple[str, ...], int] = {}
        keyed: list[tuple[int, dict[str, str], tuple[str, ...]]] = []  # line, row, key
        for number, row in zip(data.lines, data.rows, strict=True):
            version = written_with(row)
            if version is not None and version > SCHEMA_VERSION:
                raise UsageError(f"{path}: line {number} was written with schema {version} by a newer cebench "
                                 f"(this one reads up to {SCHEMA_VERSION}); merge it with that release")
            kinds.setdefault(predicted(row), (path, number))
            if len(kinds) > 1:
                (p_path, p_line), (m_path, m_line) = kinds[True], kinds[False]
                raise UsageError(f"{p_path} (line {p_line}) holds predictions and {m_path} (line {m_line}) "
                                 "measurements: merge each kind into a CSV of its own")
            key = tuple(row.get(c, BEFORE.get(c, "")) for c in KEY_COLUMNS)
            last[key] = len(keyed)
            keyed.append((number, row, key))
        merged.superseded += len(keyed) - len(last)
        for i, (number, row, key) in enumerate(keyed):
            if last[key] != i:
                continue
            cells = tuple(row.get(c, BEFORE.get(c, "")) for c in COLUMNS)
            if cells in seen:
                merged.repeats += 1
                continue
            other = owner.setdefault(key, path)
            if other != path:
                raise UsageError(f"{path}: line {number} measures {_describe(key)}, which {other} measured "
                                 "differently; merge keeps every measurement of a point from one file (leave one "
                                 "of them out)")
            seen.add(cells)
            merged.rows.append(cells)
            if row.get("shard"):
                merged.shards.add((row.get("grid", ""), parse(row["shard"], f"{path}: line {number}: column 'shard'")))
    return merged


def write(merged: Merged, out: Path) -> None:
    """Write `merged` to `out` (a new file) whole or not at all (`write_new`)."""
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(COLUMNS)
    writer.writerows(merged.rows)
    write_new(out, text.getvalue())
