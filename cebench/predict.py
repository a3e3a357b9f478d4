"""Peak memory without the hardware: each eager variant's step on `meta` inputs under the
storage tracker, and the largest batch that fits a memory budget.

`config.device` is the *target*: 'cuda' rounds every storage up to the caching
allocator's 512-byte blocks, 'cpu' counts exact bytes.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import torch

from cebench import inputs as inputs_mod
from cebench import variants
from cebench.config import ITEMSIZE, Config
from cebench.errors import describe
from cebench.measure.memory import MemoryReading, storage_bytes
from cebench.measure.tracker import CUDA_BLOCK_BYTES, StorageTracker
from cebench.results import PREDICTED, Result
from cebench.workloads import make_step

COMPILED_REASON = ("a dispatch-mode tracker cannot see inside torch.compile'd code; "
                   "measure compiled variants with cebench sweep")


class OpaqueOp(Exception):
    """The step ran an op whose allocations a dispatch-mode tracker cannot see."""


def granularity(target: str) -> int:
    """Allocation granularity of the target device, in bytes."""
    return CUDA_BLOCK_BYTES if target == "cuda" else 1


@contextlib.contextmanager
def _tracking_rng_states(tracker: StorageTracker) -> Iterator[None]:
    """Count the CPU RNG states `torch.utils.checkpoint` saves per chunk: a CPU tensor
    that `torch.get_rng_state()` creates outside the dispatcher."""
    original = torch.get_rng_state

    def tracked() -> torch.Tensor:
        state = original()
        tracker.track(state)
        return state

    torch.get_rng_state = tracked
    try:
        yield
    finally:
        torch.get_rng_state = original


def predict_peak(config: Config) -> MemoryReading:
    """Predicted base (the inputs' storages) and peak bytes of one step of `config` on its
    target device, from a run on `meta` tensors: nothing is allocated or computed. For a
    CPU target the RNG states saved by checkpointing count too (on CUDA they live in host
    memory, outside the device's allocator)."""
    g = granularity(config.device)
    x = inputs_mod.make(config, device="meta")
    step = make_step(variants.get(config.variant).load(), x, config)
    step.prepare()
    base = storage_bytes(x.tensors(), g)
    tracker = StorageTracker(ignore=x.tensors(), granularity=g)
    rng = _tracking_rng_states(tracker) if config.device == "cpu" else contextlib.nullcontext()
    with tracker, rng:
        step.run()
    if tracker.opaque:
        raise OpaqueOp(f"{', '.join(sorted(tracker.opaque))} is a custom op: on meta tensors it allocates only "
                       "its outputs, not its internal buffers, so its peak cannot be predicted; measure it with "
                       "cebench sweep")
    return MemoryReading(base, base + tracker.peak, PREDICTED)


def predict(config: Config) -> Result:
    """A results row for `config` with predicted memory and no time columns; compiled
    variants are `unsupported`, a step that fails on `meta` is an `error` row."""
    result = Result.blank(config, f"predicted for {config.device}")
    if variants.get(config.variant).compiled:
        result.status, result.error = "unsupported", COMPILED_REASON
        return result
    reason = variants.get(config.variant).unsupported_reason(config.device)
    if reason:
        result.status, result.error = "unsupported", reason
        return result
    try:
        reading = predict_peak(config)
    except OpaqueOp as exc:
        result.status, result.error = "unsupported", str(exc)
        return result
    except Exception as exc:  # an op without a meta kernel, say: report it, go on
        result.status, result.error = "error", describe(exc)
        return result
    result.base_bytes, result.peak_bytes = reading.base_bytes, reading.peak_bytes
    result.peak_delta_bytes, result.mem_method = reading.peak_delta_bytes, reading.method
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
