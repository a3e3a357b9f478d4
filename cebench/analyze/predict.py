"""Peak memory without the hardware: each eager variant's step on `meta` inputs under the
storage tracker, and the largest batch that fits a memory budget.

`config.device` is the *target*: every storage is rounded up to its allocator's
`Device.granularity` (CUDA's caching allocator: 512-byte blocks; CPU: exact bytes).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from torch.utils.flop_counter import FlopCounterMode

from cebench.core import devices
from cebench.core.config import ITEMSIZE, Config
from cebench.core.errors import describe
from cebench.losses import inputs as inputs_mod
from cebench.losses import variants
from cebench.losses.workloads import make_step
from cebench.measure.memory import MemoryReading, storage_bytes
from cebench.measure.tracker import StorageTracker, watch_rng_states
from cebench.store.schema import PREDICTED, Result, Status

COMPILED_REASON = ("a dispatch-mode tracker cannot see inside torch.compile'd code; "
                   "measure compiled variants with cebench sweep")


Tracker = TypeVar("Tracker", bound=StorageTracker)


class OpaqueOp(Exception):
    """The step ran an op whose allocations a dispatch-mode tracker cannot see."""


def trace(config: Config, tracker_type: type[Tracker] = StorageTracker) -> tuple[Tracker, int]:
    """One step of `config` on `meta` inputs under a new `tracker_type`: the tracker after
    it, and the bytes of the inputs' storages (on the target device). Nothing is allocated
    or computed. The RNG states saved by checkpointing count too where they live in the
    target's memory (`Device.host_rng_states_count`: on CPU, not on CUDA). `OpaqueOp`
    when the step ran a custom op."""
    target = devices.get(config.device)
    g = target.granularity
    x = inputs_mod.make(config, device="meta")
    tracker = tracker_type(ignore=x.tensors(), granularity=g)
    step = make_step(tracker.wrap(variants.get(config.variant).load()), x, config)
    step.prepare()
    rng = watch_rng_states(tracker.rng_state) if target.host_rng_states_count else contextlib.nullcontext()
    with tracker, rng:
        step.run()
    if tracker.opaque:
        raise OpaqueOp(f"{', '.join(sorted(tracker.opaque))} is a custom op: on meta tensors it allocates only "
                       "its outputs, not its internal buffers, so its peak cannot be predicted; measure it with "
                       "cebench sweep")
    return tracker, storage_bytes(x.tensors(), g)


def predict_peak(config: Config) -> MemoryReading:
    """Predicted base (the inputs' storages) and peak bytes of one step of `config` on its
    target device, from a run on `meta` tensors (`trace`)."""
    tracker, base = trace(config)
    return MemoryReading(base, base + tracker.peak, PREDICTED)


INT64_MAX = 2**63 - 1


def counted(counter: FlopCounterMode) -> int | None:
    """The FLOPs `counter` counted, or None when a row cannot carry them: none at all (the
    counter saw no matmul, so it could not see the step's) or more than int64 holds."""
    total = counter.get_total_flops()
    return total if 0 < total <= INT64_MAX else None


def count_flops(config: Config) -> int | None:
    """FLOPs of one step of `config` (matmuls: 2 per multiply-add) as `FlopCounterMode`
    counts them on `meta` inputs (`trace`: nothing allocated or computed); a compiled
    variant is counted on its eager twin. None when the count cannot be trusted or kept:
    the step runs a custom op (which hides its matmuls from the counter), fails on `meta`
    (a Triton kernel, say), or `counted` says so."""
    counter = FlopCounterMode(display=False)
    try:
        with counter:
            trace(config)
    except Exception:  # whatever a variant does on meta tensors, the row is not failed for it
        return None
    return counted(counter)


def predict(config: Config) -> Result:
    """A results row for `config` with predicted memory, its `flops`, and no time columns; compiled
    variants are `unsupported`, a step that fails on `meta` is an `error` row."""
    result = Result.blank(config, f"predicted for {config.device}")
    if variants.get(config.variant).compiled:
        result.status, result.error = Status.UNSUPPORTED, COMPILED_REASON
        return result
    reason = variants.get(config.variant).unsupported_reason(config.device)
    if reason:
        result.status, result.error = Status.UNSUPPORTED, reason
        return result
    counter = FlopCounterMode(display=False)
    try:
        with counter:  # the FLOPs of the same meta step, as `count_flops` counts a measured row's
            reading = predict_peak(config)
    except OpaqueOp as exc:
        result.status, result.error = Status.UNSUPPORTED, str(exc)
        return result
    except Exception as exc:  # an op without a meta kernel, say: report it, go on
        result.status, result.error = Status.ERROR, describe(exc)
        return result
    result.base_bytes, result.peak_bytes = reading.base_bytes, reading.peak_bytes
    result.peak_delta_bytes, result.mem_method = reading.peak_delta_bytes, reading.method
    result.flops = counted(counter)
    return result


@dataclass(frozen=True)
class Fit:
    """The largest batch of one variant and ce_chunk whose predicted absolute peak fits
    the budget, with that peak in bytes. `batch` 0: not even one sequence fits.
    `at_limit`: the search stopped at its batch limit, which still fits."""

    config: Config
    batch: int
    peak_bytes: int | None
    at_limit: bool
    predictions: int

    @property
    def tokens(self) -> int:
        return self.batch * self.config.context


def largest_fitting(peak: Callable[[int], int], budget: int, guess: int, cap: int) -> int:
    """Largest b in [1, cap] with peak(b) ≤ budget (0 if none).

    `peak` must not decrease with b; it is typically convex and piecewise linear (the
    maximum of a few phases, each affine in b). The bracket lo (fits) < hi (does not) is
    shrunk from both sides: the chord between them crosses the budget where peak fits
    when it is convex, and the tangent at hi crosses it next to where peak stops fitting;
    on a linear piece both land on the answer. Bisection when neither made progress."""
    if peak(1) > budget:
        return 0
    if peak(cap) <= budget:
        return cap
    lo, hi = 1, cap

    def visit(b: int) -> None:
        nonlocal lo, hi
        if lo < b < hi:
            if peak(b) <= budget:
                lo = b
            else:
                hi = b

    visit(guess)
    while hi - lo > 1:
        before = (lo, hi)
        visit(lo + (budget - peak(lo)) * (hi - lo) // (peak(hi) - peak(lo)))
        slope = peak(hi) - peak(hi - 1)
        if hi - lo > 1 and slope > 0:
            last = hi - -(-(peak(hi) - budget) // slope)  # the tangent at hi is ≤ budget up to here
            visit(last + 1)
            visit(last)
        if (lo, hi) == before:
            visit((lo + hi) // 2)
    return lo


def fit(config: Config, budget: int, max_batch: int) -> Fit:
    """The largest batch ≤ `max_batch` at `config`'s context whose predicted `peak_bytes`
    ≤ `budget`, every candidate predicted (peak(batch) fits, peak(batch + 1) does not).

    Probes at 4, 8 and 16 chunks' worth of sequences (dense: batch 4, 8, 16) give the
    slope of peak against batch; the search gallops from that line's boundary and bisects.
    Chunked predictions cost a dozen meta ops per chunk, hence the batch limit."""
    cache: dict[int, int] = {}

    def peak(batch: int) -> int:
        if batch not in cache:
            cache[batch] = predict_peak(replace(config, batch=batch)).peak_bytes
        return cache[batch]

    h_bound = budget // (config.context * config.d_model * ITEMSIZE[config.dtype])  # h alone must fit
    cap = max(1, min(max_batch, h_bound))
    if peak(cap) <= budget:
        return Fit(config, cap, peak(cap), True, len(cache))
    unit = -(-(config.ce_chunk or config.context) // config.context)  # sequences per chunk (≥ 1)
    probes = sorted({min(cap, k * unit) for k in (4, 8, 16)})
    guess = probes[-1]
    if len(probes) > 1 and peak(probes[-1]) > peak(probes[-2]):
        slope = (peak(probes[-1]) - peak(probes[-2])) / (probes[-1] - probes[-2])
        guess = probes[-1] + int((budget - peak(probes[-1])) // slope)
    batch = largest_fitting(peak, budget, guess, cap)
    return Fit(config, batch, cache.get(batch) if batch else None, False, len(cache))
