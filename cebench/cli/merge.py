"""`cebench merge`: the CSVs of a sharded sweep (or any cebench CSVs) into one."""
from __future__ import annotations

from pathlib import Path

import typer

from cebench.cli.app import command, err, out
from cebench.core.errors import UsageError


@command()
def merge(
    csvs: list[Path] = typer.Argument(..., metavar="CSV", show_default=False,
                                      help="Results CSVs to merge, e.g. the shards of one sweep."),
    out_path: Path = typer.Option(..., "--out", metavar="CSV", show_default=False,
                                  help="The merged CSV to write: a new file (an existing one is never replaced)."),
) -> None:
    """Merge results CSVs into one, in this release's columns.

    Every file is checked as `show` would read it. Rows repeated exactly are kept once;
    a point (variant, shape, dtype, device, ce_chunk) that two files measured differently
    is refused with exit 2, since merging must not choose between measurements; within
    one file, a point's last row is kept. Files of a newer schema are refused; shards are
    counted per grid, so that shards of two grids never pass for a whole sweep. A cut-off
    last row (a crash mid-write) is left out with a warning. The file is written whole or
    not at all.
    """
    from cebench.store.merge import merge as merge_rows
    from cebench.store.merge import write

    try:
        exists = out_path.exists()
    except OSError:  # a name too long, say: writing it says so
        exists = False
    if exists:
        raise UsageError(f"--out {out_path}: exists; merge writes a new file (choose another name)")
    first: dict[Path, Path] = {}
    for path in csvs:
        first.setdefault(path.resolve(), path)  # a file named twice (./a.csv, a.csv) is read once
    unique = list(first.values())
    if len(unique) < len(csvs):
        err.print("note: a file is named twice; its rows count once", style="yellow", highlight=False)
    merged = merge_rows(unique)
    total, missing = merged.missing_shards()
    if total:
        more = f" and {total - len(missing):,} more" if total > len(missing) else ""
        several = len({g for g, _ in merged.shards}) > 1
        named = ", ".join(", ".join(s.label for g, s in missing if g == grid)
                          + (f" (grid {grid or 'not recorded'})" if several else "")
                          for grid in dict.fromkeys(g for g, _ in missing))
        err.print(f"warning: no rows from shard {named}{more}: the merged sweep is incomplete", style="yellow",
                  highlight=False)
    write(merged, out_path)
    counts = " + ".join(f"{n}" for n in merged.read.values())
    labels = list(dict.fromkeys(s.label for _, s in sorted(merged.shards, key=lambda gs: (gs[1].count, gs[1].index))))
    shards = f", shards {', '.join(labels)}" if labels else ""
    repeats = f", {merged.repeats} exact repeat{'s' * (merged.repeats != 1)} dropped" if merged.repeats else ""
    if merged.superseded:
        repeats += (f", {merged.superseded} earlier row{'s' * (merged.superseded != 1)} of a point measured again "
                    "dropped")
    out.print(f"merged {len(merged.read)} file{'s' * (len(merged.read) != 1)} ({counts} rows{shards}){repeats}: "
              f"{len(merged.rows)} rows → {out_path}", highlight=False)
