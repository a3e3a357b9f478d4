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
    is refused with exit 2, since merging must not choose between measurements. A cut-off
    last row (a crash mid-write) is left out with a warning. The file is written whole or
    not at all.
    """
    from cebench.store.merge import merge as merge_rows
    from cebench.store.merge import write

    if out_path.exists():
        raise UsageError(f"--out {out_path}: exists; merge writes a new file (choose another name)")
    first: dict[Path, Path] = {}
    for path in csvs:
        first.setdefault(path.resolve(), path)  # a file named twice (./a.csv, a.csv) is read once
    unique = list(first.values())
    if len(unique) < len(csvs):
        err.print("note: a file is named twice; its rows count once", style="yellow", highlight=False)
    merged = merge_rows(unique)
    for path, text in merged.cut_off.items():
        err.print(f"warning: {path}: its last row was cut off (a crash or a full disk?) and is left out: "
                  f"{text[:120]}", style="yellow", highlight=False)
    missing = merged.missing_shards()
    if missing:
        err.print(f"warning: no rows from shard {', '.join(s.label for s in missing)}: the merged sweep is "
                  "incomplete",
                  style="yellow", highlight=False)
    write(merged, out_path)
    counts = " + ".join(f"{n}" for n in merged.read.values())
    labels = [s.label for s in sorted(merged.shards, key=lambda s: (s.count, s.index))]
    shards = f", shards {', '.join(labels)}" if labels else ""
    repeats = f", {merged.repeats} exact repeat{'s' * (merged.repeats != 1)} dropped" if merged.repeats else ""
    out.print(f"merged {len(merged.read)} file{'s' * (len(merged.read) != 1)} ({counts} rows{shards}){repeats}: "
              f"{len(merged.rows)} rows → {out_path}", highlight=False)
