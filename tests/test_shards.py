"""Shards (--shard and the launchers' environments), torchrun, and `cebench merge`."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cebench.cli import app
from cebench.core.errors import UsageError
from cebench.core.shard import Shard, from_env, local_index, parse
from cebench.run import plan
from cebench.run.grid import GridOptions
from cebench.run.shard import assign, out_path, run_id
from cebench.store.frame import load
from cebench.store.schema import KEY_COLUMNS, SCHEMA_VERSION
from conftest import rewrite

BIN = Path(sys.executable).parent
GRID = ["--device", "cpu", "--variant", "dense,chunked", "--batch", "1,2,3", "--context", "16", "--vocab", "600",
        "--d-model", "16", "--ce-chunk", "8,32", "--repeats", "1", "--threads", "1"]
MEMORY = ("peak_bytes", "base_bytes", "peak_delta_bytes")


def keyed(path: Path) -> dict[tuple[str, ...], dict[str, str]]:
    """The CSV's rows by point key."""
    return {tuple(r[c] for c in KEY_COLUMNS): r for r in csv.DictReader(path.open())}


@pytest.mark.parametrize("batches,count", [("1", 3), ("1,2,3,4,5", 3), ("1,2,3,4,5,6,7", 2), ("1,2", 5),
                                           ("1,2,3,4,5,6,7,8,9,10,11", 4)])
def test_shards_partition_the_grid(batches, count):
    points = GridOptions(batch=batches, context="16,64", vocab="500", d_model="8", ce_chunk="16,64",
                         variant="dense,chunked,chunked-compiled").grid("cpu").expand()
    picked = [plan.make(points, Shard(i, count), set(), 1, 1).points for i in range(count)]
    flat = [p for share in picked for p in share]
    assert sorted(map(repr, flat)) == sorted(map(repr, points))  # every point once: none missing, none repeated
    assert len(set(map(repr, flat))) == len(points)
    for share in picked:  # each share keeps the grid's order
        assert share == [p for p in points if p in share]
    # Balanced by cost: no shard holds more than the costliest point above an even share.
    costs = [plan.nominal_cost_s(p, 1, 1) for p in points]
    loads = [sum(plan.nominal_cost_s(p, 1, 1) for p in share) for share in picked]
    assert max(loads) <= sum(costs) / count + max(costs) + 1e-9


def test_assignment_is_deterministic_and_fills_every_shard():
    costs = [5, 1, 1, 1, 1, 1, 3, 3]
    assert assign(costs, 3) == assign(list(costs), 3)
    assert sorted(set(assign(costs, 3))) == [0, 1, 2]
    assert assign([], 4) == []


@pytest.mark.parametrize("env,shard,local", [
    ({}, None, None),
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}, (3, 8), 3),
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}, None, 0),
    ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "5"}, (2, 4), None),
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "4"}, (1, 4), None),
    ({"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "6", "SLURM_LOCALID": "1", "SLURM_NTASKS": "6"}, (5, 6), 1),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "6"}, None, None),  # a batch script: one process, the whole grid
    ({"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"}, (1, 2), None),
])
def test_the_launchers_environment_names_the_shard(env, shard, local):
    got = from_env(env)
    assert (None if got is None else (got.index, got.count)) == shard and local_index(env) == local


def test_an_explicit_shard_ignores_a_broken_environment(tmp_path, monkeypatch):
    for name, value in {"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "4", "WORLD_SIZE": "x"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("RANK", raising=False)
    result = CliRunner().invoke(app, ["sweep", *GRID, "--variant", "dense", "--batch", "1", "--shard", "0/1",
                                      "--out", str(tmp_path / "r.csv")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r.csv").is_file()
    with pytest.raises(UsageError, match="RANK is not set"):
        from_env({"WORLD_SIZE": "4"})
    with pytest.raises(UsageError, match="out of range"):
        from_env({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "4"})


def test_shard_file_names():
    env = {"TORCHELASTIC_RUN_ID": "abc"}
    assert out_path(None, Shard(2, 8), env) == (Path("results/sweep-abc-shard-2-of-8.csv"), "")
    assert out_path(Path("x/r-{shard}.csv"), Shard(2, 8), env) == (Path("x/r-2-of-8.csv"), "")
    assert out_path(Path("x/r-{shard}.csv"), None, env) == (Path("x/r-0-of-1.csv"), "")
    # A launcher's shards all got one --out: each writes a file of its own.
    path, note = out_path(Path("x/r.csv"), Shard(2, 8, "torchrun (RANK of WORLD_SIZE)"), env)
    assert path == Path("x/r.shard-2-of-8.csv") and "{shard}" in note
    # --shard is one command per shard: its --out is written as given.
    assert out_path(Path("x/r.csv"), Shard(2, 8), env) == (Path("x/r.csv"), "")
    assert run_id({"TORCHELASTIC_RUN_ID": "none", "SLURM_JOB_ID": "77"}) == "77"
    assert run_id({"TORCHELASTIC_RUN_ID": "none"}).startswith("20")


@pytest.mark.parametrize("text", ["2", "2/2", "-1/2", "a/b", "1/0", ""])
def test_a_bad_shard_is_a_usage_error(text):
    with pytest.raises(UsageError, match="INDEX/COUNT") as info:
        parse(text)
    assert info.value.param == "shard"


@pytest.mark.slow
def test_torchrun_shards_merge_into_the_single_process_sweep(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    torchrun = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--no-python",
         str(BIN / "cebench"), "sweep", *GRID, "--out", str(tmp_path / "part-{shard}.csv")],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert torchrun.returncode == 0, torchrun.stderr[-3000:]
    parts = sorted(tmp_path.glob("part-*.csv"))
    assert [p.name for p in parts] == ["part-0-of-2.csv", "part-1-of-2.csv"]
    assert all({r["shard"] for r in csv.DictReader(p.open())} == {f"{i}/2"} for i, p in enumerate(parts))
    single = tmp_path / "single.csv"
    assert CliRunner().invoke(app, ["sweep", *GRID, "--out", str(single)]).exit_code == 0
    merged = tmp_path / "all.csv"
    result = CliRunner().invoke(app, ["merge", *map(str, parts), "--out", str(merged)])
    assert result.exit_code == 0, result.output
    assert "merged 2 files" in result.stdout and "shards 0/2, 1/2" in result.stdout
    got, want = keyed(merged), keyed(single)
    assert got.keys() == want.keys() and len(got) == len(load(merged)) == 3 * (1 + 2)
    for key, row in want.items():
        assert [got[key][c] for c in MEMORY] == [row[c] for c in MEMORY], key


def sweep(out: Path, *extra: str) -> None:
    result = CliRunner().invoke(app, ["sweep", *GRID, "--batch", "1", *extra, "--out", str(out)])
    assert result.exit_code == 0, result.output


def test_merge_drops_exact_repeats_and_refuses_conflicts(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    sweep(a, "--variant", "dense")
    sweep(b, "--variant", "chunked")
    runner = CliRunner()
    result = runner.invoke(app, ["merge", str(a), str(b), str(a), "--out", str(tmp_path / "ab.csv")])
    assert result.exit_code == 0, result.output
    assert "3 rows" in result.stdout and "note: a file is named twice" in result.stderr
    copy = tmp_path / "copy.csv"
    copy.write_bytes(a.read_bytes())
    result = runner.invoke(app, ["merge", str(a), str(copy), "--out", str(tmp_path / "dup.csv")])
    assert result.exit_code == 0 and "1 exact repeat dropped: 1 rows" in result.stdout
    # The same point measured again: another row with another time.
    rewrite(a, copy, lambda f: pd.concat([f, f.assign(time_ms_median=f["time_ms_median"].astype(float) * 2)]))
    result = runner.invoke(app, ["merge", str(b), str(a), str(copy), "--out", str(tmp_path / "bad.csv")])
    assert result.exit_code == 2 and "measured differently" in result.stderr and "variant=dense" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "bad.csv").exists()


def test_merge_refuses_predictions_beside_measurements(tmp_path):
    """A results CSV holds one kind of row: predictions of the very points measured would
    otherwise sit beside them, and `check` pass on them."""
    measured, predicted = tmp_path / "measured.csv", tmp_path / "predicted.csv"
    sweep(measured, "--variant", "dense")
    result = CliRunner().invoke(app, ["predict", "--target", "cpu", "--variant", "dense", "--batch", "1", "--context",
                                      "16", "--vocab", "600", "--d-model", "16", "--out", str(predicted)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["merge", str(measured), str(predicted), "--out", str(tmp_path / "mixed.csv")])
    assert result.exit_code == 2 and not (tmp_path / "mixed.csv").exists()
    assert f"{predicted} (line 2) holds predictions and {measured} (line 2) measurements" in result.stderr


def test_merge_reads_older_schemas_and_refuses_newer_ones(tmp_path):
    baseline = Path(__file__).resolve().parents[1] / "results" / "baseline.csv"  # schema 1
    a = tmp_path / "a.csv"
    sweep(a, "--variant", "dense", "--vocab", "999")
    out = tmp_path / "all.csv"
    result = CliRunner().invoke(app, ["merge", str(baseline), str(a), "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = load(out)
    assert sorted(set(frame["schema_version"])) == [1, SCHEMA_VERSION] and len(frame) == len(load(baseline)) + 1
    newer = tmp_path / "newer.csv"
    rows = list(csv.reader(a.open()))
    with newer.open("w", newline="") as f:
        csv.writer(f).writerows([rows[0] + ["joules"]] + [r + ["1.5"] for r in rows[1:]])
    result = CliRunner().invoke(app, ["merge", str(newer), "--out", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and "newer cebench (columns joules)" in result.stderr


def test_merge_leaves_out_a_cut_off_row_and_names_missing_shards(tmp_path):
    a = tmp_path / "a.csv"
    sweep(a, "--variant", "dense", "--shard", "0/3")
    sweep(a, "--variant", "dense", "--batch", "2", "--shard", "0/3")
    text = a.read_text()
    a.write_text(text + text.splitlines()[-1][:30])
    out = tmp_path / "all.csv"
    result = CliRunner().invoke(app, ["merge", str(a), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "last row was cut off" in result.stderr and "no rows from shard 1/3, 2/3" in result.stderr
    assert out.read_text().splitlines()[1:] == text.splitlines()[1:]


def test_merge_skips_a_shard_that_wrote_only_its_header_and_names_a_bad_shard_cell(tmp_path):
    a, empty = tmp_path / "a-0-of-2.csv", tmp_path / "empty.csv"
    sweep(tmp_path / "a-{shard}.csv", "--variant", "dense", "--shard", "0/2")
    empty.write_text(a.read_text().splitlines()[0] + "\n")  # killed during its first point
    result = CliRunner().invoke(app, ["merge", str(a), str(empty), "--out", str(tmp_path / "all.csv")])
    assert result.exit_code == 0 and "(1 + 0 rows, shards 0/2)" in result.stdout, result.output
    assert "no rows from shard 1/2" in result.stderr
    rows = list(csv.DictReader(a.open()))
    rows[0]["shard"] = "1/a"
    with a.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = CliRunner().invoke(app, ["merge", str(a), "--out", str(tmp_path / "bad.csv")])
    assert result.exit_code == 2 and "line 2: column 'shard': '1/a' is not INDEX/COUNT" in result.stderr
