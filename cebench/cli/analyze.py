"""`cebench show`, `plot` and `check`: views over a results CSV (table, figures, gate)."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from cebench.check import MEMORY, TIME, CheckReport, Finding, Key, Missing, compare, parse_tolerance
from cebench.cli.app import app, out
from cebench.plot import default_out_dir, plot as draw, select
from cebench.report import results_table
from cebench.results import distinct, latest, load
from cebench.units import format_bytes, format_ms

CSV_HELP = "A results CSV written by cebench sweep."
LAST_ROW = "Where the CSV holds a configuration more than once (sweeps append), its last row is used."


@app.command(help=f"Print the table cebench sweep prints, from a results CSV. {LAST_ROW}",
             short_help="Print the sweep table from a results CSV.")
def show(csv: Path = typer.Argument(..., help=CSV_HELP, show_default=False)) -> None:
    frame = load(csv)
    rows = latest(frame)
    title = (f"{csv} · {distinct(rows, 'device')} ({distinct(rows, 'device_name')}) · "
             f"{distinct(rows, 'threads')} threads · torch {distinct(rows, 'torch_version')}")
    out.print(results_table(rows, title=title))
    repeated = len(frame) - len(rows)
    note = f"; {repeated} repeated row(s) hidden, the last of each shown" if repeated else ""
    out.print(f"{len(rows)} rows from {csv}{note}  (peak Δ = peak − memory live before the step)")


@app.command(help=(
    "Draw figures from a results CSV: memory-vs-X.png (peak memory the step adds, with the full fp32 "
    "logits dashed for scale), time-vs-X.png (median step time, p25–p75 band) and memory-vs-time.png "
    "(the trade-off, one panel per configuration). One line per variant, chunked variants one per ce_chunk; "
    "oom/error points are red crosses at the top of their panel. One panel per combination of the other "
    f"parameters that vary; X is the --x parameter. {LAST_ROW} Prints the paths written."),
    short_help="Draw memory and time figures from a results CSV.")
def plot(
    csv: Path = typer.Argument(..., help=CSV_HELP, show_default=False),
    x: str = typer.Option(None, "--x", help="Parameter on the x axis: batch, context, vocab or d_model. "
                                            "Default: the one with the most values."),
    out_dir: Path = typer.Option(None, "--out-dir", help="Folder for the figures. Default: next to "
                                                         "the CSV, named after it."),
    filters: list[str] = typer.Option([], "--filter", help="Keep rows where COLUMN=VALUE[,VALUE...]; "
                                                           "repeatable, e.g. --filter context=128."),
    svg: bool = typer.Option(False, "--svg", help="Also write each figure as SVG."),
) -> None:
    frame = select(load(csv), filters)
    for path in draw(frame, out_dir or default_out_dir(csv), x=x, svg=svg):
        typer.echo(str(path))


def _config_cells(config: Key) -> list[str]:
    chunk = config["ce_chunk"]
    return [config["variant"], "" if chunk is None else f"{chunk:,}", f"{config['batch']}×{config['context']}",
            f"{config['vocab']:,}", f"{config['d_model']:,}",
            f"{config['workload']} {config['device']} {config['dtype']}"]


def _metric_cells(finding: Finding) -> list[str]:
    """Metric, baseline, results, change; a memory change also in exact bytes."""
    fmt = {MEMORY: format_bytes, TIME: format_ms}.get(finding.metric, str)
    change = "" if finding.change is None else f"{finding.change:+.1%}"
    if finding.metric == MEMORY:
        change = f"{finding.current - finding.baseline:+,} B {change}".strip()
    name = {MEMORY: "peak Δ", TIME: "time median"}.get(finding.metric, finding.metric)
    return [name, fmt(finding.baseline), fmt(finding.current), change]


_CHECK_COLUMNS = ("verdict", "variant", "ce_chunk", "b×ctx", "vocab", "d_model", "workload device dtype",
                  "metric", "baseline", "results", "change")
_LEFT = ("verdict", "variant", "workload device dtype", "metric")


def _check_table(report: CheckReport) -> Table:
    """Every regressed, improved and missing point, one row each."""
    table = Table(header_style="bold")
    for name in _CHECK_COLUMNS:
        table.add_column(name, justify="left" if name in _LEFT else "right")
    missing_style = "bold red" if report.strict else "yellow"
    rows: list[tuple[Text, Finding | Missing]] = (
        [(Text("regressed", style="bold red"), f) for f in report.regressed]
        + [(Text("improved", style="green"), f) for f in report.improved]
        + [(Text(f"only in {m.only_in}", style=missing_style), m) for m in report.missing])
    for verdict, item in rows:
        if isinstance(item, Finding):
            detail = _metric_cells(item)
        else:
            detail = ["", "", "", item.detail[:60]]
        table.add_row(verdict, *_config_cells(item.config), *detail)
    return table


def _percent(fraction: Fraction) -> str:
    return f"{float(fraction * 100):g}%"


def _summary(report: CheckReport) -> Text:
    """'PASS: …' or 'FAIL: …' with the counts and the tolerances applied."""
    time = "time not gated" if report.time_tol is None else f"time tolerance {_percent(report.time_tol)}"
    strict = " (--strict: each one fails)" if report.strict and report.missing else ""
    verdict = Text("PASS" if report.passed else "FAIL", style="bold green" if report.passed else "bold red")
    return verdict.append(f": {report.matched} points matched; {len(report.regressed)} regressed, "
                          f"{len(report.improved)} improved, {len(report.missing)} missing{strict}; "
                          f"peak Δ tolerance {_percent(report.mem_tol)}, {time}", style="")


@app.command(help=(
    "Gate on peak memory: compare a results CSV with a baseline CSV, point by point. Points are matched on "
    "variant, workload, device type, dtype, batch, context, vocab, d_model and ce_chunk. A point regresses "
    "when its peak_delta_bytes grew by more than --mem-tol (growth of exactly the tolerance passes), or when "
    "it was ok in the baseline and is oom or error now; with --time-tol, also when its median step time "
    "grew by more than that. Improvements are listed. Points measured on one side only are warnings "
    f"(failures with --strict). {LAST_ROW}\n\n"
    "Exit codes: 0 pass · 1 regression (or, with --strict, a missing point) · 2 usage or input error."),
    short_help="Fail (exit 1) when peak memory grew against a baseline CSV.")
def check(
    csv: Path = typer.Argument(..., help="The results CSV to check: the new measurements.", show_default=False),
    baseline: Path = typer.Option(..., "--baseline", help="The results CSV to compare with.", show_default=False),
    mem_tol: str = typer.Option("1%", "--mem-tol", help="Allowed growth of peak_delta_bytes: 1%, 0.5% or 1 "
                                                        "(percent)."),
    time_tol: str = typer.Option(None, "--time-tol", help="Also gate on the median step time, allowing this "
                                                          "growth (percent). Default: time is not gated."),
    strict: bool = typer.Option(False, "--strict", help="Fail when a point is measured on one side only."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
) -> None:
    mem = parse_tolerance(mem_tol, "--mem-tol")
    time = None if time_tol is None else parse_tolerance(time_tol, "--time-tol")
    report = compare(load(csv), load(baseline), mem_tol=mem, time_tol=time, strict=strict,
                     names=(str(csv), str(baseline)))
    if as_json:
        typer.echo(report.to_json())
    else:
        if report.regressed or report.improved or report.missing:
            out.print(_check_table(report))
        for warning in report.warnings:
            out.print(Text(f"warning: {warning}", style="yellow"))
        out.print(_summary(report))
    if not report.passed:
        raise typer.Exit(1)
