"""This machine's CPU as the time model sees it: its matmul rates, memory bandwidth and the
fixed cost of one op, measured here (`probe`) and cached, so that `--target cpu` predicts a
step's time from the same roofline as a GPU's (`cebench.core.timemodel`), with measured
rates in place of a datasheet's and efficiencies of 1.

The probe (about a second, at the process's intra-op threads): the best of a few runs of an
fp32 and a bf16 1024³ matmul (FLOP/s), of a copy of 64 MiB (bytes read and written per
second), and of a one-element add (the per-op cost). It is cached per CPU model, torch
version and thread count in `$CEBENCH_CACHE` (else `~/.cache/cebench`), `cpu-probe.json`.
"""
from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from cebench.core import devices
from cebench.core.targets import Target
from cebench.core.timemodel import Efficiency

CACHE = Path(os.environ.get("CEBENCH_CACHE") or Path.home() / ".cache" / "cebench") / "cpu-probe.json"
MATMUL, COPY_BYTES, RUNS = 1024, 64 * 2**20, 5


@dataclass(frozen=True)
class Probe:
    """What the probe measured on one CPU, torch and thread count: FLOP/s of an fp32 and a
    bf16 matmul, memory bandwidth (bytes/s) and one op's fixed cost (µs)."""

    cpu: str
    torch: str
    threads: int
    fp32_flops: float
    bf16_flops: float
    bytes_per_s: float
    op_us: float

    def target(self) -> Target:
        """This CPU as a time-model target (its capacity and workspace 0: memory is not its job;
        its ranks' collectives cross its memory, at the copy's bandwidth)."""
        return Target("cpu", self.cpu, (0, 0), (), 0, 0, self.bf16_flops,
                      f"measured here by cebench's probe ({self.threads} threads, torch {self.torch})", 0,
                      self.fp32_flops, self.bytes_per_s, "cpu", link_bytes_per_s=self.bytes_per_s)

    def efficiency(self) -> Efficiency:
        """The rates are what this machine reaches: every efficiency 1, launches its op cost."""
        return Efficiency(1.0, 1.0, 1.0, 1.0, 1.0, self.op_us, rows="measured on this machine (cebench's probe)")


def _best(fn: Callable[[], object]) -> float:
    """The fastest of `RUNS` runs of `fn` after one warm-up (s)."""
    fn()
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure() -> Probe:
    """Run the probe now (about a second)."""
    n = MATMUL
    a, b = torch.randn(n, n), torch.randn(n, n)
    fp32 = 2 * n**3 / _best(lambda: a @ b)
    a16, b16 = a[:256, :256].bfloat16(), b[:256, :256].bfloat16()  # bf16 is slow on many CPUs: a smaller one
    bf16 = 2 * 256**3 / _best(lambda: a16 @ b16)
    src = torch.empty(COPY_BYTES // 4)
    dst = torch.empty_like(src)
    bandwidth = 2 * COPY_BYTES / _best(lambda: dst.copy_(src))
    one = torch.ones(1)
    op = _best(lambda: [one.add(one) for _ in range(100)]) / 100
    return Probe(devices.HOST.model_name(), torch.__version__, torch.get_num_threads(), fp32, bf16, bandwidth,
                 op * 1e6)


def probe(path: Path = CACHE) -> Probe:
    """This CPU's probe at the current thread count: from the cache, else measured and cached
    (read once per process and thread count)."""
    return _probe(path, devices.HOST.model_name(), torch.__version__, torch.get_num_threads())


@functools.cache
def _probe(path: Path, cpu: str, version: str, threads: int) -> Probe:
    cached: list[dict] = []
    try:
        cached = json.loads(path.read_text())
        for entry in cached:
            found = Probe(**entry)
            if (found.cpu, found.torch, found.threads) == (cpu, version, threads):
                return found
    except (OSError, ValueError, TypeError):
        cached = []
    found = measure()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([*cached, asdict(found)], indent=1))
    except OSError:  # a read-only home: measured again next time
        pass
    return found
