"""`cebench explain`: what one step holds at its peak, as a table and a figure."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cebench.api import EXPLAIN_VARIANTS
from cebench.cli.app import check_columns, command, err, out, print_table
from cebench.cli.options import LIST, ONE_POINT, TARGETS_TEXT, Columns, DeviceAlias, Wide, one_name, with_axes
from cebench.core.axes import BY_NAME as AXES_BY_NAME
from cebench.core.errors import UsageError
from cebench.core.units import format_bytes
from cebench.render.table import Column, Table
from cebench.run.grid import grid_params

if TYPE_CHECKING:
    from cebench.analyze.anatomy import Anatomy
    from cebench.analyze.explain import Explanation

KINDS_NOTE = ("kinds: gradient = a tensor of h's or weight's shape and dtype; saved = made in the forward (or "
              "recomputed in backward) and kept for a later backward node; temporary = the rest. inside = the "
              "autograd node running, or the custom op around it.")
Variants = Annotated[str | None, typer.Option(
    "--variant", metavar=LIST, help="Loss variants, comma-separated (see cebench variants; compiled ones on a real "
                                    f"device only). Default: {EXPLAIN_VARIANTS}.")]


FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
BREAKDOWN_COLUMNS = [Column("kind", "kind", right=False), Column("op", "created by", right=False),
                     Column("phase", "phase", right=False), Column("inside", "inside", right=False, priority=2),
                     Column("count", "×", priority=1), Column("bytes", "bytes"), Column("share", "of peak")]


def default_out() -> Path:
    """results/explain-<local time>.png"""
    return Path("results") / f"explain-{datetime.now():%Y%m%d-%H%M%S}.png"


def check_out(path: Path) -> None:
    """`--out` checked before any work: a figure's name, in a place that can be written."""
    from cebench.store.files import writable

    if path.suffix.lower() not in FIGURE_SUFFIXES:
        raise UsageError(f"'{path}' is not a figure's name: give one ending in {', '.join(FIGURE_SUFFIXES)}", "out")
    writable(path)


def breakdown_table(e: Explanation) -> Table:
    """What is alive at the peak: a line per group of one shape and dtype, a row per kind of
    tensor in it (kind, creating op, phase, autograd node or custom op), then the total."""
    from cebench.analyze.explain import group_text, sizes_text
    from cebench.store.schema import PREDICTED

    c = e.config
    name = c.variant if c.ce_chunk is None else f"{c.variant} · ce_chunk {c.ce_chunk:,}"
    how = f"predicted for {c.device} on meta tensors" if e.method == PREDICTED else f"{c.device}, allocator events"
    table = Table(list(BREAKDOWN_COLUMNS), title=f"cebench explain · {name} · {c.dtype} · {how}")

    def share(nbytes: int) -> str:
        return f"{nbytes / e.peak_delta_bytes:.1%}" if e.peak_delta_bytes else "–"

    for g in e.groups:
        table.add_group(f"{group_text(g, c)}: {format_bytes(g.nbytes)}, {share(g.nbytes)}")
        for x in g.entries:
            table.add_row(x.kind, x.op, x.phase, x.node or "–", str(x.count), format_bytes(x.nbytes), share(x.nbytes))
    table.add_row("total", "", "", "", str(sum(g.count for g in e.groups)), format_bytes(e.breakdown_bytes),
                  share(e.breakdown_bytes))
    peak = e.peak_block
    if peak is None:
        table.notes.append("the step allocated nothing that outlived an earlier free: peak Δ 0 B")
    else:
        where = f"{peak.phase}{f', {peak.node}' if peak.node else ''}: {peak.op}"
        table.notes.append(f"peak Δ {format_bytes(e.peak_delta_bytes)} = {e.peak_delta_bytes:,} B at event "
                           f"{e.peak_event + 1} of {len(e.timeline.events)} ({where})")
    if e.residue_bytes:
        table.notes.append(f"the tensors above sum to {e.breakdown_bytes:,} B: {e.residue_bytes:,} B of the peak Δ "
                           "are frees, before the peak, of memory allocated before the step")
    else:
        table.notes.append("the tensors above sum to the peak Δ exactly")
    table.notes.append(f"{sizes_text(c)}; inputs h, weight, targets: {format_bytes(e.base_bytes)} before the step, "
                       "not in the peak Δ")
    if any(x.op.startswith("compiled graph") for g in e.groups for x in g.entries):
        table.notes.append("compiled graph → op: a buffer of compiled code, named by the first op of the graph that "
                           "takes it whole (its shape comes from there); no finer attribution is recorded")
    return table


def anatomy_columns() -> list[Column]:
    """The columns of `anatomy_table`: the variant, the step peak, each part, where the peak is."""
    from cebench.analyze.anatomy import PARTS

    return [Column("variant", "variant", right=False), Column("peak", "step peak"),
            *(Column(p, p, priority=1) for p in PARTS), Column("when", "peak in", right=False)]


def anatomy_table(anatomies: list[Anatomy]) -> Table:
    """One row per variant and ce_chunk: the predicted step peak, each part's bytes at it, and
    the part of the step it falls in."""
    from cebench.analyze.anatomy import PARTS
    from cebench.render.anatomy_plot import label

    c = anatomies[0].config
    table = Table(anatomy_columns(), title=f"cebench explain · {c.model} · {c.optimizer} · checkpointing "
                                 f"{c.activation_checkpointing} · batch {c.batch} × context {c.context} · {c.dtype} · "
                                 f"{c.device} (predicted on meta)")
    for a in anatomies:
        table.add_row(label(a), format_bytes(a.peak_bytes), *(format_bytes(a.parts[p]) for p in PARTS), a.when)
    table.notes.append("parts at the peak: parameters and optimizer state exist before the step; gradients = the "
                       "parameters' .grad made in the backward; activations = the body's forward saved (or recomputed) "
                       "for its backward; loss = made from the loss's call until the gradient of h is ready; optimizer "
                       "step = its temporaries; other = the token ids and targets, the body backward's temporaries, "
                       "workspaces")
    return table


def _show_anatomies(anatomies: list[Anatomy], skipped: dict[str, str], out_path: Path | None, as_json: bool,
                    wide: bool, columns: list[str] | None) -> None:
    """`explain --model`'s output: the parts table and the bar figure, or the JSON document."""
    from dataclasses import asdict

    from cebench.render.anatomy_plot import save

    path = save(anatomies, out_path or default_out()) if out_path is not None or not as_json else None
    if as_json:
        from cebench.core.version import __version__

        typer.echo(json.dumps({"cebench_version": __version__, "figure": None if path is None else str(path),
                               "anatomies": [{**asdict(a.config), "peak_bytes": a.peak_bytes, "parts": a.parts,
                                              "peak_in": a.when} for a in anatomies],
                               "not_explained": skipped}, indent=2))
        return
    print_table(anatomy_table(anatomies), wide, columns)
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
    wide: Wide = False,
    columns: Columns = None,
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
    check_columns(columns, [c.key for c in (anatomy_columns() if by_part else BREAKDOWN_COLUMNS)])  # before the work
    if out_path is not None:
        check_out(out_path)
    with err.status("explaining…"):
        if target is not None:  # --target: another name for --device (errors name the option typed)
            one_name(device, target, "device", "target", "auto")
            explained = api.explain(target=target, meta=meta, **grid_params(ctx.params))
        else:
            explained = api.explain(device=device or "auto", meta=meta, **grid_params(ctx.params))
    done, skipped = explained.explanations, dict(explained.not_explained)
    for label, why in skipped.items():
        err.print(f"not explained: {label}: {why}", style="yellow", highlight=False)
    if explained.anatomies:
        _show_anatomies(explained.anatomies, skipped, out_path, as_json, wide, columns)
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
        print_table(breakdown_table(e), wide, columns)
        out.print()
    out.print(KINDS_NOTE, style="dim", highlight=False)
    out.print(f"figure → {path}", highlight=False, soft_wrap=True)  # a path stays whole, to copy
