"""`cebench.run.shard` beyond test_shards.py: what `parse` accepts and the names it gives,
the launchers' variables that are broken or out of range, and `assign`'s balance against
the best split a brute force finds."""
from __future__ import annotations

import itertools
import random

import pytest

from cebench.core.errors import UsageError
from cebench.core.shard import Shard, from_env, local_index, parse
from cebench.run.shard import assign


@pytest.mark.parametrize("text,index,count", [("0/1", 0, 1), ("2/8", 2, 8), (" 3/4 ", 3, 4), ("0/ 2", 0, 2)])
def test_parse_reads_index_of_count(text, index, count):
    shard = parse(text)
    assert (shard.index, shard.count, shard.source) == (index, count, "--shard")
    assert shard.label == f"{index}/{count}" and shard.tag == f"{index}-of-{count}"


def test_parse_names_the_option_it_read_and_a_shard_is_its_index_and_count():
    with pytest.raises(UsageError, match="^--part: '4/4' is not INDEX/COUNT with 0 ≤ INDEX < COUNT$"):
        parse("4/4", "--part")
    with pytest.raises(UsageError, match="^--part: 'x' is not INDEX/COUNT \\(e.g. 0/4\\)$"):
        parse("x", "--part")
    assert parse("1/2", "--part") == Shard(1, 2, "elsewhere")  # where it came from is not part of its identity


@pytest.mark.parametrize("env,message", [
    ({"WORLD_SIZE": "x", "RANK": "0"}, "$WORLD_SIZE: 'x' is not an integer"),
    ({"WORLD_SIZE": "4", "RANK": "two"}, "$RANK: 'two' is not an integer"),
    ({"WORLD_SIZE": "4", "RANK": "4"}, "torchrun (RANK of WORLD_SIZE): shard 4/4 is out of range"),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "5"}, "shard -2/4 is out"),
    ({"SLURM_PROCID": "6", "SLURM_STEP_NUM_TASKS": "6"}, "srun (SLURM_PROCID of SLURM_STEP_NUM_TASKS): shard 6/6"),
])
def test_a_broken_launcher_environment_is_a_usage_error(env, message):
    with pytest.raises(UsageError) as info:
        from_env(env)
    assert message in str(info.value)


def test_the_launchers_shards_say_where_they_came_from():
    assert from_env({"RANK": "1", "WORLD_SIZE": "2"}).source == "torchrun (RANK of WORLD_SIZE)"
    assert from_env({"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2"}).source.startswith("SLURM array")
    assert from_env({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}).source.startswith("srun")
    assert from_env({"WORLD_SIZE": "1"}) is None and from_env({"WORLD_SIZE": " ", "RANK": "3"}) is None  # blank: unset
    assert local_index({"LOCAL_RANK": "1", "SLURM_LOCALID": "0", "SLURM_STEP_NUM_TASKS": "2"}) == 1
    assert local_index({"SLURM_LOCALID": "1"}) is None  # a batch script's own process: not an srun task


def test_assign_is_largest_first_to_the_least_loaded_shard():
    # 5 → 0, 3 → 1, 3 → 2, then the ones to the least loaded (ties: the lower index).
    assert assign([5, 1, 1, 1, 1, 1, 3, 3], 3) == [0, 1, 2, 1, 2, 0, 1, 2]
    assert assign([1.0] * 7, 3) == [0, 1, 2, 0, 1, 2, 0]  # equal costs: in turn, in the grid's order
    assert assign([2, 1], 4) == [0, 1]  # more shards than points: one each, the rest empty


def loads(shards: list[int], costs: list[float], count: int) -> list[float]:
    return [sum(c for s, c in zip(shards, costs, strict=True) if s == shard) for shard in range(count)]


def test_assign_is_within_the_largest_first_bound_of_the_best_split():
    """Largest-first greedy is never worse than 4/3 − 1/(3·count) of the best makespan
    (Graham's bound): checked against every split of small random grids."""
    rng = random.Random(0)
    for _ in range(200):
        count = rng.randint(2, 3)
        costs = [rng.choice([rng.randint(1, 9), rng.uniform(0.1, 100)]) for _ in range(rng.randint(1, 8))]
        got = max(loads(assign(costs, count), costs, count))
        splits = itertools.product(range(count), repeat=len(costs))
        best = min(max(loads(list(split), costs, count)) for split in splits)
        assert got <= (4 / 3 - 1 / (3 * count)) * best + 1e-9, (costs, count)
        assert got <= sum(costs) / count + max(costs) + 1e-9
