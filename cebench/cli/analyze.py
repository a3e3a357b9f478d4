"""`cebench show`, `plot` and `check`: views over a results CSV (table, figures, gate)."""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from cebench.cli.app import check_columns, command, err, out, print_table, user_prints_to_stderr
from cebench.cli.options import COLUMNS_HELP, LIST, MemoryUnit, Wide
from cebench.core.axes import X_AXES
from cebench.core.errors import UsageError
from cebench.core.units import parse_bytes

if TYPE_CHECKING:
    import pandas as pd

CSV_HELP = "A results CSV written by cebench sweep or predict."
STDIN = Path("-")  # show's CSV argument for standard input, as Unix tools read it


def load_csv(path: Path) -> pd.DataFrame:
    """The results CSV at `path`, or the one on standard input where `path` is `STDIN`
    (copied to a temporary file first, which the checks' messages name)."""
    from cebench.store.frame import load

    if path != STDIN:
        return load(path)
    with tempfile.TemporaryDirectory(prefix="cebench-stdin-") as folder:
        copy = Path(folder) / "stdin.csv"
        copy.write_text(sys.stdin.read())
        return load(copy)
LAST_ROW = "Where the CSV holds a configuration more than once (sweeps append), its last row is used."
FORMATS = ("table", "markdown", "csv", "json")
LONG_TABLE = 20_000  # rows: a longer table earns a warning before it is built (minutes, and a long scroll)


@command(help=f"Print the table cebench sweep prints, from a results CSV. {LAST_ROW} --format markdown gives "
              "the same table for a pull request; csv and json give its rows: every column of the CSV (bytes, "
              "ms, each timed step) and the table's ratios.",
         short_help="Print the sweep table from a results CSV.")
def show(
    csv: Path = typer.Argument(..., metavar="CSV", help=f"{CSV_HELP} - reads it from standard input.",
                               show_default=False),
    fmt: str = typer.Option("table", "--format", metavar="FORMAT", show_default=False,
                            help="table, markdown, csv or json. Default: table."),
    unit: MemoryUnit = None,
    wide: Wide = False,
    columns: Annotated[str | None, typer.Option(
        metavar=LIST, help=f"{COLUMNS_HELP} Any column of the CSV too (--columns fsdp,tp).")] = None,
) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"--format: '{fmt}' is not one of {', '.join(FORMATS)}")
    from cebench.analyze.compare import view
    from cebench.render.report import column_keys, markdown, results_table
    from cebench.run.grid import split
    from cebench.store.frame import distinct, latest, samples
    from cebench.store.schema import COLUMNS

    keys = column_keys(timed=None)  # measured or predicted rows: either's time; and any column of the CSV
    check_columns(columns, keys + [c for c in COLUMNS if c not in keys])
    frame = load_csv(csv)
    rows = latest(frame)
    if len(rows) > LONG_TABLE:
        err.print(f"warning: {csv}: {len(rows):,} rows to lay out, which takes a while; --format csv prints their "
                  "values sooner, and cebench plot --filter draws a part", style="yellow", highlight=False)
    if fmt in ("csv", "json"):
        values = view(rows)
        if fmt == "json":  # each timed step a number (the CSV cell keeps them space-separated)
            values["time_ms_samples"] = values["time_ms_samples"].map(lambda cell: list(samples(cell)))
        typer.echo(values.to_csv(index=False) if fmt == "csv" else values.to_json(orient="records", indent=2),
                   nl=fmt == "json")
        return
    source = "standard input" if csv == STDIN else str(csv)
    title = (f"{source} · {distinct(rows, 'device')} ({distinct(rows, 'device_name')}) · "
             f"{distinct(rows, 'threads')} threads · torch {distinct(rows, 'torch_version')}")
    raw = [k for k in split(columns, "columns") if k not in keys] if columns is not None else []
    table = results_table(rows, title=title, unit=unit, raw=raw)
    repeated = len(frame) - len(rows)
    table.notes.append(f"{len(rows)} rows from {source}" + (f"; {repeated} repeated row(s) hidden, the last of each "
                                                         "shown" if repeated else ""))
    if fmt == "markdown":
        typer.echo(markdown(table))
    else:
        print_table(table, wide, columns, checked=True)


@command(help=(
    "Draw figures from a results CSV: memory-vs-X.png (peak memory the step adds, with the full fp32 "
    "logits dashed for scale and the lower bound dotted), time-vs-X.png (median step time, p25–p75 band, "
    "the matmul floor dash-dotted) and memory-vs-time.png (the trade-off, one panel per configuration). One line "
    "per variant, chunked variants one per ce_chunk; "
    "oom/error points are red crosses in a strip above their panel. One panel per combination of the other "
    f"parameters that vary; X is the --x parameter. {LAST_ROW} Prints the paths written."),
    short_help="Draw memory and time figures from a results CSV.")
def plot(
    csv: Path = typer.Argument(..., metavar="CSV", help=CSV_HELP, show_default=False),
    x: str = typer.Option(None, "--x", help=f"Parameter on the x axis: {', '.join(X_AXES)}. Default: the one "
                                            "with the most values."),
    out_dir: Path = typer.Option(None, "--out-dir", metavar="DIR", help="Folder for the figures. Default: next to "
                                                                        "the CSV, named after it."),
    filters: list[str] = typer.Option([], "--filter", metavar="COLUMN=VALUE",
                                      help="Keep rows where COLUMN=VALUE[,VALUE...]; repeatable, e.g. --filter "
                                           "context=128."),
    svg: bool = typer.Option(False, "--svg", help="Also write each figure as SVG."),
    budget: str = typer.Option(None, "--budget", metavar="BYTES", show_default=False,
                               help="A model's rows: the memory budget drawn across step-vs-X.png (80GiB, 40GB, "
                                    "...). Default: the memory of the rows' named GPU target, if one."),
) -> None:
    from cebench.render.plot import default_out_dir, select
    from cebench.render.plot import plot as draw
    from cebench.store.frame import load

    budget_bytes = None if budget is None else parse_bytes(budget, "budget")
    frame = select(load(csv), filters)
    for path in draw(frame, out_dir or default_out_dir(csv), x=x, svg=svg, budget=budget_bytes):
        typer.echo(str(path))


@command(help=(
    "Gate on peak memory: compare a results CSV with a baseline CSV, point by point. Points are matched on "
    "variant, workload, device type, dtype, batch, context, vocab, d_model and ce_chunk. A point regresses "
    "when its peak_delta_bytes grew by more than --mem-tol (growth of exactly the tolerance passes), or when "
    "it was ok in the baseline and is oom or error now; with --time-tol, also when its median step time grew "
    "by more than that tolerance and the slowdown is significant: a one-sided Mann-Whitney U test of its "
    "step-time samples against the baseline's scaled by (1 + tolerance) gives p < 0.05 (points with too few "
    "samples, under 4 + 4, are compared on medians, with a warning). Improvements are listed. Points measured "
    f"on one side only are warnings (failures with --strict). {LAST_ROW}\n\n"
    "Exit codes: 0 pass · 1 regression (or, with --strict, a missing point) · 2 usage or input error."),
    short_help="Fail (exit 1) when peak memory grew against a baseline CSV.")
def check(
    csv: Path = typer.Argument(..., metavar="CSV", help="The results CSV to check: the new measurements.",
                               show_default=False),
    baseline: Path = typer.Option(..., "--baseline", metavar="CSV", help="The results CSV to compare with.",
                                  show_default=False),
    mem_tol: str = typer.Option("1%", "--mem-tol", metavar="PCT", show_default=False,
                                help="Allowed growth of peak_delta_bytes: 1%, 0.5% or 1 (percent). Default: 1%."),
    time_tol: str = typer.Option(None, "--time-tol", metavar="PCT", help="Also gate on step time, allowing this "
                                                                         "growth of the median (percent) when "
                                                                         "significant. Default: not gated."),
    strict: bool = typer.Option(False, "--strict", help="Fail when a point is measured on one side only."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
    unit: MemoryUnit = None,
    wide: Wide = False,
) -> None:
    from cebench import api
    from cebench.render.check import check_table, summary

    with user_prints_to_stderr(as_json):  # a variant's plugin printing as it loads: stdout holds the JSON alone
        report = api.check(csv, baseline, mem_tol=mem_tol, time_tol=time_tol, strict=strict)
    if as_json:
        typer.echo(report.to_json())
    else:
        if report.regressed or report.improved or report.missing:
            print_table(check_table(report, unit), wide)
        for warning in report.warnings:
            out.print(Text(f"warning: {warning}", style="yellow"))
        out.print(summary(report))
    if not report.passed:
        raise typer.Exit(1)
