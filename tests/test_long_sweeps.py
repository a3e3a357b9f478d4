"""What a long sweep needs: --resume, --isolate with --point-timeout, a plan announced
before the first point, and one clean line for every bad input."""
from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cebench.cli import app
from cebench.core.errors import UsageError
from cebench.run import plan
from cebench.store.files import check_out
from cebench.store.frame import load
from cebench.store.schema import COLUMNS, KEY_COLUMNS

CEBENCH = Path(sys.executable).parent / "cebench"
MISBEHAVING = Path(__file__).parent / "data" / "misbehaving.py"
OLD_CSV = Path(__file__).resolve().parents[1] / "results" / "baseline.csv"  # an older schema: no time_ms_samples
GRID = ["--device", "cpu", "--variant", "dense,chunked", "--batch", "1,2", "--context", "16", "--vocab", "600",
        "--d-model", "16", "--ce-chunk", "8", "--repeats", "1"]


def keys(path: Path) -> list[tuple[str, ...]]:
    return [tuple(r[c] for c in KEY_COLUMNS) for r in csv.DictReader(path.open())]


def test_resume_measures_only_the_missing_points(tmp_path):
    out = tmp_path / "r.csv"
    runner = CliRunner()
    assert runner.invoke(app, ["sweep", *GRID, "--out", str(out)]).exit_code == 0
    whole = out.read_text().splitlines(keepends=True)
    assert len(whole) == 1 + 4
    # A crash after two rows, in the middle of writing the third.
    out.write_text("".join(whole[:3]) + whole[3][:25])
    rows = list(csv.DictReader(out.open()))[:2]
    rows[1]["status"] = "error"  # ... and the second point had failed: it is measured again
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = runner.invoke(app, ["sweep", *GRID, "--resume", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "--resume: 1 already in" in result.stderr and "3 to measure" in result.stderr
    got = keys(out)
    assert len(got) == 1 + 1 + 3 and got[:2] == [tuple(r[c] for c in KEY_COLUMNS) for r in rows]
    assert set(got[2:]) == set(got[1:]) and len(set(got)) == 4
    again = runner.invoke(app, ["sweep", *GRID, "--resume", "--out", str(out)])
    assert again.exit_code == 0 and "nothing to measure: every point of this shard is already in" in again.stdout
    assert len(keys(out)) == 5
    frame = load(out)
    assert list(frame["status"]) == ["ok", "error", "ok", "ok", "ok"]


def test_overwrite_replaces_the_csv_and_bad_input_leaves_it(registry, tmp_path):
    """--overwrite: the CSV holds this sweep's rows alone, in this release's columns (appended
    to, a CSV of an older schema would get rows without their time samples), however often
    it runs; a variant that fails its smoke test, found after the file is locked, leaves it
    as it was."""
    out = tmp_path / "baseline.csv"
    shutil.copyfile(OLD_CSV, out)
    header = out.read_text().splitlines()[0].split(",")
    assert "time_ms_samples" not in header
    (tmp_path / "bad.py").write_text("def boom(h, weight, targets):\n    raise RuntimeError('boom')\n")
    runner = CliRunner()
    bad = runner.invoke(app, ["sweep", *GRID, "--variant", f"{tmp_path / 'bad.py'}:boom", "--overwrite",
                              "--out", str(out)])
    assert bad.exit_code == 2 and "boom" in bad.stderr, bad.output
    assert out.read_bytes() == OLD_CSV.read_bytes()
    for _ in range(2):  # a baseline command run again
        result = runner.invoke(app, ["sweep", *GRID, "--overwrite", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert "older cebench" not in result.stderr
        rows = list(csv.DictReader(out.open()))
        assert tuple(rows[0]) == COLUMNS and len(rows) == 4
        assert all(len(r["time_ms_samples"].split()) == 1 for r in rows)
        assert len(set(keys(out))) == 4


@pytest.fixture(scope="module")
def isolated(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One isolated sweep by the installed command, shared by the tests below (each of its
    points is a process start): a variant that aborts on the smoke test's tiny problem
    too, one that aborts on its points only, one that hangs, and dense and chunked."""
    out = tmp_path_factory.mktemp("isolated") / "r.csv"
    variants = ",".join(f"{MISBEHAVING}:{fn}" for fn in ("abort_always_loss", "abort_loss", "sleepy_loss"))
    proc = subprocess.run([str(CEBENCH), "sweep", *GRID, "--batch", "1", "--variant", f"{variants},dense,chunked",
                           "--point-timeout", "6", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, proc


@pytest.mark.slow
def test_isolated_points_survive_an_abort_and_a_hang(isolated):
    out, proc = isolated
    assert "each in a fresh process" in proc.stderr
    rows = list(csv.DictReader(out.open()))
    assert [r["status"] for r in rows] == ["error", "error", "timeout", "ok", "ok"]
    assert rows[1]["error"] == "the point's process died of SIGABRT (exit code -6)"
    assert rows[2]["error"].startswith("no result after 6 s (--point-timeout)")
    assert all(int(r["peak_delta_bytes"]) > 0 for r in rows[3:]) and len({r["device_name"] for r in rows}) == 1
    assert len(load(out)) == 5 and CliRunner().invoke(app, ["show", str(out)]).exit_code == 0


@pytest.mark.slow
def test_isolation_survives_a_variant_that_crashes_on_any_input(isolated):
    """A variant that aborts on the smoke test's tiny problem too: the sweep goes on, a
    warning names it, and its point is its row."""
    out, proc = isolated
    assert f"warning: --variant {MISBEHAVING}:abort_always_loss: on the smoke test's tiny problem, the point's " \
           "process died of SIGABRT" in proc.stderr
    assert proc.stderr.count("on the smoke test's tiny problem") == 1  # the others pass it
    (row,) = [r for r in csv.DictReader(out.open()) if r["variant"].endswith(":abort_always_loss")]
    assert row["status"] == "error" and "SIGABRT" in row["error"]


@pytest.mark.slow
def test_isolated_memory_is_the_in_process_memory(isolated, tmp_path):
    inside = tmp_path / "in.csv"
    result = CliRunner().invoke(app, ["sweep", *GRID, "--batch", "1", "--out", str(inside)])
    assert result.exit_code == 0, result.output
    a, b = load(inside), load(isolated[0])
    b = b[b["variant"].isin(["dense", "chunked"])].reset_index(drop=True)
    cols = ["variant", "ce_chunk", "peak_bytes", "base_bytes", "peak_delta_bytes", "flops"]
    assert len(a) == 2 and a[cols].equals(b[cols])


def test_the_plan_is_announced_and_a_long_grid_warned_about(tmp_path, monkeypatch):
    monkeypatch.setattr(plan, "LONG_SWEEP", 3)
    result = CliRunner().invoke(app, ["sweep", *GRID, "--out", str(tmp_path / "r.csv")])
    assert result.exit_code == 0, result.output
    line = result.stderr.splitlines()[0]
    assert line.startswith("sweep: 4 points on cpu · 4 to measure · matmul work alone ≥ ") and "GFLOP/s" in line
    assert "warning: 4 points is a long sweep for one process" in result.stderr
    sharded = CliRunner().invoke(app, ["sweep", *GRID, "--shard", "1/2", "--out", str(tmp_path / "s-{shard}.csv")])
    assert "shard 1/2 (--shard): 2 of them" in sharded.stderr and "long sweep" not in sharded.stderr
    assert (tmp_path / "s-1-of-2.csv").is_file()


def test_the_plan_says_a_users_loss_runs_unbounded_in_process(tmp_path, registry):
    """A user's loss that hangs would hang a sweep that measures it in its own process: the plan
    line names it and the option that bounds it; an isolated sweep has nothing to say."""
    user = f"{MISBEHAVING}:abort_loss"
    result = CliRunner().invoke(app, ["sweep", *GRID, "--batch", "1", "--variant", f"dense,{user}", "--vocab", "16",
                                      "--out", str(tmp_path / "r.csv")])
    assert result.exit_code == 0, result.output
    line = result.stderr.splitlines()[0]
    assert f"· {user} run here, unbounded: --point-timeout SECONDS runs each point in a fresh process" in line
    plain = CliRunner().invoke(app, ["sweep", *GRID, "--batch", "1", "--out", str(tmp_path / "s.csv")])
    assert "unbounded" not in plain.stderr
    build = tmp_path / "model.py"  # a user's model build runs in the sweep's process too
    build.write_text("from torch import nn\n\n\ndef build():\n    body = nn.Embedding(64, 8)\n"
                     "    return body, body.weight\n")
    modeled = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--model", f"{build}:build", "--batch", "1",
                                       "--context", "8", "--variant", "dense", "--repeats", "1",
                                       "--out", str(tmp_path / "m.csv")])
    assert f"· {build}:build run here, unbounded: --point-timeout SECONDS" in modeled.stderr, modeled.output


def test_estimate_counts_the_matmul_work():
    from cebench.core.config import Config

    point = Config(variant="dense", workload="loss", device="cpu", dtype="fp32",
                   batch=2, context=8, vocab=100, d_model=4, ce_chunk=None)
    assert plan.matmul_flops(point) == 6 * 16 * 100 * 4
    bf16 = Config(variant="dense", workload="loss", device="cpu", dtype="bf16",
                  batch=2, context=8, vocab=100, d_model=4, ce_chunk=None)
    rates = {"fp32": 1e6, "bf16": 1e5}
    assert plan.estimate_s([point, point, bf16], warmup=1, repeats=3, rates=rates) == pytest.approx(
        5 * 6 * 16 * 100 * 4 * (2 / 1e6 + 1 / 1e5))


BAD = [
    (["sweep", "--out", "{binary}"], "exists and is not a cebench results CSV"),
    (["predict", "--out", "{binary}"], "exists and is not a cebench results CSV"),
    (["sweep", "--out", "{file}/sub/r.csv"], "cannot write there"),
    (["predict", "--out", "{file}/r.csv"], "cannot write there"),
    (["sweep", "--out", "/proc/cebench-r.csv"], "cannot write there"),  # a folder no one can create files in
    (["sweep", "--batch", "99999999999999999999"], "--batch: 99999999999999999999 is too large"),
    (["sweep", "--ce-chunk", str(10**30)], "--ce-chunk: 1000000000000000000000000000000 is too large"),
    (["predict", "--batch", "99999999999999999999"], "--batch: 99999999999999999999 is too large"),
    (["sweep", "--batch", ""], "--batch: empty"),
    (["sweep", "--shard", "2/2"], "--shard: '2/2' is not INDEX/COUNT"),
    (["sweep", "--resume"], "--resume: needs --out"),
    (["sweep", "--overwrite"], "--overwrite: needs --out"),
    (["sweep", "--overwrite", "--resume", "--out", "{new}"], "--overwrite: not with --resume"),
    (["sweep", "--overwrite", "--out", "{binary}"], "exists and is not a cebench results CSV"),
    (["sweep", "--point-timeout", "-1"], "--point-timeout: -1 must be a positive number"),
    (["sweep", "--no-isolate", "--point-timeout", "5"], "--point-timeout: needs --isolate"),
    (["merge", "{binary}", "--out", "{new}"], "is not a cebench results CSV"),
    (["merge", "{new}", "--out", "{other}"], "no such file"),
]


@pytest.mark.parametrize("args,message", BAD)
def test_bad_input_is_one_line_and_touches_no_file(tmp_path, monkeypatch, args, message):
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"PK\x03\x04\x00\x00\xff\xfe binary \x00")
    (tmp_path / "file").write_text("a file, not a folder\n")
    names = {"binary": binary, "file": tmp_path / "file", "new": tmp_path / "new.csv", "other": tmp_path / "o.csv"}
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    monkeypatch.chdir(tmp_path)  # where a default results/ folder would appear
    result = CliRunner().invoke(app, [a.format(**names) for a in args])
    assert result.exit_code == 2, result.output  # an unexpected exception is exit code 1
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing created or changed


def test_an_unreadable_out_is_named(tmp_path, monkeypatch):
    out = tmp_path / "r.csv"
    out.write_text("x\n")
    real = Path.open

    def denied(self, *args, **kwargs):
        if self == out:
            raise PermissionError(13, "Permission denied")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(UsageError, match="r.csv: cannot be read \\(Permission denied\\)"):
        check_out(out)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_fit_measure_without_the_target_names_target():
    result = CliRunner().invoke(app, ["fit", "--measure", "--budget", "1GiB"])
    assert result.exit_code == 2 and "--target: no CUDA GPU" in result.stderr and "use cpu" in result.stderr
    assert "--device" not in result.stderr


@pytest.mark.slow
def test_a_broken_contract_is_still_a_usage_error_when_isolated(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def loss(h, weight, targets):\n    return h.sum(dim=1)\n")
    out = tmp_path / "r.csv"
    result = CliRunner().invoke(app, ["sweep", *GRID, "--variant", f"{wrong}:loss", "--isolate", "--out", str(out)])
    assert result.exit_code == 2 and "returned Tensor of shape (12,)" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()
