"""`cebench predict` and `cebench fit`: peak memory at any size, without the hardware."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
import typer
from rich.table import Table
from rich.text import Text

from cebench import variants
from cebench.cli.app import app, out
from cebench.cli.options import (Batch, CeChunk, Context, DModel, Dtype, Temperature, VariantNames, Vocab, Workload,
                                 build_grid)
from cebench.config import resolve_device
from cebench.errors import UsageError
from cebench.predict import Fit, fit, predict
from cebench.report import results_table
from cebench.results import ResultWriter, to_frame
from cebench.runner import Settings, run
from cebench.units import format_bytes, parse_bytes

Target = typer.Option("cuda", help="Device the prediction is for: cuda (storages rounded to the caching "
                                   "allocator's 512-byte blocks) or cpu (exact bytes). Sets the defaults too.")


def _target(name: str) -> str:
    name = name.strip().lower()
    if name not in ("cpu", "cuda"):
        raise UsageError(f"--target: '{name}' is not one of cpu, cuda")
    return name


@app.command(name="predict")
def predict_command(
    batch: Batch = None,
    context: Context = None,
    vocab: Vocab = None,
    d_model: DModel = None,
    ce_chunk: CeChunk = None,
    variant: VariantNames = None,
    workload: Workload = None,
    temperature: Temperature = 0.9,
    dtype: Dtype = None,
    target: str = Target,
    out_path: Path = typer.Option(None, "--out", help="Also write the rows to this CSV (appended to if it is a "
                                                      "cebench CSV). Default: no CSV."),
) -> None:
    """Predict the peak memory of each eager variant's step, at any size, in milliseconds.

    The step runs on `meta` tensors (nothing is allocated or computed) under a dispatcher
    storage tracker that counts every tensor the step creates and frees. The rows have the
    sweep's columns with mem_method = predicted and no time. Compiled variants are
    unsupported: a dispatch mode cannot see inside compiled code.
    """
    grid = build_grid(_target(target), batch, context, vocab, d_model, ce_chunk, variant, workload, dtype, temperature)
    rows = [predict(point) for point in grid.expand()]
    if out_path is not None:
        with ResultWriter(out_path) as writer:
            for row in rows:
                writer.write(row)
    out.print(results_table(to_frame(rows), title=f"cebench predict · target {grid.device} · {grid.dtype} · "
                                                  f"torch {torch.__version__}"))
    if out_path is not None:
        out.print(f"{len(rows)} rows → {out_path}")


def fit_table(fits: list[Fit], budget: int, measured: dict[int, object]) -> Table:
    """One row per variant and ce_chunk; the most tokens highlighted."""
    best = max(range(len(fits)), key=lambda i: (fits[i].tokens, -(fits[i].peak_bytes or 0)))
    dense = next((f.batch for f in fits if f.config.variant == "dense"), None)
    table = Table(title=f"cebench fit · budget {format_bytes(budget)} · target {fits[0].config.device}",
                  title_justify="left", header_style="bold")
    for name in ("variant", "ce_chunk", "max batch", "tokens", "predicted peak", "of budget", "vs dense",
                 "predictions"):
        table.add_column(name, justify="left" if name == "variant" else "right")
    if measured:
        table.add_column("measured peak", justify="right")
    for i, f in enumerate(fits):
        batch = f"≥ {f.batch:,} (limit)" if f.at_limit else f"{f.batch:,}" if f.batch else "none fits"
        cells = [f.config.variant, "" if f.config.ce_chunk is None else f"{f.config.ce_chunk:,}", batch,
                 f"{f.tokens:,}", format_bytes(f.peak_bytes),
                 "–" if f.peak_bytes is None else f"{f.peak_bytes / budget:.1%}",
                 "–" if not dense or not f.batch else f"{f.batch / dense:.2f}×", str(f.predictions)]
        if measured:
            r = measured.get(i)
            cells.append("–" if r is None else format_bytes(r.peak_bytes) if r.status == "ok" else r.status)
        style = "bold green" if i == best and f.batch else None
        table.add_row(*(Text(str(c), style=style) if style else c for c in cells))
    return table


@app.command(name="fit")
def fit_command(
    budget: str = typer.Option(..., help="Memory budget for the absolute peak (inputs included): 80GiB, 40GB, "
                                         "512MiB, ..."),
    context: Context = None,
    vocab: Vocab = None,
    d_model: DModel = None,
    ce_chunk: CeChunk = None,
    variant: VariantNames = None,
    dtype: Dtype = None,
    target: str = Target,
    max_batch: int = typer.Option(4096, help="Largest batch searched (chunked predictions cost a dozen meta ops "
                                             "per chunk)."),
    measure: bool = typer.Option(False, "--measure", help="Confirm each answer with a real run on the target "
                                                          "device (which this machine must have)."),
) -> None:
    """The largest batch that fits a memory budget, per variant and ce_chunk.

    For each eager loss variant (and each ce_chunk of the chunked ones) a search over the
    batch size, at the given context, predicts the absolute peak (inputs included) of each
    candidate on `meta` and returns the largest batch whose peak fits the budget. The row
    with the most tokens is highlighted.
    """
    budget_bytes = parse_bytes(budget)
    device = _target(target)
    if max_batch < 1:
        raise UsageError("--max-batch must be at least 1")
    if measure and device == "cuda":
        resolve_device("cuda")
    grid = build_grid(device, "1", context, vocab, d_model, ce_chunk, variant, "loss", dtype, 0.9)
    if len(grid.context) * len(grid.vocab) * len(grid.d_model) > 1:
        raise UsageError("fit takes one --context, --vocab and --d-model at a time")
    points = [p for p in grid.expand() if not variants.get(p.variant).compiled]
    if not points:
        raise UsageError("--variant: fit needs an eager variant (compiled variants cannot be predicted)")
    with out.status("searching…"):
        fits = [fit(p, budget_bytes, max_batch) for p in points]
    measured = {}
    if measure:
        with out.status("measuring each answer on the target device…"):
            measured = {i: run(replace(f.config, batch=f.batch), Settings(warmup=1, repeats=1))
                        for i, f in enumerate(fits) if f.batch}
    out.print(fit_table(fits, budget_bytes, measured))
    c = points[0]
    out.print(f"context {c.context}, vocab {c.vocab:,}, d_model {c.d_model:,}, {c.dtype}; predicted on meta tensors "
              f"for {device} (peak includes the inputs h, weight, targets).", highlight=False)
