"""`cebench sweep`: measure the grid, append each row to a CSV, print the table."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

import torch
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from cebench import variants
from cebench.cli.app import app, err, out
from cebench.config import (DEFAULTS, Config, Grid, check_temperature, check_vocab, parse_ints, resolve_device,
                            resolve_dtype, select_variants)
from cebench.workloads import WORKLOADS
from cebench.errors import UsageError
from cebench.report import results_table
from cebench.results import ResultWriter, to_frame
from cebench.runner import Settings, run


def _label(c: Config) -> str:
    chunk = f" ce_chunk={c.ce_chunk}" if c.ce_chunk else ""
    return f"{c.variant:<18} b={c.batch} ctx={c.context} V={c.vocab} d={c.d_model}{chunk}"


def default_out() -> Path:
    return Path("results") / f"sweep-{datetime.now():%Y%m%d-%H%M%S}.csv"


def build_grid(batch: str | None, context: str | None, vocab: str | None, d_model: str | None,
               ce_chunk: str | None, variant: str | None, workload: str | None, dtype: str | None,
               device: str, temperature: float) -> Grid:
    """Parse the grid options; unset ones take the device's defaults."""
    dev = resolve_device(device)
    d = DEFAULTS[dev]
    return Grid(
        variants=select_variants(variant, workload),
        device=dev,
        dtype=resolve_dtype(dtype) if dtype else d.dtype,
        batch=parse_ints(batch, "--batch") if batch else d.batch,
        context=parse_ints(context, "--context") if context else d.context,
        vocab=check_vocab(parse_ints(vocab, "--vocab") if vocab else d.vocab),
        d_model=parse_ints(d_model, "--d-model") if d_model else d.d_model,
        ce_chunk=parse_ints(ce_chunk, "--ce-chunk") if ce_chunk else d.ce_chunk,
        temperature=check_temperature(temperature),
    )


@app.command()
def sweep(
    batch: str = typer.Option(None, help="Batch sizes, comma-separated. [default: cpu 2,8; cuda 4,8,16,32]"),
    context: str = typer.Option(None, help="Context lengths (tokens per sequence). [default: 128]"),
    vocab: str = typer.Option(None, help="Vocabulary sizes. [default: 50257]"),
    d_model: str = typer.Option(None, "--d-model", help="Hidden sizes. [default: cpu 128; cuda 2048]"),
    ce_chunk: str = typer.Option(None, "--ce-chunk",
                                 help="Rows per chunk for chunked variants. [default: cpu 256,512; cuda 2048,8192]"),
    variant: str = typer.Option(None, help=f"Variants, comma-separated, from: {', '.join(variants.names())}. "
                                           "[default: every variant of --workload]"),
    workload: str = typer.Option(None, help=f"Workloads, comma-separated: {', '.join(WORKLOADS)} (forward + backward "
                                            "of the loss; one no-grad sampling call). [default: loss]"),
    temperature: float = typer.Option(0.9, help="Sampling temperature of the sample workload (> 0)."),
    dtype: str = typer.Option(None, help="fp32, bf16 or fp16 for h and weight. [default: cpu fp32; cuda bf16]"),
    device: str = typer.Option("auto", help="auto, cpu or cuda (auto: cuda when a GPU is visible)."),
    repeats: int = typer.Option(None, help="Timed steps per point. [default: cpu 5; cuda 20]"),
    warmup: int = typer.Option(None, help="Untimed steps before measuring, ≥ 1 (compilation happens here). "
                                          "[default: cpu 1; cuda 3]"),
    threads: int = typer.Option(None, help="torch intra-op threads, fixed for the run and recorded. "
                                           "[default: torch's own choice]"),
    out_path: Path = typer.Option(None, "--out", help="CSV to write; an existing cebench CSV is appended to. "
                                                      "[default: results/sweep-<time>.csv]"),
) -> None:
    """Measure peak memory and step time of every variant over the grid of sizes.

    Each list option takes comma-separated values; the grid is their cartesian product,
    chunked variants also over --ce-chunk. Each row is written to the CSV as soon as it is
    measured; an oom or error is recorded as a row and the sweep goes on.
    """
    grid = build_grid(batch, context, vocab, d_model, ce_chunk, variant, workload, dtype, device, temperature)
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
