"""`cebench sweep`: measure the grid, append each row to a CSV, print the table."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import torch
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from cebench.cli.app import app, err, out
from cebench.cli.options import (Batch, CeChunk, Context, DModel, Dtype, Temperature, VariantNames, Vocab, Workload,
                                 build_grid)
from cebench.config import DEFAULTS, Config, resolve_device
from cebench.errors import UsageError
from cebench.report import results_table
from cebench.results import ResultWriter, to_frame
from cebench.runner import Settings, run


def _label(c: Config) -> str:
    chunk = f" ce_chunk={c.ce_chunk}" if c.ce_chunk else ""
    return f"{c.variant:<18} b={c.batch} ctx={c.context} V={c.vocab} d={c.d_model}{chunk}"


def default_out() -> Path:
    """results/sweep-<local time>.csv"""
    return Path("results") / f"sweep-{datetime.now():%Y%m%d-%H%M%S}.csv"


@app.command()
def sweep(
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
    repeats: int = typer.Option(None, help="Timed steps per point. Default: cpu 5; cuda 20."),
    warmup: int = typer.Option(None, help="Untimed steps before measuring, ≥ 1 (compilation happens here). "
                                          "Default: cpu 1; cuda 3."),
    threads: int = typer.Option(None, help="torch intra-op threads, fixed for the run and recorded. "
                                           "Default: torch's own choice."),
    out_path: Path = typer.Option(None, "--out", help="CSV to write; an existing cebench CSV is appended to. "
                                                      "Default: results/sweep-<time>.csv."),
) -> None:
    """Measure peak memory and step time of every variant over the grid of sizes.

    Each list option takes comma-separated values; the grid is their cartesian product,
    chunked variants also over --ce-chunk. Each row is written to the CSV as soon as it is
    measured; an oom or error is recorded as a row and the sweep goes on.
    """
    grid = build_grid(resolve_device(device), batch, context, vocab, d_model, ce_chunk, variant, workload, dtype,
                      temperature)
    d = DEFAULTS[grid.device]
    settings = Settings(warmup=d.warmup if warmup is None else warmup, repeats=d.repeats if repeats is None else repeats)
    if settings.warmup < 1 or settings.repeats < 1:
        raise UsageError("--warmup and --repeats must be at least 1")
    if threads is not None:
        if threads < 1:
            raise UsageError("--threads must be at least 1")
        torch.set_num_threads(threads)
    points = grid.expand()
    path = out_path or default_out()
    rows = []
    with ResultWriter(path) as writer, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=err, transient=True,
    ) as progress:
        task = progress.add_task("", total=len(points))
        try:
            for point in points:
                progress.update(task, description=_label(point))
                result = run(point, settings)
                writer.write(result)
                rows.append(result)
                if result.status != "ok":
                    progress.console.print(f"[yellow]{result.status}[/]: {_label(point)}: {result.error}",
                                           highlight=False)
                progress.advance(task)
        except KeyboardInterrupt:
            progress.stop()
            err.print(f"interrupted: {len(rows)} of {len(points)} rows kept in {path}")
            raise typer.Exit(130) from None
    title = f"cebench sweep · {grid.device} ({rows[0].device_name}) · {torch.get_num_threads()} threads · torch {torch.__version__}"
    out.print(results_table(to_frame(rows), title=title))
    out.print(f"{len(rows)} rows → {path}  (peak Δ = peak − memory live before the step)")
