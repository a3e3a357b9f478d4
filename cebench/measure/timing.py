"""Step timing: warm-up (compilation happens there), then individually timed steps.

CUDA steps are timed with CUDA events; CPU steps with `perf_counter` (CPU ops are
synchronous). Statistics are order statistics (median, quartiles, min), never a lone mean.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Timing:
    """Durations of R timed steps, in milliseconds."""

    samples_ms: tuple[float, ...]

    @property
    def repeats(self) -> int:
        return len(self.samples_ms)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    def _quartiles(self) -> tuple[float, float]:
        if self.repeats < 2:
            return self.samples_ms[0], self.samples_ms[0]
        q1, _, q3 = statistics.quantiles(self.samples_ms, n=4, method="inclusive")
        return q1, q3

    @property
    def p25_ms(self) -> float:
        return self._quartiles()[0]

    @property
    def p75_ms(self) -> float:
        return self._quartiles()[1]


def time_once(step: Callable[[], object], device: str) -> float:
    """Wall time of one synchronized `step()` in milliseconds."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    step()
    return (time.perf_counter() - t0) * 1e3


def time_steps(step: Callable[[], object], prepare: Callable[[], object], device: str, repeats: int) -> Timing:
    """Time `repeats` steps one by one; `prepare()` (untimed) runs before each."""
    samples = []
    for _ in range(repeats):
        prepare()
        samples.append(time_once(step, device))
    return Timing(tuple(samples))
