"""`cebench explain`'s tables: what one loss step holds at its peak (`breakdown_table`, from
an `Explanation`), and a model's training step part by part (`anatomy_table`, from its
`Anatomy`s)."""
from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from cebench.core.axes import Compile
from cebench.core.units import format_bytes, format_ms
from cebench.render.table import Column, ColumnNote, Table

if TYPE_CHECKING:
    from cebench.analyze.anatomy import Anatomy
    from cebench.analyze.explain import Explanation

KINDS_NOTE = ("kinds: gradient = a tensor of h's or weight's shape and dtype; saved = made in the forward (or "
              "recomputed in backward) and kept for a later backward node; temporary = the rest. inside = the "
              "autograd node running, or the custom op around it.")
BREAKDOWN_COLUMNS = [Column("kind", "kind", right=False), Column("op", "created by", right=False),
                     Column("phase", "phase", right=False), Column("inside", "inside", right=False, priority=2),
                     Column("count", "×", priority=1), Column("bytes", "bytes"), Column("share", "of peak")]


def breakdown_table(e: Explanation, unit: str | None = None) -> Table:
    """What is alive at the peak: a line per group of one shape and dtype, a row per kind of
    tensor in it (kind, creating op, phase, autograd node or custom op), then the total;
    memory in `unit` (`cebench.core.units.BYTE_UNITS`; None: each number its own)."""
    from cebench.analyze.explain import group_text, sizes_text
    from cebench.store.schema import PREDICTED

    c = e.config
    name = c.variant if c.ce_chunk is None else f"{c.variant} · ce_chunk {c.ce_chunk:,}"
    how = f"predicted for {c.device} on meta tensors" if e.method == PREDICTED else f"{c.device}, allocator events"
    table = Table(list(BREAKDOWN_COLUMNS), title=f"cebench explain · {name} · {c.dtype} · {how}")

    def share(nbytes: int) -> str:
        return f"{nbytes / e.peak_delta_bytes:.1%}" if e.peak_delta_bytes else "–"

    for g in e.groups:
        table.add_group(f"{group_text(g, c)}: {format_bytes(g.nbytes, unit)}, {share(g.nbytes)}")
        for x in g.entries:
            table.add_row(x.kind, x.op, x.phase, x.node or "–", str(x.count), format_bytes(x.nbytes, unit),
                          share(x.nbytes))
    table.add_row("total", "", "", "", str(sum(g.count for g in e.groups)), format_bytes(e.breakdown_bytes, unit),
                  share(e.breakdown_bytes))
    peak = e.peak_block
    if peak is None:
        table.notes.append("the step allocated nothing that outlived an earlier free: peak Δ 0 B")
    else:
        assert e.peak_event is not None  # the event of `peak`
        where = f"{peak.phase}{f', {peak.node}' if peak.node else ''}: {peak.op}"
        table.notes.append(f"peak Δ {format_bytes(e.peak_delta_bytes, unit)} = {e.peak_delta_bytes:,} B at event "
                           f"{e.peak_event + 1} of {len(e.timeline.events)} ({where})")
    if e.residue_bytes:
        table.notes.append(f"the tensors above sum to {e.breakdown_bytes:,} B: {e.residue_bytes:,} B of the peak Δ "
                           "are frees, before the peak, of memory allocated before the step")
    else:
        table.notes.append("the tensors above sum to the peak Δ exactly")
    table.notes.append(f"{sizes_text(c)}; inputs h, weight, targets: {format_bytes(e.base_bytes, unit)} before the "
                       "step, not in the peak Δ")
    if e.time_ms is not None:
        table.notes.append(f"predicted step time on {c.device}: {format_ms(e.time_ms)} (the time model: a roofline "
                           "over the traced ops, calibrated on published rows; cebench targets)")
    if any(x.op.startswith("compiled graph") for g in e.groups for x in g.entries):
        table.notes.append("compiled graph → op: a buffer of compiled code, named by the first op of the graph that "
                           "takes it whole (its shape comes from there); no finer attribution is recorded")
    return table


def anatomy_columns(timed: bool = False, equal: Collection[str] = (), largest: Sequence[int] = ()) -> list[Column]:
    """The columns of `anatomy_table`: the variant, the step peak, each part, where the peak
    is, and (`timed`) the step's predicted time. On a narrow terminal the parts in `equal` (the
    same bytes in every row compared: nothing to tell the rows apart) are the first left out,
    then the others from the smallest: `largest` holds each part's most bytes in any row, in
    `PARTS` order (none given: in that order)."""
    from cebench.analyze.anatomy import PARTS

    sizes = dict(zip(PARTS, largest, strict=True)) if largest else {}
    order = sorted((p for p in PARTS if p not in equal), key=lambda p: -sizes.get(p, 0))

    def priority(part: str) -> int:  # 1 is kept longest; higher numbers are dropped first
        return 1 + len(PARTS) + 1 if part in equal else 1 + order.index(part)

    return [Column("variant", "variant", right=False), Column("peak", "step peak"),
            *(Column(p, p, priority=priority(p)) for p in PARTS), Column("when", "peak in", right=False),
            *([Column("time", "pred. time")] if timed else [])]


def equal_parts(anatomies: Sequence[Anatomy]) -> list[str]:
    """The parts whose bytes are the same in every one of two anatomies or more ([] for one:
    nothing compared)."""
    from cebench.analyze.anatomy import PARTS

    if len(anatomies) < 2:
        return []
    return [p for p in PARTS if len({a.parts[p] for a in anatomies}) == 1]


def anatomy_table(anatomies: list[Anatomy], unit: str | None = None) -> Table:
    """One row per variant and ce_chunk: the predicted step peak, each part's bytes at it (in
    `unit`, as `breakdown_table`), and the part of the step it falls in."""
    from cebench.analyze.anatomy import PARTS
    from cebench.render.anatomy_plot import label

    c = anatomies[0].config
    sharded = f" · {c.world.label}, per rank" if c.world.sharded else ""
    sharded = (" · compiled blocks" if c.compile == Compile.BLOCKS else "") + sharded
    timed = any(a.time_ms is not None for a in anatomies)
    equal = equal_parts(anatomies)
    largest = [max(a.parts[p] for a in anatomies) for p in PARTS]
    title = (f"cebench explain · {c.model} · {c.optimizer} · checkpointing {c.activation_checkpointing}{sharded} · "
             f"batch {c.batch} × context {c.context} · {c.dtype} · {c.device} (predicted on meta)")
    table = Table(anatomy_columns(timed, equal, largest), title=title)
    for a in anatomies:
        table.add_row(label(a), format_bytes(a.peak_bytes, unit), *(format_bytes(a.parts[p], unit) for p in PARTS),
                      a.when, *([format_ms(a.time_ms) if a.time_ms is not None else "–"] if timed else []))
    table.notes.append("parts at the peak: parameters and optimizer state exist before the step; gradients = the "
                       "parameters' .grad made in the backward; in flight = what FSDP gathers and reduces for the "
                       "blocks at work (all-gather buffers, unsharded parameters, reduce-scatter inputs); activations "
                       "= the body's forward saved (or recomputed) for its backward; loss = made from the loss's call "
                       "until the gradient of h is ready; optimizer step = its temporaries; other = the token ids and "
                       "targets, the body backward's temporaries, workspaces")
    if timed:
        table.notes.append("pred. time: the whole step's predicted time on the target (the time model: a roofline over "
                           "the traced ops, calibrated on published rows; cebench targets)")
    table.notes.append(ColumnNote(tuple((p, f"{p} {format_bytes(anatomies[0].parts[p], unit)}") for p in equal),
                                  of_hidden=True, lead="left out, the same in every row: "))
    return table
