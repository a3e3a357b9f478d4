"""`cebench predict` and `cebench fit`: peak memory at any size, without the hardware."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.text import Text

from cebench.cli.app import command, err, out, print_table
from cebench.cli.options import (
    ONE_POINT,
    TARGET_HELP,
    Columns,
    LossVariantNames,
    TargetAlias,
    Temperature,
    VariantNames,
    Wide,
    Workload,
    one_name,
    with_axes,
)
from cebench.core.config import LOSS
from cebench.core.units import format_bytes, parse_bytes
from cebench.losses import variants
from cebench.render.table import Column, Table
from cebench.run.grid import grid_params

if TYPE_CHECKING:
    from cebench.analyze.predict import Fit
    from cebench.store.schema import Result

Target = typer.Option(None, "--target", metavar="TARGET", show_default=False, help=TARGET_HELP)


@command(name="predict")
@with_axes()
def predict_command(
    ctx: typer.Context,
    variant: VariantNames = None,
    workload: Workload = None,
    temperature: Temperature = 0.9,
    target: str = Target,
    device: TargetAlias = None,
    out_path: Path = typer.Option(None, "--out", metavar="CSV", help="Also write the rows to this CSV (appended "
                                                                      "to if it is a cebench CSV). Default: none."),
    wide: Wide = False,
    columns: Columns = None,
) -> None:
    """Predict each eager variant's peak memory at any size, without the hardware.

    The step runs on `meta` tensors (nothing is allocated or computed, so a point takes
    milliseconds) under a dispatcher storage tracker that counts every tensor the step
    creates and frees. The rows have the sweep's columns with mem_method = predicted and
    no time. Compiled variants are unsupported: a dispatch mode cannot see inside
    compiled code.
    """
    import torch

    from cebench import api
    from cebench.render.report import results_table
    from cebench.store.frame import to_frame

    target = one_name(target, device, "target", "device", "cuda")
    rows = api.predict(target=target, out=out_path, **grid_params(ctx.params))
    title = f"cebench predict · target {rows[0].device if rows else target} · torch {torch.__version__}"
    print_table(results_table(to_frame(rows), title=title), wide, columns)
    if out_path is not None:
        out.print(f"{len(rows)} rows → {out_path}", highlight=False)


def fit_table(fits: list[Fit], budget: int, measured: Mapping[int, Result], alone: Mapping[int, Fit]) -> Table:
    """One row per variant and ce_chunk, with the loss alone's answer where `alone` has one;
    the most tokens highlighted."""
    from cebench.store.schema import Status

    best = max(range(len(fits)), key=lambda i: (fits[i].tokens, -(fits[i].peak_bytes or 0)))
    base = variants.baseline(LOSS)
    base_batch = next((f.batch for f in fits if f.config.variant == base), None)
    specs = [("variant", "variant", 0), ("ce_chunk", "chunk", 0), ("batch", "max batch", 0), ("tokens", "tokens", 1),
             ("peak_bytes", "predicted peak", 0), ("of_budget", "of budget", 2), ("vs_base", f"vs {base}", 1),
             ("predictions", "predictions", 3)]
    if alone:
        specs[3:3] = [("alone", "loss alone", 0), ("alone_vs_base", f"alone vs {base}", 2)]
        alone_base = next((alone[i].batch for i, f in enumerate(fits) if f.config.variant == base and i in alone),
                          None)
    if measured:
        specs.append(("measured", "measured peak", 0))
    table = Table([Column(k, h, right=k != "variant", priority=p) for k, h, p in specs],
                  title=f"cebench fit · budget {format_bytes(budget)} · target {fits[0].config.device}")
    for i, f in enumerate(fits):
        batch = f"≥ {f.batch:,} (limit)" if f.at_limit else f"{f.batch:,}" if f.batch else "none fits"
        cells = [f.config.variant, "" if f.config.ce_chunk is None else f"{f.config.ce_chunk:,}", batch,
                 f"{f.tokens:,}", format_bytes(f.peak_bytes),
                 "–" if f.peak_bytes is None else f"{f.peak_bytes / budget:.1%}",
                 "–" if not base_batch or not f.batch else f"{f.batch / base_batch:.2f}×", str(f.predictions)]
        if alone:
            a = alone.get(i)
            cells[3:3] = ["–" if a is None else f"≥ {a.batch:,}" if a.at_limit else f"{a.batch:,}",
                          "–" if a is None or not a.batch or not alone_base else f"{a.batch / alone_base:.2f}×"]
        if measured:
            r = measured.get(i)
            cells.append("–" if r is None else format_bytes(r.peak_bytes) if r.status == Status.OK else r.status)
        style = "bold green" if i == best and f.batch else ""
        table.add_row(*(Text(c, style=style) for c in cells))
    return table


@command(name="fit")
@with_axes(skip=("batch",), single=ONE_POINT, after="budget")
def fit_command(
    ctx: typer.Context,
    budget: str = typer.Option(None, metavar="BYTES", show_default=False,
                               help="Memory budget for the absolute peak (inputs included): 80GiB, 40GB, 512MiB, "
                                    "... Default: a named --target's memory (cebench targets); needed otherwise."),
    variant: LossVariantNames = None,
    target: str = Target,
    device: TargetAlias = None,
    max_batch: int = typer.Option(4096, help="Largest batch searched (chunked predictions cost a dozen meta ops "
                                             "per chunk)."),
    measure: bool = typer.Option(False, "--measure", help="Confirm each answer with a real run on the target "
                                                          "device (which this machine must have)."),
    wide: Wide = False,
    columns: Columns = None,
) -> None:
    """The largest batch that fits a memory budget, per variant and ce_chunk.

    For each eager loss variant (and each ce_chunk of the chunked ones) a search over the
    batch size, at the given context, predicts the absolute peak (inputs included) of each
    candidate on `meta` and returns the largest batch whose peak fits the budget. The row
    with the most tokens is highlighted.
    """
    from cebench import api

    target = one_name(target, device, "target", "device", "cuda")
    budget_bytes = None if budget is None else parse_bytes(budget)
    with out.status("searching…"):
        fitted = api.fit(budget_bytes, target=target, max_batch=max_batch, measure=measure,
                         **grid_params(ctx.params))
    for name, why in fitted.not_fitted.items():
        err.print(f"not fitted: {name}: {why}", style="yellow", highlight=False)
    print_table(fit_table(fitted.fits, fitted.budget, fitted.measured, fitted.alone), wide, columns)
    c = fitted.fits[0].config
    from cebench.core import devices

    workspaces = " and its cuBLAS workspaces" if devices.get(c.device).workspace_bytes else ""
    inputs = "the inputs h, weight, targets"
    if c.has_model:
        inputs = (f"the whole training step of {c.model}: parameters, gradients, {c.optimizer} state, activations "
                  f"(checkpointing {c.activation_checkpointing}), the loss; loss alone: the loss step by itself at "
                  f"the same vocab and d_model, with {inputs}")
    out.print(f"context {c.context}, vocab {c.vocab:,}, d_model {c.d_model:,}, {c.dtype}; predicted on meta tensors "
              f"for {c.device} (peak includes {inputs}{workspaces}).", highlight=False)
