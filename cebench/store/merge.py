"""Merging results CSVs (the shards of one sweep, say) into one: schemas checked, exact
repeats dropped, and a point measured differently in two files refused."""
from __future__ import annotations

import csv
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cebench.core.errors import UsageError
from cebench.run.shard import Shard, parse
from cebench.store.files import read_rows
from cebench.store.frame import load
from cebench.store.schema import BEFORE, COLUMNS, KEY_COLUMNS, PREDICTED


@dataclass
class Merged:
    """Rows in this release's columns, in input order, and what merging did: rows read per
    file, exact repeats dropped, cut-off last rows left out (file → their text), and the
    shard labels ('INDEX/COUNT') the rows carry."""

    rows: list[tuple[str, ...]] = field(default_factory=list)
    read: dict[Path, int] = field(default_factory=dict)
    repeats: int = 0
    cut_off: dict[Path, str] = field(default_factory=dict)
    shards: set[Shard] = field(default_factory=set)

    def missing_shards(self) -> list[Shard]:
        """Shards of a count the rows name that none of the rows come from."""
        counts = sorted({s.count for s in self.shards})
        return [Shard(i, n) for n in counts for i in range(n) if Shard(i, n) not in self.shards]


def _describe(key: tuple[str, ...]) -> str:
    return " ".join(f"{c}={v}" for c, v in zip(KEY_COLUMNS, key, strict=True) if v)


def merge(paths: list[Path]) -> Merged:
    """The rows of every CSV in `paths`. `UsageError` for a file that is not a readable
    cebench CSV, one written by a newer release (columns this one does not know), or a
    point (its key columns; predicted and measured rows apart) whose rows in two files
    differ: merging must not pick one measurement over another silently."""
    merged = Merged()
    seen: set[tuple[str, ...]] = set()
    owner: dict[tuple[str, ...], Path] = {}
    for path in paths:
        data = read_rows(path)
        unknown = [c for c in data.header if c not in COLUMNS]
        if unknown:
            raise UsageError(f"{path}: written by a newer cebench (columns {', '.join(unknown)}); merge it with "
                             "that release")
        if data.cut_off:
            merged.cut_off[path] = data.cut_off
        elif data.rows:  # (a shard killed in its first point left a header alone: nothing to check)
            load(path)  # every value checked, as show, plot and check will read them
        merged.read[path] = len(data.rows)
        for number, row in enumerate(data.rows, start=2):
            cells = tuple(row.get(c, BEFORE.get(c, "")) for c in COLUMNS)
            if cells in seen:
                merged.repeats += 1
                continue
            key = tuple(row.get(c, BEFORE.get(c, "")) for c in KEY_COLUMNS) + (str(row.get("mem_method") == PREDICTED),)
            other = owner.setdefault(key, path)
            if other != path:
                raise UsageError(f"{path}: row {number} measures {_describe(key[:-1])}, which {other} measured "
                                 "differently; merge keeps every measurement of a point from one file (leave one "
                                 "of them out)")
            seen.add(cells)
            merged.rows.append(cells)
            if row.get("shard"):
                merged.shards.add(parse(row["shard"], f"{path}: row {number}: column 'shard'"))
    return merged


def write(merged: Merged, out: Path) -> None:
    """Write `merged` to `out` (a new file), whole or not at all: into a temporary file
    beside it, renamed into place."""
    tmp = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(COLUMNS)
            writer.writerows(merged.rows)
        os.replace(tmp, out)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise UsageError(f"{out}: cannot write there ({exc.strerror or exc})") from None
