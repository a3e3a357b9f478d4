"""`cebench explain`: what one step holds at its peak, as a table and a figure."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cebench.cli.app import check_columns, command, err, out, print_table, user_prints_to_stderr
from cebench.cli.options import (
    LIST,
    ONE_POINT,
    TARGETS_TEXT,
    Columns,
    DeviceAlias,
    MemoryUnit,
    PointTimeout,
    Wide,
    with_axes,
)
from cebench.commands.explain import EXPLAIN_VARIANTS
from cebench.core import devices
from cebench.core.axes import BY_NAME as AXES_BY_NAME
from cebench.core.errors import UsageError
from cebench.render.explain import BREAKDOWN_COLUMNS, KINDS_NOTE, anatomy_columns, anatomy_table, breakdown_table
from cebench.run.grid import grid_params

if TYPE_CHECKING:
    from cebench.analyze.anatomy import Anatomy

Variants = Annotated[str | None, typer.Option(
    "--variant", metavar=LIST, help="Loss variants, comma-separated (see cebench variants; compiled ones on a real "
                                    f"device only). Default: {EXPLAIN_VARIANTS}.")]


FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def default_out() -> Path:
    """results/explain-<local time>.png"""
    return Path("results") / f"explain-{datetime.now():%Y%m%d-%H%M%S}.png"


def check_out(path: Path) -> None:
    """`--out` checked before any work: a figure's name, in a place that can be written."""
    from cebench.store.files import writable

    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise UsageError(f"'{path}' is not a figure's name: give one ending in {', '.join(FIGURE_SUFFIXES)}", "out")
    writable(path)


def _show_anatomies(anatomies: list[Anatomy], skipped: dict[str, str], out_path: Path | None, as_json: bool,
                    wide: bool, columns: str | None, unit: str | None) -> None:
    """`explain --model`'s output: the parts table and the bar figure, or the JSON document."""

    from cebench.render.anatomy_plot import save

    path = save(anatomies, out_path or default_out()) if out_path is not None or not as_json else None
    if as_json:
        from cebench.core.version import __version__

        typer.echo(json.dumps({"cebench_version": __version__, "figure": None if path is None else str(path),
                               "anatomies": [{**a.config.plain(), "peak_bytes": a.peak_bytes, "parts": a.parts,
                                              "peak_in": a.when, "predicted_time_ms": a.time_ms} for a in anatomies],
                               "not_explained": skipped}, indent=2))
        return
    print_table(anatomy_table(anatomies, unit), wide, columns)
    out.print(f"figure → {path}", highlight=False, soft_wrap=True)


@command(name="explain")
@with_axes(single=ONE_POINT,
           defaults={"batch": "Default: the largest of sweep's defaults: cpu 8; cuda 32."})
def explain_command(
    ctx: typer.Context,
    variant: Variants = None,
    device: str = typer.Option(None, "--device", metavar="DEVICE", show_default=False,
                               help="Device to explain the step on: auto (cuda when a GPU is visible), cpu or cuda; "
                                    "cuda without a GPU here, or a named GPU to predict for "
                                    f"({TARGETS_TEXT}), is traced on meta tensors. Sets the defaults too. Default: "
                                    "auto."),
    target: DeviceAlias = None,
    meta: bool = typer.Option(False, "--meta", help="Trace on meta tensors for --device (nothing allocated or "
                                                    "computed; eager variants only) instead of running the step."),
    out_path: Path = typer.Option(None, "--out", metavar="PNG", show_default=False,
                                  help="Where to write the figure (.png, .svg or .pdf). Default: "
                                       "results/explain-\\<time\\>.png; none with --json."),
    as_json: bool = typer.Option(False, "--json", help="Print the breakdowns as JSON (nothing else on stdout); "
                                                       "the figure only where --out is given."),
    unit: MemoryUnit = None,
    wide: Wide = False,
    columns: Columns = None,
    point_timeout: PointTimeout = None,
) -> None:
    """What one loss step holds at its peak, tensor by tensor, and when.

    Records every allocation and free of one step (forward + backward) with the op that
    made it: on a real device from the allocator's events under torch.profiler (exact:
    the peak is the number sweep measures), on meta tensors from a dispatcher tracker
    (the number predict gives). Each tensor is a gradient (of h's or weight's shape), saved
    for backward, or temporary. Prints what is alive at the peak, grouped by shape and
    dtype, and draws the live bytes over the step, one panel per variant and ce_chunk.
    """
    from cebench import api

    by_part = not AXES_BY_NAME["model"].is_off(ctx.params.get("model"))  # a model's step is shown part by part
    keys = [c.key for c in (anatomy_columns(timed=True) if by_part else BREAKDOWN_COLUMNS)]
    check_columns(columns, keys)  # before the work
    if out_path is not None:
        check_out(out_path)
    with err.status("explaining…"), user_prints_to_stderr(as_json):  # stdout: the JSON alone
        if target is not None:  # --target: another name for --device (errors name the option typed)
            devices.one_name(device, target, "device", "target", "auto")
            explained = api.explain(target=target, meta=meta, point_timeout=point_timeout,
                                    **grid_params(ctx.params))
        else:
            explained = api.explain(device=device or "auto", meta=meta, point_timeout=point_timeout,
                                    **grid_params(ctx.params))
    done, skipped = explained.explanations, dict(explained.not_explained)
    for label, why in skipped.items():
        err.print(f"not explained: {label}: {why}", style="yellow", highlight=False)
    if explained.anatomies:
        _show_anatomies(explained.anatomies, skipped, out_path, as_json, wide, columns, unit)
        return

    import torch

    from cebench.analyze.explain import to_json
    from cebench.render.explain_plot import save

    if not done:
        raise UsageError("--variant: nothing to explain here (see above)")
    path = save(done, out_path or default_out()) if out_path is not None or not as_json else None
    if as_json:
        from cebench.core.version import __version__

        typer.echo(json.dumps({"cebench_version": __version__, "torch_version": torch.__version__,
                               "figure": None if path is None else str(path),
                               "explanations": [to_json(e) for e in done], "not_explained": skipped}, indent=2))
        return
    for e in done:
        print_table(breakdown_table(e, unit), wide, columns)
        out.print()
    out.print(KINDS_NOTE, style="dim", highlight=False)
    out.print(f"figure → {path}", highlight=False, soft_wrap=True)  # a path stays whole, to copy
