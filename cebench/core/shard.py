"""A shard: part `index` of `count` of one sweep split over processes that share nothing,
as `--shard` and a results CSV's `shard` column write it, and what a launcher (torchrun,
SLURM) tells a process about its place: its shard, and its GPU on the node. How a sweep's
points are split among shards, and where each writes, is `cebench.run.shard`'s."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cebench.core.errors import UsageError


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count` (0 ≤ index < count), and where that came from."""

    index: int
    count: int
    source: str = field(default="--shard", compare=False)

    @property
    def label(self) -> str:
        """'INDEX/COUNT', as the CSV's `shard` column records it."""
        return f"{self.index}/{self.count}"

    @property
    def tag(self) -> str:
        """'INDEX-of-COUNT': what `{shard}` in a file name becomes."""
        return f"{self.index}-of-{self.count}"


def parse(text: str, where: str | None = None) -> Shard:
    """'INDEX/COUNT' (e.g. '2/8') → `Shard`; anything else is a `UsageError` for the
    `shard` parameter, or naming `where` (a CSV cell, say) when given."""
    index, sep, count = text.strip().partition("/")

    def bad(message: str) -> UsageError:
        return UsageError(message, "shard") if where is None else UsageError(f"{where}: {message}")

    try:
        shard = Shard(int(index), int(count))
    except ValueError:
        raise bad(f"'{text}' is not INDEX/COUNT (e.g. 0/4)") from None
    if not sep or shard.count < 1 or not 0 <= shard.index < shard.count:
        raise bad(f"'{text}' is not INDEX/COUNT with 0 ≤ INDEX < COUNT")
    return shard


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"${name}: '{value}' is not an integer") from None


def from_env(env: Mapping[str, str]) -> Shard | None:
    """The shard a launcher assigned to this process (None: no launcher, or a count of 1).
    torchrun: RANK of WORLD_SIZE. SLURM job array: SLURM_ARRAY_TASK_ID (counted from
    SLURM_ARRAY_TASK_MIN) of SLURM_ARRAY_TASK_COUNT. Else the tasks of an `srun` step:
    SLURM_PROCID of SLURM_STEP_NUM_TASKS (not SLURM_NTASKS, which a batch script sees too,
    where one process runs)."""
    shard: Shard | None = None
    if (world := _int(env, "WORLD_SIZE")) is not None:
        rank = _int(env, "RANK")
        if rank is None and world > 1:
            raise UsageError(f"$WORLD_SIZE is {world} but $RANK is not set: which shard is this? "
                             "(give --shard INDEX/COUNT)")
        shard = Shard(rank or 0, world, "torchrun (RANK of WORLD_SIZE)")
    elif (tasks := _int(env, "SLURM_ARRAY_TASK_COUNT")) is not None:
        first = _int(env, "SLURM_ARRAY_TASK_MIN") or 0
        shard = Shard((_int(env, "SLURM_ARRAY_TASK_ID") or 0) - first, tasks,
                      "SLURM array (SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT)")
    elif (tasks := _int(env, "SLURM_STEP_NUM_TASKS")) is not None:
        shard = Shard(_int(env, "SLURM_PROCID") or 0, tasks, "srun (SLURM_PROCID of SLURM_STEP_NUM_TASKS)")
    if shard is None or shard.count == 1:
        return None
    if not 0 <= shard.index < shard.count:
        raise UsageError(f"{shard.source}: shard {shard.label} is out of range (a job array whose ids do not "
                         "run from SLURM_ARRAY_TASK_MIN without gaps? give --shard INDEX/COUNT)")
    return shard


def local_index(env: Mapping[str, str]) -> int | None:
    """The GPU index on its node a launcher gave this process: torchrun's LOCAL_RANK, else
    an `srun` task's SLURM_LOCALID; None without either."""
    if (local := _int(env, "LOCAL_RANK")) is not None:
        return local
    return _int(env, "SLURM_LOCALID") if _int(env, "SLURM_STEP_NUM_TASKS") is not None else None
