"""`cebench predict` and `cebench fit`: peak memory at any size, without the hardware."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cebench.cli.app import check_columns, command, err, out, print_table
from cebench.cli.options import (
    FIT_POINT,
    TARGET_HELP,
    TEMPERATURE,
    Columns,
    LossVariantNames,
    MemoryUnit,
    PointTimeout,
    TargetAlias,
    Temperature,
    VariantNames,
    Wide,
    Workload,
    with_axes,
)
from cebench.commands.predict import HEADROOM
from cebench.core import devices
from cebench.run.grid import grid_params

if TYPE_CHECKING:
    from cebench.core.config import Config

Target = typer.Option(None, "--target", metavar="TARGET", show_default=False, help=TARGET_HELP)


@command(name="predict")
@with_axes()
def predict_command(
    ctx: typer.Context,
    variant: VariantNames = None,
    workload: Workload = None,
    temperature: Temperature = TEMPERATURE,
    target: str = Target,
    device: TargetAlias = None,
    out_path: Path = typer.Option(None, "--out", metavar="CSV", help="Also write the rows to this CSV (appended "
                                                                      "to if it is a cebench CSV). Default: none."),
    unit: MemoryUnit = None,
    wide: Wide = False,
    columns: Columns = None,
    point_timeout: PointTimeout = None,
) -> None:
    """Predict each variant's peak memory at any size, without the hardware.

    The step runs on `meta` tensors (nothing is allocated or computed, so a point takes
    milliseconds) under a dispatcher storage tracker that counts every tensor the step
    creates and frees. A compiled variant is compiled for the target (seconds, no kernel
    built) and inductor's generated code runs on meta (for a GPU: its Triton code for the
    card, written without one). The rows have the sweep's columns with mem_method =
    predicted and no time.
    """
    from cebench import api
    target = devices.one_name(target, device, "target", "device", "cuda")
    if columns is not None:  # checked before the work, not after a long prediction
        from cebench.render.report import column_keys

        check_columns(columns, column_keys(timed=False))
    with err.status("predicting…") as status:  # on a terminal only, gone when the table comes

        def progress(done: int, total: int, point: Config) -> None:
            chunk = f" {point.ce_chunk:,}" if point.ce_chunk else ""
            world = point.world.label
            status.update(f"predicting {done + 1}/{total}: {point.variant}{chunk} · batch {point.batch:,} × context "
                          f"{point.context:,}{' · ' + world if world else ''}…")

        rows = api.predict(target=target, out=out_path, point_timeout=point_timeout, progress=progress,
                           **grid_params(ctx.params))
    import torch  # torch and pandas after the arguments are checked: a usage error is one line at once

    from cebench.render.report import results_table
    from cebench.store.frame import to_frame
    title = f"cebench predict · target {rows[0].device if rows else target} · torch {torch.__version__}"
    print_table(results_table(to_frame(rows), title=title, unit=unit), wide, columns, checked=True)
    if out_path is not None:
        out.print(f"{len(rows)} rows → {out_path}", highlight=False)


@command(name="fit")
@with_axes(skip=("batch",), single=FIT_POINT, after="budget",
           defaults={"context": "Default: 128; with --model, the model's own longest (its config's "
                                "max_position_embeddings)."})
def fit_command(
    ctx: typer.Context,
    budget: str = typer.Option(None, metavar="BYTES", show_default=False,
                               help="Memory budget for the absolute peak (inputs included): 80GiB, 40GB, 512MiB, "
                                    "... Default: a named --target's memory (cebench targets); needed otherwise."),
    variant: LossVariantNames = None,
    target: str = Target,
    device: TargetAlias = None,
    max_batch: int = typer.Option(4096, show_default=False, help="Largest batch searched (chunked predictions cost "
                                                                 "a dozen meta ops per chunk). Default: 4096."),
    measure: bool = typer.Option(False, "--measure", help="Confirm each answer with a real run on the target "
                                                          "device (which this machine must have)."),
    headroom: str = typer.Option(HEADROOM, metavar="PERCENT", show_default=False,
                                 help="Share of the budget kept free for what cebench does not count (the CUDA "
                                      f"context, NCCL's buffers, fragmentation): 0%, 10%, ... Default: {HEADROOM}."),
    out_path: Path = typer.Option(None, "--out", metavar="CSV", help="Also write each answer's predicted row (its "
                                                                      "setting at its max batch) to this CSV, as "
                                                                      "predict writes rows. Default: none."),
    unit: MemoryUnit = None,
    wide: Wide = False,
    columns: Columns = None,
    point_timeout: PointTimeout = None,
) -> None:
    """The largest batch that fits a memory budget, per variant and ce_chunk.

    For each eager loss variant (a compiled one when named: each batch asked compiles it,
    up to 64 chunks) and each ce_chunk of the chunked ones, a search over the
    batch size, at the given context, predicts the absolute peak (inputs included) of each
    candidate on `meta` and returns the largest batch whose peak fits the budget. With
    --model, each --optimizer and --activation-checkpointing given is a group of its own
    (comma-separated: none,blocks). The row with the most tokens is highlighted (in each
    group). With --model and no --context, the context is the model's own longest
    (max_position_embeddings). Every peak stays under the budget less --headroom.
    """
    from cebench import api
    from cebench.render.fit import COLUMN_KEYS, fit_note, fit_table

    target = devices.one_name(target, device, "target", "device", "cuda")
    check_columns(columns, list(COLUMN_KEYS))  # before the work; a column this answer lacks is left out
    with out.status("searching…"):
        fitted = api.fit(budget, target=target, max_batch=max_batch, measure=measure, headroom=headroom,
                         out=out_path, point_timeout=point_timeout, **grid_params(ctx.params))
    for name, why in fitted.not_fitted.items():
        err.print(f"not fitted: {name}: {why}", style="yellow", highlight=False)
    print_table(fit_table(fitted, unit), wide, columns, checked=True)
    out.print(fit_note(fitted, unit), highlight=False)
    if out_path is not None:
        answered = sum(f.answered for f in fitted.fits)
        out.print(f"{answered} rows → {out_path}" if answered
                  else f"0 rows: nothing written to {out_path} (not one setting fits)", highlight=False)
