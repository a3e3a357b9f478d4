"""What one step holds at its peak, and when: the computation behind `cebench explain`.

A step is recorded allocation by allocation — on a real device from the allocator's
events under `torch.profiler` (`cebench.measure.allocations`), on `meta` tensors by the
dispatcher's `OpTracker` — then each tensor is given a kind, and the tensors alive at the
peak are grouped by shape and dtype.

Kinds:
- gradient: a tensor of `h`'s or `weight`'s shape and dtype made outside recomputed
  forward work: their gradients, partial gradients on the way to them, gradients computed
  ahead in the forward (torch-lce). Where the shape is unknown (a buffer of compiled code
  no operator takes whole), a tensor of their size.
- saved: made in the forward and still alive when the backward starts (saved for
  backward), or made by forward work recomputed inside a backward node and used by a
  later node.
- temporary: everything else, the loss and the seed gradient included.
The inputs (`h`, `weight`, `targets`) exist before the step: they are `base_bytes`, not
part of the peak Δ, and are not drawn.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass

from cebench.core.config import ITEMSIZE, Config
from cebench.core.errors import describe
from cebench.core.memory import round_up
from cebench.engine import support
from cebench.engine.costs import Costs
from cebench.engine.trace import OpaqueOp, step_time, trace
from cebench.engine.tracker import OpTracker
from cebench.losses import inputs as inputs_mod
from cebench.losses import variants
from cebench.losses.workloads import make_step
from cebench.measure.allocations import ProfiledStep
from cebench.measure.timeline import FORWARD, RECOMPUTE, Block, Timeline
from cebench.store.schema import PREDICTED

GRADIENT, SAVED, TEMPORARY = "gradient", "saved", "temporary"
KINDS = (GRADIENT, SAVED, TEMPORARY)  # drawn bottom up


class Unexplainable(Exception):
    """The variant cannot be explained here this way (the message says why)."""


@dataclass(frozen=True)
class Entry:
    """`count` tensors alive at the peak alike in shape, dtype, kind, creating op, phase
    and autograd node (or enclosing custom op); `nbytes` for all of them."""

    shape: tuple[int, ...] | None
    dtype: str | None
    kind: str
    op: str
    phase: str
    node: str | None
    count: int
    nbytes: int


@dataclass(frozen=True)
class Group:
    """The tensors alive at the peak of one shape and dtype, `each` bytes each (shape None:
    unknown; then the group is the tensors of that size), by entry, largest first."""

    shape: tuple[int, ...] | None
    dtype: str | None
    each: int
    entries: tuple[Entry, ...]

    @property
    def count(self) -> int:
        return sum(e.count for e in self.entries)

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries)


@dataclass(frozen=True)
class Explanation:
    """One step of `config`, recorded by `method` (`cpu-allocator-events`,
    `cuda-allocator-events`, or `predicted` on meta tensors), its tensors' kinds (one per
    block of the timeline), and what is alive at its peak (`groups`, largest first).
    `peak_delta_bytes` is the highest running sum of the events: the number `sweep`
    (`predict` on meta) reports for the same step. `time_ms`: on meta for a named GPU, the
    step's predicted time (`cebench.core.timemodel`; None where it cannot be predicted)."""

    config: Config
    method: str
    base_bytes: int
    timeline: Timeline
    kinds: tuple[str, ...]
    peak_event: int | None
    peak_delta_bytes: int
    groups: tuple[Group, ...]
    time_ms: float | None = None

    @property
    def breakdown_bytes(self) -> int:
        """The bytes of the tensors alive at the peak."""
        return sum(g.nbytes for g in self.groups)

    @property
    def residue_bytes(self) -> int:
        """Peak Δ − breakdown: frees, before the peak, of memory allocated before the step
        (the running sum counts them; no tensor of the step is behind them)."""
        return self.peak_delta_bytes - self.breakdown_bytes

    @property
    def peak_block(self) -> Block | None:
        """The allocation that reached the peak."""
        if self.peak_event is None:
            return None
        block = self.timeline.events[self.peak_event][0]  # an allocation: a free never raises the peak
        return None if block is None else self.timeline.blocks[block]

    def live_by_kind(self) -> dict[str, list[int]]:
        """Bytes live after each event, per kind (a free of memory from before the step
        counts in none)."""
        live = dict.fromkeys(KINDS, 0)
        series: dict[str, list[int]] = {k: [] for k in KINDS}
        for block, size in self.timeline.events:
            if block is not None:
                live[self.kinds[block]] += size
            for kind in KINDS:
                series[kind].append(live[kind])
        return series


def _kinds(config: Config, timeline: Timeline) -> tuple[str, ...]:
    """The kind of each block of `timeline` (see the module's docstring)."""
    grads = [(n, config.d_model) for n in (config.tokens, config.vocab)]
    granularity = config.device.granularity
    grad_bytes = {round_up(n * d * ITEMSIZE[config.dtype], granularity) for n, d in grads}
    start = timeline.backward_start

    def kind(index: int, block: Block) -> str:
        if block.phase != RECOMPUTE and (block.nbytes in grad_bytes if block.shape is None
                                         else block.dtype == config.dtype and block.shape in grads):
            return GRADIENT
        if index == timeline.output:
            return TEMPORARY
        if block.phase == FORWARD and start is not None and (block.freed is None or block.freed >= start):
            return SAVED
        if block.phase == RECOMPUTE and block.freed_region != block.region:
            return SAVED
        return TEMPORARY

    return tuple(kind(i, b) for i, b in enumerate(timeline.blocks))


def _groups(timeline: Timeline, kinds: tuple[str, ...], event: int | None) -> tuple[Group, ...]:
    """The blocks alive after `event` that hold bytes (an empty tensor holds none, and a
    profiler may not see it made), grouped by shape and dtype, then alike entries."""
    if event is None:
        return ()
    entries: dict[tuple, dict[tuple, list[int]]] = {}
    for i, b in enumerate(timeline.blocks):
        if b.nbytes and b.alive_at(event):
            group = (b.shape, b.dtype, b.nbytes if b.shape is None else None)
            entries.setdefault(group, {}).setdefault((kinds[i], b.op, b.phase, b.node), []).append(b.nbytes)
    groups = []
    for (shape, dtype, _), alike in entries.items():
        members = [Entry(shape, dtype, kind, op, phase, node, len(sizes), sum(sizes))
                   for (kind, op, phase, node), sizes in alike.items()]
        members.sort(key=lambda e: -e.nbytes)
        groups.append(Group(shape, dtype, max(s for sizes in alike.values() for s in sizes), tuple(members)))
    return tuple(sorted(groups, key=lambda g: -g.nbytes))


def explained(config: Config, method: str, base_bytes: int, timeline: Timeline,
              time_ms: float | None = None) -> Explanation:
    """The explanation of a recorded `timeline` of `config` (with its predicted `time_ms`)."""
    kinds = _kinds(config, timeline)
    event, peak = timeline.peak()
    return Explanation(config, method, base_bytes, timeline, kinds, event, peak, _groups(timeline, kinds, event),
                       time_ms)


def _record(config: Config) -> tuple[str, int, Timeline]:
    """One real step of `config` on its device, after one warm-up step (a compiled variant
    compiles there): the method, the bytes live before it, its timeline."""
    device = config.device
    recorder = ProfiledStep(device.name, device.granularity)
    x = inputs_mod.make(config)
    step = make_step(recorder.wrap(variants.of(config).build()), x, config)
    step.prepare()
    step.run()
    step.prepare()
    gc.collect()
    return device.events_method, device.live_bytes(x.tensors()), recorder.record(step.run)


def explain(config: Config, meta: bool = False) -> Explanation:
    """Record one step of `config` and explain it: on its device (`config.device`, which
    this machine must have), or with `meta` on meta tensors for that target.
    `Unexplainable` when the variant cannot run here or on meta (compiled code, custom
    ops), or its step failed (out of memory, an op without a meta kernel)."""
    reason = support.reason(config, predicted=meta)
    if reason:
        raise Unexplainable(reason)
    costs = Costs.of(config) if meta else None
    try:
        if meta:
            traced = trace(config, OpTracker, costs=costs)
            method, base, timeline = PREDICTED, traced.base_bytes, traced.record
        else:
            method, base, timeline = _record(config)
    except OpaqueOp as exc:
        raise Unexplainable(f"{exc}, or explain it on a real device (--target cpu)") from None
    except Exception as exc:  # the step itself failed (out of memory, say): why, as sweep's error rows say
        raise Unexplainable(describe(exc)) from exc
    return explained(config, method, base, timeline, step_time(config, costs))


def shape_text(shape: tuple[int, ...] | None, config: Config) -> str:
    """A shape in the names of the config's sizes where a size matches one: (N, vocab),
    (ce_chunk, vocab), (232, vocab); rows are named N before ce_chunk, columns vocab before
    d_model. '?' when unknown, 'scalar' for ()."""
    if shape is None:
        return "?"
    if not shape:
        return "scalar"
    rows = [("N", config.tokens), ("ce_chunk", config.ce_chunk), ("vocab", config.vocab), ("d_model", config.d_model)]
    cols = [("vocab", config.vocab), ("d_model", config.d_model), ("N", config.tokens), ("ce_chunk", config.ce_chunk)]
    names = [next((n for n, v in (rows if i == 0 else cols) if v == d), f"{d:,}") for i, d in enumerate(shape)]
    return " × ".join(names)


def group_text(group: Group, config: Config) -> str:
    """'3 × (N × vocab) fp32', '3 × (5,056) uint8', '2 × scalar fp32', '3 × 5,056 B (shape unknown)'."""
    if group.shape is None:
        return f"{group.count} × {group.each:,} B (shape unknown)"
    shape = shape_text(group.shape, config)
    return f"{group.count} × {f'({shape})' if group.shape else shape} {group.dtype}"


def sizes_text(config: Config) -> str:
    """What the names in shapes stand for: 'N = 1,024 (batch 8 × context 128) · vocab 50,257 · …'."""
    parts = [f"N = {config.tokens:,} (batch {config.batch} × context {config.context})", f"vocab {config.vocab:,}",
             f"d_model {config.d_model:,}"]
    if config.ce_chunk is not None:
        parts.append(f"ce_chunk {config.ce_chunk:,}")
    return " · ".join(parts)


def to_json(e: Explanation) -> dict:
    """A plain-data document of `e`: the point (every axis), the peak, the breakdown at the peak (one
    item per entry: its tensors' count, bytes each and in all, share of the peak Δ), and a
    summary of the timeline."""
    c, t = e.config, e.timeline
    live = t.live_bytes()
    start = t.backward_start
    peak = e.peak_block
    return {
        "variant": c.value("variant"), "workload": c.workload, "device": c.value("device"), **c.axis_values(),
        "tokens": c.tokens,
        "method": e.method, "base_bytes": e.base_bytes, "peak_delta_bytes": e.peak_delta_bytes,
        "breakdown_bytes": e.breakdown_bytes, "residue_bytes": e.residue_bytes, "predicted_time_ms": e.time_ms,
        "lower_bound_bytes": c.lower_bound_bytes, "logits_fp32_bytes": c.logits_fp32_bytes,
        "breakdown": [
            {"group": group_text(g, c), "shape": None if x.shape is None else list(x.shape), "dtype": x.dtype,
             "kind": x.kind, "op": x.op, "phase": x.phase, "node": x.node, "count": x.count,
              "bytes_each": x.nbytes // x.count, "bytes": x.nbytes,
             "share": x.nbytes / e.peak_delta_bytes if e.peak_delta_bytes else None}
            for g in e.groups for x in g.entries],
        "timeline": {
            "events": len(live), "backward_start": start, "peak_event": e.peak_event,
            "peak_phase": peak and peak.phase, "peak_node": peak and peak.node, "peak_op": peak and peak.op,
            "forward_peak_bytes": max(live[:start] if start is not None else live, default=0),
            "backward_peak_bytes": max(live[start:], default=0) if start is not None else None,
            "end_bytes": live[-1] if live else 0,
            "peak_bytes_by_kind": {k: v[e.peak_event] for k, v in e.live_by_kind().items()}
            if e.peak_event is not None else None,
        },
    }
