"""`cebench sweep`: measure the grid, append each row to a CSV, print the table."""
from __future__ import annotations

import signal
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cebench.cli.app import command, err, out, print_table
from cebench.cli.options import (Batch, CeChunk, Columns, Context, DModel, Dtype, Temperature, VariantNames,
                                 Vocab, Wide, Workload)
from cebench.config import Config
from cebench.errors import UsageError
from cebench.grid import DEFAULTS, GridOptions, resolve_device

if TYPE_CHECKING:
    from cebench.results import Result


def _label(c: Config) -> str:
    chunk = f" ce_chunk={c.ce_chunk}" if c.ce_chunk else ""
    return f"{c.variant} {c.dtype} b={c.batch} ctx={c.context} V={c.vocab} d={c.d_model}{chunk}"


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (a batch scheduler's time limit, `kill`)."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def default_out() -> Path:
    """results/sweep-<local time>.csv"""
    return Path("results") / f"sweep-{datetime.now():%Y%m%d-%H%M%S}.csv"


@command()
def sweep(
    ctx: typer.Context,
    batch: Batch = None,
    context: Context = None,
    vocab: Vocab = None,
    d_model: DModel = None,
    ce_chunk: CeChunk = None,
    variant: VariantNames = None,
    workload: Workload = None,
    temperature: Temperature = 0.9,
    dtype: Dtype = None,
    device: str = typer.Option("auto", help="auto, cpu or cuda (auto: cuda when a GPU is visible)."),
    repeats: int = typer.Option(None, help="Timed steps per point. Default: cpu 4; cuda 20."),
    warmup: int = typer.Option(None, help="Untimed steps before measuring, ≥ 1 (compilation happens here). "
                                          "Default: cpu 1; cuda 3."),
    threads: int = typer.Option(None, help="torch intra-op threads, fixed for the run and recorded. "
                                           "Default: torch's own choice."),
    out_path: Path = typer.Option(None, "--out", metavar="CSV", show_default=False,
                                  help="CSV to write; an existing cebench CSV is appended to. Default: "
                                       "results/sweep-\\<time\\>.csv."),
    wide: Wide = False,
    columns: Columns = None,
) -> None:
    """Measure peak memory and step time of every variant over the grid of sizes.

    Each list option takes comma-separated values; the grid is their cartesian product,
    chunked variants also over --ce-chunk. Each row is written to the CSV as soon as it is
    measured; an oom or error is recorded as a row and the sweep goes on.
    """
    options = GridOptions.from_params(ctx.params)
    options.grid("cpu")  # every option checked before `--device auto` imports torch to look for a GPU
    grid = options.grid(resolve_device(device))
    d = DEFAULTS[grid.device]
    warmup = d.warmup if warmup is None else warmup
    repeats = d.repeats if repeats is None else repeats
    if warmup < 1 or repeats < 1:
        raise UsageError("--warmup and --repeats must be at least 1")
    if threads is not None and threads < 1:
        raise UsageError("--threads must be at least 1")
    path = out_path or default_out()

    from cebench.results import existing_header

    existing_header(path)  # a foreign --out is refused before torch is even imported

    import torch

    from cebench.report import results_table
    from cebench.results import ResultWriter, to_frame
    from cebench.runner import Settings, run

    if threads is not None:
        torch.set_num_threads(threads)
    settings = Settings(warmup=warmup, repeats=repeats)
    signal.signal(signal.SIGTERM, _terminate)  # a scheduler's kill ends the sweep as Ctrl-C does
    grid, unsupported = grid.runnable()
    for name, reason in unsupported.items():
        err.print(f"not run on {grid.device} here: {name}: {reason}", style="yellow", highlight=False)
    points = grid.expand()
    if not points:
        raise UsageError(f"no variant of the sweep can run on {grid.device} here")
    rows = []
    with ResultWriter(path) as writer, _Progress(len(points)) as progress:
        if writer.repaired:
            err.print(f"warning: {path}: its last row was cut off (a crash or a full disk?) and is dropped: "
                      f"{writer.repaired[:120]}", style="yellow", highlight=False)
        if writer.dropped:
            err.print(f"warning: {path} was written by an older cebench: its rows will lack "
                      f"{', '.join(writer.dropped)}; use a new --out to keep them", style="yellow", highlight=False)
        try:
            for point in points:
                progress.start(_label(point))
                result = run(point, settings)
                writer.write(result)
                rows.append(result)
                progress.done(_label(point), result)
        except KeyboardInterrupt as exc:
            progress.stop()
            how = "terminated" if isinstance(exc, Terminated) else "interrupted"
            err.print(f"{how}: {len(rows)} of {len(points)} rows kept in {path}", highlight=False, soft_wrap=True)
            raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None
    title = (f"cebench sweep · {grid.device} ({rows[0].device_name}) · {torch.get_num_threads()} threads · "
             f"torch {torch.__version__}")
    print_table(results_table(to_frame(rows), title=title), wide, columns)
    out.print(f"{len(rows)} rows → {path}", highlight=False)


class _Progress:
    """A progress bar with an ETA on a terminal; one plain line per finished point when
    stderr is a log (CI, make, a batch job), so a long sweep is never silent."""

    def __init__(self, total: int) -> None:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.total, self.count = total, 0
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("eta"), TimeRemainingColumn(), console=err, transient=True,
                            disable=not err.is_terminal)
        self.task = self.bar.add_task("", total=total)

    def __enter__(self) -> _Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)

    def start(self, label: str) -> None:
        self.bar.update(self.task, description=label)

    def done(self, label: str, result: Result) -> None:
        from cebench.units import format_bytes, format_ms

        self.count += 1
        self.bar.advance(self.task)
        if err.is_terminal:
            if result.status != "ok":
                err.print(f"{result.status}: {label}: {result.error}", style="yellow", highlight=False)
            return
        detail = (f"ok, peak Δ {format_bytes(result.peak_delta_bytes)}, {format_ms(result.time_ms_median)}"
                  if result.status == "ok" else f"{result.status}: {result.error}")
        err.print(f"[{self.count}/{self.total}] {label}: {detail}", highlight=False, soft_wrap=True)

    def stop(self) -> None:
        self.bar.stop()
