"""Shards: one sweep split over processes that share nothing (torchrun ranks, SLURM tasks).

Every process expands the same grid and keeps the points of its own shard, so no
collective communication is needed and a slow shard never holds up the others. The split
is deterministic and balanced by each point's nominal cost (its matmul FLOPs), and every
point lands in exactly one shard whatever the count. A shard itself (`Shard`, its text
form, the one a launcher assigned) is `cebench.core.shard`'s.
"""
from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from cebench.core.shard import Shard


def run_id(env: Mapping[str, str]) -> str:
    """An id every shard of one launch shares (torchrun's run id, the SLURM job's), else
    the local time (torchrun without a rendezvous id says 'none')."""
    for name in ("TORCHELASTIC_RUN_ID", "SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID"):
        value = env.get(name, "").strip()
        if value and value != "none":
            return value
    return f"{datetime.now():%Y%m%d-%H%M%S}"


def out_path(out: Path | None, shard: Shard | None, env: Mapping[str, str]) -> tuple[Path, str]:
    """The CSV this process writes, and a note on how it was chosen ('' for none).
    Default: results/sweep-<time>.csv, or results/sweep-<run id>-shard-<I>-of-<N>.csv in a
    shard. `{shard}` in `out` becomes <I>-of-<N>. An `out` without it is written as given
    for a shard chosen with --shard (one command per shard, each its own --out); for a
    shard a launcher chose (every process got the same --out) it gets .shard-<I>-of-<N>
    before its suffix, so that no two processes append to one file."""
    if out is None:
        name = f"sweep-{run_id(env)}" + (f"-shard-{shard.tag}" if shard else "")
        return Path("results") / f"{name}.csv", ""
    if "{shard}" in str(out):
        return Path(str(out).replace("{shard}", (shard or Shard(0, 1)).tag)), ""
    if shard is None or shard.source == "--shard":
        return out, ""
    path = out.with_name(f"{out.stem}.shard-{shard.tag}{out.suffix}")
    return path, f"shard {shard.label} writes {path} (--out names one file; put {{shard}} in it to choose the names)"


def assign(costs: Sequence[float], count: int) -> list[int]:
    """The shard of each point, given each point's cost: the costliest point first, each
    to the shard with the least cost so far (ties: the lower index), so shards finish at
    about the same time. Deterministic: the same costs give the same shards. Only as many
    shards as points can get one, so no more are set up (memory bounded by the grid, not by
    `count`)."""
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], i))
    loads = [(0.0, s) for s in range(min(count, len(costs)))]
    shards = [0] * len(costs)
    for i in order:
        load, s = heapq.heappop(loads)
        shards[i] = s
        heapq.heappush(loads, (load + costs[i], s))
    return shards
