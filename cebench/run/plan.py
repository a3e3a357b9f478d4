"""What a sweep will measure, before it measures anything: the grid's points in this
shard, less those a resumed CSV already holds, and a rough estimate of the time."""
from __future__ import annotations

import hashlib
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cebench.core import devices
from cebench.core.config import SAMPLE, Compile, Config
from cebench.core.shard import Shard
from cebench.losses import variants
from cebench.run import shard as shard_mod
from cebench.store.files import point_key

# A nominal cost model, used only to balance shards (it must not depend on the machine, so
# that every process computes the same split): matmul work at the device's
# `nominal_flops` plus one compilation per compiled point.
NOMINAL_COMPILE_S = 20.0
LONG_SWEEP = 300  # points; more than this earns a warning that suggests shards
FEW_CORES = 2  # on a machine with this many cores or fewer, other processes' load inflates every timing


def busy() -> tuple[float, int] | None:
    """(the 1-minute load average, the cores) when other processes load a machine of at most
    `FEW_CORES` cores beyond its core count, so that every step time measured now is
    inflated; None otherwise (or where the load average cannot be read)."""
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        return None
    return (load, cores) if cores <= FEW_CORES and load > cores else None


def matmul_flops(config: Config) -> int:
    """Matmul FLOPs of one step of an implementation that computes each logit once:
    logits (2·N·V·d), and for the loss ∇h and ∇weight too (6·N·V·d in all)."""
    return (2 if config.workload == SAMPLE else 6) * config.tokens * config.vocab * config.d_model


def steps(warmup: int, repeats: int) -> int:
    """Steps one point runs: the warm-up, one for the memory probe, the timed ones."""
    return warmup + 1 + repeats


def nominal_cost_s(config: Config, warmup: int, repeats: int) -> float:
    """The nominal seconds one point takes (see `NOMINAL_COMPILE_S`), for balancing shards."""
    compiles = variants.own(config).compiles + (config.compile == Compile.BLOCKS)
    compile_s = NOMINAL_COMPILE_S * compiles
    return steps(warmup, repeats) * matmul_flops(config) / config.device.nominal_flops + compile_s


@dataclass(frozen=True)
class Plan:
    """The points to measure now (in grid order), out of `total` in the grid, `in_shard`
    of them in this process's shard, `skipped` of those already done."""

    points: list[Config]
    total: int
    shard: Shard | None
    in_shard: int
    skipped: int


def make(points: Sequence[Config], shard: Shard | None, done: set[tuple[str, ...]], warmup: int,
         repeats: int) -> Plan:
    """This shard's share of `points` (all of them without a shard), without those whose
    key is in `done`."""
    mine = list(points)
    if shard is not None:
        costs = [nominal_cost_s(p, warmup, repeats) for p in points]
        mine = [p for p, s in zip(points, shard_mod.assign(costs, shard.count), strict=True) if s == shard.index]
    todo = [p for p in mine if point_key(p) not in done]
    return Plan(todo, len(points), shard, len(mine), len(mine) - len(todo))


def grid_id(points: Sequence[Config]) -> str:
    """A fingerprint of a whole grid: 12 hex digits of a hash of its points' keys, in any
    order (every shard of one sweep computes the same; `merge` compares them)."""
    text = "\n".join(sorted(",".join(point_key(p)) for p in points))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def matmul_rate(d: devices.Device, dtype: str) -> float:
    """FLOP/s a square matmul (`Device.rate_probe_size`) reaches on device `d` in `dtype`
    now (median of 3 after one warm-up)."""
    import torch

    from cebench.core.config import torch_dtype

    n = d.rate_probe_size(dtype)
    a = torch.randn(n, n, device=d.name).to(torch_dtype(dtype))
    times = [d.time_once(lambda: a @ a) for _ in range(4)][1:]
    return 2 * n**3 / (statistics.median(times) / 1e3)


def estimate_s(points: Sequence[Config], warmup: int, repeats: int, rates: Mapping[str, float]) -> float:
    """Seconds the matmul work of `points` takes at `rates` (FLOP/s per dtype): a floor on
    the sweep's time (chunking, compilation and process start-up come on top)."""
    return sum(steps(warmup, repeats) * matmul_flops(p) / rates[p.dtype] for p in points)
