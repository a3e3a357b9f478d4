"""Peak-memory readings and the accounting behind them; each device's probe is its
`Device.peak` (`cebench.core.devices`), which reads memory with these. Nothing here imports
torch until a function runs (`cebench --help` must not import it).

CPU: the allocator's allocation and free events recorded by `torch.profiler`
(`profile_memory=True`); their running sum in time order is the live byte count. These
events come from c10's allocator, so they also see allocations made inside
`torch.compile`d code (a `TorchDispatchMode` tracker would not).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch._C._autograd import _ProfilerResult


BYTES_LIMIT = 2**62  # bytes of one tensor (or a point's fp32 logits) beyond which no machine or results CSV holds it


@dataclass(frozen=True)
class MemoryReading:
    """Bytes live before the step (`base_bytes`) and at its highest point (`peak_bytes`); a
    model's step also has `state_bytes`: its parameters + gradients + optimizer state; a
    prediction, a `note` on what its trace did not run (Triton launches skipped). A reading
    of allocator events has `net_bytes`: what the step's events sum to (0 in a steady step
    whose every free was recorded; None: a probe without events). A prediction for a named
    GPU may carry the step's predicted time (`time_ms`, ms: `cebench.core.timemodel`)."""

    base_bytes: int
    peak_bytes: int
    method: str
    state_bytes: int | None = None
    note: str = ""
    net_bytes: int | None = None
    time_ms: float | None = field(default=None, compare=False)  # a time beside the bytes: readings equal by bytes

    @property
    def peak_delta_bytes(self) -> int:
        """What the step itself adds on top of what was live before it (bytes)."""
        return self.peak_bytes - self.base_bytes


def round_up(nbytes: int, granularity: int) -> int:
    """`nbytes` rounded up to a multiple of `granularity` (0 stays 0)."""
    return -(-nbytes // granularity) * granularity


def storage_bytes(tensors: Iterable[torch.Tensor], granularity: int | Callable[[int], int] = 1) -> int:
    """Bytes of the distinct storages behind `tensors` (views share one storage), each
    rounded up to a multiple of `granularity`, or charged `granularity(nbytes)` when it is a
    function (`Device.block_bytes`). Works on `meta` tensors too."""
    sizes = {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in tensors}
    block = granularity if callable(granularity) else (lambda n: round_up(n, granularity))
    return sum(block(n) for n in sizes.values())


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2: kineto prints a line when a profiler starts and stops."""
    with open(os.devnull, "w") as devnull:
        saved = os.dup(2)
        try:
            os.dup2(devnull.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def profiled(step: Callable[[], object], record_shapes: bool = False) -> _ProfilerResult:
    """The profiler's results (`_ProfilerResult`) of one `step()`: CPU ops and every
    allocator event, with the ops' input shapes when `record_shapes`."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=record_shapes)
    with _quiet_stderr():
        prof.start()
    try:
        step()
    finally:
        with _quiet_stderr():
            prof.stop()
    assert prof.profiler is not None and prof.profiler.kineto_results is not None  # set by start() and stop()
    return prof.profiler.kineto_results


def allocation_events(step: Callable[[], object]) -> list[int]:
    """Signed sizes (bytes; + alloc, − free) of every CPU allocator event during `step()`,
    in time order."""
    import torch

    events = [e for e in profiled(step).events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    events.sort(key=lambda e: e.start_ns())  # stable: same-timestamp events keep their order
    return [e.nbytes() for e in events]  # type: ignore[attr-defined]  # missing from torch's _KinetoEvent stub


def running_peak(sizes: Iterable[int]) -> int:
    """Highest running sum of signed allocation sizes, never below 0 (bytes)."""
    live = peak = 0
    for size in sizes:
        live += size
        peak = max(peak, live)
    return peak
