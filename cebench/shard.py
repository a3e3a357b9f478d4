"""Shards: one sweep split over processes that share nothing (torchrun ranks, SLURM tasks).

Every process expands the same grid and keeps the points of its own shard, so no
collective communication is needed and a slow shard never holds up the others. The split
is deterministic and balanced by each point's nominal cost (its matmul FLOPs), and every
point lands in exactly one shard whatever the count.
"""
from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cebench.errors import UsageError


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0 ≤ index < count), and where that came from."""

    index: int
    count: int
    source: str = "--shard"

    @property
    def label(self) -> str:
        """'INDEX/COUNT', as the CSV's `shard` column records it."""
        return f"{self.index}/{self.count}"

    @property
    def tag(self) -> str:
        """'INDEX-of-COUNT': what `{shard}` in a file name becomes."""
        return f"{self.index}-of-{self.count}"


def parse(text: str, option: str = "--shard") -> Shard:
    """'INDEX/COUNT' (e.g. '2/8') → `Shard`; anything else is a `UsageError`."""
    index, sep, count = text.strip().partition("/")
    try:
        shard = Shard(int(index), int(count), option)
    except ValueError:
        raise UsageError(f"{option}: '{text}' is not INDEX/COUNT (e.g. 0/4)") from None
    if not sep or shard.count < 1 or not 0 <= shard.index < shard.count:
        raise UsageError(f"{option}: '{text}' is not INDEX/COUNT with 0 ≤ INDEX < COUNT")
    return shard


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"${name}: '{value}' is not an integer") from None


def from_env(env: Mapping[str, str]) -> tuple[Shard | None, int | None]:
    """The shard a launcher assigned to this process, and the local GPU index it should
    use (None: no launcher, or no such index). torchrun: RANK of WORLD_SIZE on
    cuda:LOCAL_RANK. SLURM job array: SLURM_ARRAY_TASK_ID (from SLURM_ARRAY_TASK_MIN) of
    SLURM_ARRAY_TASK_COUNT; else the tasks of an `srun` step: SLURM_PROCID of
    SLURM_STEP_NUM_TASKS on cuda:SLURM_LOCALID (not SLURM_NTASKS, which a batch script
    sees too, where one process runs). A count of 1 is no shard."""
    shard: Shard | None = None
    local: int | None = None
    if (world := _int(env, "WORLD_SIZE")) is not None:
        shard, local = Shard(_int(env, "RANK") or 0, world, "torchrun (RANK/WORLD_SIZE)"), _int(env, "LOCAL_RANK")
    elif (tasks := _int(env, "SLURM_ARRAY_TASK_COUNT")) is not None:
        first = _int(env, "SLURM_ARRAY_TASK_MIN") or 0
        shard = Shard((_int(env, "SLURM_ARRAY_TASK_ID") or 0) - first, tasks,
                      "SLURM array (SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT)")
    elif (tasks := _int(env, "SLURM_STEP_NUM_TASKS")) is not None:
        shard = Shard(_int(env, "SLURM_PROCID") or 0, tasks, "srun (SLURM_PROCID/SLURM_STEP_NUM_TASKS)")
        local = _int(env, "SLURM_LOCALID")
    if shard is None or shard.count == 1:
        return None, local
    if not 0 <= shard.index < shard.count:
        raise UsageError(f"{shard.source}: shard {shard.label} is out of range (a job array whose ids do not "
                         "run from SLURM_ARRAY_TASK_MIN without gaps? give --shard INDEX/COUNT)")
    return shard, local


def assign(costs: Sequence[float], count: int) -> list[int]:
    """The shard of each point, given each point's cost: the costliest point first, each
    to the shard with the least cost so far (ties: the lower index), so shards finish at
    about the same time. Deterministic: the same costs give the same shards."""
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], i))
    loads = [(0.0, s) for s in range(count)]
    shards = [0] * len(costs)
    for i in order:
        load, s = heapq.heappop(loads)
        shards[i] = s
        heapq.heappush(loads, (load + costs[i], s))
    return shards


def select(points: Sequence[object], costs: Sequence[float], shard: Shard | None) -> list[int]:
    """Indices into `points` that belong to `shard` (all of them when it is None), in order."""
    if shard is None:
        return list(range(len(points)))
    return [i for i, s in enumerate(assign(costs, shard.count)) if s == shard.index]
