"""Step timing: warm-up (compilation happens there), then individually timed steps, each
by its device's `Device.time_once` (`cebench.core.devices`). Statistics are order
statistics (median, quartiles, min), never a lone mean.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from cebench.core.devices import Device


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


def time_steps(step: Callable[[], object], prepare: Callable[[], object], device: Device, repeats: int) -> Timing:
    """Time `repeats` steps one by one; `prepare()` (untimed) runs before each."""
    samples = []
    for _ in range(repeats):
        prepare()
        samples.append(device.time_once(step))
    return Timing(tuple(samples))
