"""Fault injection: broken files for every reader, writes that fail, a sweep killed and
resumed, concurrent writers, absurd numbers, user variants that exit, interrupt, hang or
return NaN, and the smaller promises of a bad day (one-line errors, checks before the work)."""
from __future__ import annotations

import csv
import errno
import functools
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner, Result

from cebench import api
from cebench.cli import app
from cebench.core.errors import InputWarning, UsageError
from cebench.losses.variants import Variant
from cebench.run import isolate, shard
from cebench.run.grid import GridOptions
from cebench.run.runner import run
from cebench.store import files
from cebench.store.schema import COLUMNS, KEY_COLUMNS
from conftest import FAST, SMALL, cpu_config, rewrite, sweep_csv

ROOT = Path(__file__).resolve().parents[1]
CEBENCH = Path(sys.executable).parent / "cebench"
MISBEHAVING = Path(__file__).parent / "data" / "misbehaving.py"
TINY = ["--device", "cpu", "--vocab", "100", "--d-model", "8", "--context", "8", "--repeats", "1"]


def invoke(*args: object, **kwargs: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)


def warnings_in(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


def keys(path: Path) -> list[tuple[str, ...]]:
    return [tuple(r[c] for c in KEY_COLUMNS) for r in csv.DictReader(path.open())]


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """A real 4-row CSV: dense and chunked at batch 1 and 2."""
    return sweep_csv(tmp_path_factory.mktemp("faults") / "good.csv", "--batch", "1,2", "--context", "16")


# -- broken files: every reader leaves out a cut-off or ragged last row, with one warning line --

def _cut(text: str) -> tuple[str, int]:
    """The last row cut off mid-write (no line end), and its line."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[:-1]) + lines[-1][:40], len(lines)


def _short(text: str) -> tuple[str, int]:
    """The last row too short, with a line end."""
    lines = text.splitlines(keepends=True)
    return "".join(lines[:-1]) + lines[-1][:40] + "\n", len(lines)


def _long(text: str) -> tuple[str, int]:
    """A ragged row, a cell too many, after the last whole one."""
    return text + "x," * len(COLUMNS) + "x\n", len(text.splitlines()) + 1


BROKEN = {"cut": _cut, "short": _short, "long": _long}


def _read(reader: str, bad: Path, good: Path, tmp_path: Path) -> Result:
    if reader == "show":
        return invoke("show", bad)
    if reader == "plot":
        return invoke("plot", bad, "--out-dir", tmp_path / "figures")
    if reader == "check":
        return invoke("check", bad, "--baseline", good)
    if reader == "check --baseline":
        return invoke("check", good, "--baseline", bad)
    if reader == "merge":
        return invoke("merge", bad, "--out", tmp_path / "merged.csv")
    assert reader == "resume"
    return invoke("sweep", *SMALL, "--batch", "1,2", "--context", "16", "--resume", "--out", bad)


READERS = ["show", "plot", "check", "check --baseline", "merge", "resume"]


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("broken", list(BROKEN))
def test_a_cut_off_or_ragged_last_row_is_left_out_with_one_warning(measured, tmp_path, reader, broken):
    text, line = BROKEN[broken](measured.read_text())
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    result = _read(reader, bad, measured, tmp_path)
    assert result.exit_code == 0, result.output
    (warned,) = warnings_in(result)
    assert warned.startswith(f"warning: {bad}: line {line}: its last row ")
    assert "Traceback" not in result.output
    if reader == "show":
        unwrapped = "".join(result.stdout.split())  # a long path is wrapped mid-word at 80 columns
        assert f"{4 - (broken != 'long')}rowsfrom{bad}" in unwrapped
    if reader == "check --baseline" and broken != "long":  # the half row is never compared: the point is missing
        assert "only in results" in result.stdout and "1 missing" in result.stdout
    if reader == "merge":
        assert len(pd.read_csv(tmp_path / "merged.csv")) == 4 - (broken != "long")
    if reader == "resume" and broken == "long":  # every point done: nothing measured, nothing written
        assert "nothing to measure" in result.stdout and bad.read_text() == text
    elif reader == "resume":  # the row is cut from the file, and its point measured again: whole rows only
        assert len(keys(bad)) == 4 and len(set(keys(bad))) == 4
        assert invoke("show", bad).stderr == ""


@pytest.mark.parametrize("reader", READERS)
def test_a_ragged_row_before_the_last_is_exit_2_naming_its_line(measured, tmp_path, reader):
    lines = measured.read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.csv"
    bad.write_text("".join(lines[:2]) + lines[2][:40] + "\n" + "".join(lines[3:]))
    cells = len(next(csv.reader([lines[2][:40]])))
    before = bad.read_bytes()
    result = _read(reader, bad, measured, tmp_path)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"cebench: error: {bad}: line 3 has {cells} cells where the header has "
                                     f"{len(COLUMNS)}")
    assert bad.read_bytes() == before


# -- writes that fail: one line, exit 2, the file ending at its last whole row --

def test_a_full_disk_mid_row_leaves_the_file_at_its_last_whole_row(tmp_path, monkeypatch):
    out = tmp_path / "r.csv"
    real = os.write
    rows = []

    def full_disk(fd: int, data: bytes) -> int:
        """The third row (the second measured) meets a full disk after half of it is written."""
        if os.readlink(f"/proc/self/fd/{fd}") != str(out):
            return real(fd, data)
        rows.append(data)
        if len(rows) == 3:
            real(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    result = invoke("sweep", *TINY, "--variant", "dense", "--batch", "1,2,3", "--out", out)
    monkeypatch.undo()
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == (f"cebench: error: {out}: writing failed (No space left on "
                                                      "device); the 1 rows before it are kept")
    assert out.read_text().endswith("\n") and len(out.read_text().splitlines()) == 2
    shown = invoke("show", out)
    assert shown.exit_code == 0 and shown.stderr == ""


@pytest.mark.parametrize("command", [["sweep", *TINY], ["predict", "--target", "cpu", *TINY[2:8]]],
                         ids=lambda c: c[0])
def test_a_full_disk_at_the_header_leaves_no_empty_file(tmp_path, monkeypatch, command):
    out = tmp_path / "r.csv"
    real = os.write

    def full_disk(fd: int, data: bytes) -> int:
        if os.readlink(f"/proc/self/fd/{fd}") == str(out):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    result = invoke(*command, "--variant", "dense", "--batch", "1", "--out", out)
    monkeypatch.undo()
    assert result.exit_code == 2 and "writing failed (No space left on device)" in result.stderr, result.output
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_whose_only_variant_is_refused_leaves_no_header_only_file(exits, tmp_path, registry):
    out = tmp_path / "r.csv"
    result = invoke("sweep", *TINY, "--batch", "1", "--variant", f"{exits}:exits", "--out", out)
    assert result.exit_code == 2 and "raised SystemExit(3)" in result.stderr, result.output
    assert not out.exists()


def _long_name(tmp_path: Path, suffix: str) -> Path:
    return tmp_path / ("a" * 300 + suffix)


@pytest.mark.parametrize("command", [
    ["sweep", *TINY, "--variant", "dense", "--batch", "1", "--out", "{csv}"],
    ["sweep", *TINY, "--variant", "dense", "--batch", "1", "--out", "new/{csv}"],
    ["predict", "--target", "cpu", "--variant", "dense", "--batch", "1", "--context", "8", "--vocab", "100",
     "--d-model", "8", "--out", "{csv}"],
    ["merge", "{good}", "--out", "{csv}"],
    ["plot", "{good}", "--out-dir", "{dir}"],
    ["explain", "--target", "cpu", "--variant", "dense", "--out", "{png}"],
])
def test_a_name_too_long_is_one_line_and_exit_2(measured, tmp_path, command):
    names = {"csv": _long_name(tmp_path, ".csv"), "png": _long_name(tmp_path, ".png"),
             "dir": _long_name(tmp_path, ""), "good": measured}
    result = invoke(*(arg.replace("new/{csv}", str(tmp_path / "new" / names["csv"].name)).format(**names)
                      for arg in command))
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("cebench: error: ") and "File name too long" in line and len(line) < 400
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_stdout_on_a_full_device_is_one_line_and_exit_2(measured):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([str(CEBENCH), "show", str(measured)], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == "cebench: error: cannot write to standard output (No space left on device)\n"


def test_every_file_cebench_writes_has_one_mode(measured, tmp_path):
    assert invoke("merge", measured, "--out", tmp_path / "merged.csv").exit_code == 0
    mode = 0o666 & ~_umask()
    assert (tmp_path / "merged.csv").stat().st_mode & 0o777 == measured.stat().st_mode & 0o777 == mode
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- a sweep killed, resumed, and written by two processes at once --

SLOW = '''import os
import time
import torch.nn.functional as F


def loss(h, weight, targets):
    """Hangs on its second point (not on the smoke test's vocab 16) while the marker file exists."""
    if weight.shape[0] > 16 and h.shape[0] > 8 and os.path.exists({marker!r}):
        time.sleep(600)
    return F.cross_entropy(F.linear(h, weight), targets)
'''


@pytest.mark.slow
def test_sigkill_then_resume_and_a_second_writer_is_refused(tmp_path, registry):
    marker = tmp_path / "hang"
    marker.touch()
    variant = tmp_path / "slow.py"
    variant.write_text(SLOW.format(marker=str(marker)))
    out = tmp_path / "r.csv"
    grid = [*TINY, "--batch", "1,2,3", "--variant", f"{variant}:loss", "--out", str(out)]
    proc = subprocess.Popen([str(CEBENCH), "sweep", *grid], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while (not out.exists() or len(out.read_text().splitlines()) < 2) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        before = out.read_bytes()
        second = invoke("sweep", *grid, "--resume")  # while the first still writes: refused, nothing measured
        assert second.exit_code == 2, second.output
        assert second.stderr.strip() == (f"cebench: error: {out}: another cebench process is writing it (a sweep "
                                         "still running?); wait for it to end, or choose another --out")
        assert out.read_bytes() == before
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    marker.unlink()
    resumed = invoke("sweep", *grid, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert "--resume: 1 already in" in resumed.stderr and "2 to measure" in resumed.stderr
    assert len(keys(out)) == 3 == len(set(keys(out))) and out.read_bytes().startswith(before)


def test_a_lock_held_refuses_a_second_writer_before_any_work(tmp_path):
    out = sweep_csv(tmp_path / "r.csv", "--batch", "1", "--context", "16")
    before = out.read_bytes()
    held = files.Lock(out)
    try:
        result = invoke("sweep", *SMALL, "--batch", "1,2", "--context", "16", "--resume", "--out", out)
        predicted = invoke("predict", "--target", "cpu", "--variant", "dense", "--batch", "1", "--context", "16",
                           "--out", tmp_path / "p.csv")  # another file: not held
    finally:
        held.close()
    assert result.exit_code == 2 and "another cebench process is writing it" in result.stderr
    assert "sweep:" not in result.stderr and out.read_bytes() == before
    assert predicted.exit_code == 0, predicted.output


# -- absurd numbers: refused or warned about before any work, memory bounded by the grid --

def test_a_shard_count_far_beyond_the_grid_is_planned_at_once(tmp_path):
    assert shard.assign([1.0, 3.0, 2.0], 99_999_999_999) == [2, 0, 1]
    result = invoke("sweep", *TINY, "--variant", "dense", "--batch", "1,2", "--shard", "1/99999999999",
                    "--out", tmp_path / "r.csv")
    assert result.exit_code == 0, result.output
    assert "shard 1/99999999999 (--shard): 1 of them" in result.stderr and len(keys(tmp_path / "r.csv")) == 1


@pytest.mark.parametrize("args,message", [
    (["--repeats", "99999999999"], "--repeats: must be from 1 to 10,000"),
    (["--warmup", "99999999999"], "--warmup: must be from 1 to 10,000"),
    (["--threads", "99999999999"], "--threads: must be from 1 to"),
])
def test_a_huge_count_is_refused_before_any_work(tmp_path, args, message):
    result = invoke("sweep", *TINY, "--variant", "dense", "--batch", "1", *args, "--out", tmp_path / "r.csv")
    assert result.exit_code == 2 and message in result.stderr and not (tmp_path / "r.csv").exists()


@pytest.mark.parametrize("args,message", [
    (["fit", "--budget", "1e400"],
     "cebench: error: --budget: '1e400' must be a positive, finite byte size (at least 1 B)"),
    (["show", "x.csv", "--columns", ",,,"], "cebench: error: --columns: empty (give one or more comma-separated "
                                            "values)"),
])
def test_an_overflowing_or_empty_value_is_one_line(args, message):
    result = invoke(*args)
    assert result.exit_code == 2 and result.stderr.strip() == message


@pytest.mark.slow
def test_a_huge_or_infinite_point_timeout_waits_without_a_limit():
    for timeout in (float("inf"), 1e300, 3e6):
        outcome = isolate.call(time.sleep, (0,), isolate.Child(), timeout)
        assert outcome.status == "ok", outcome


@pytest.mark.slow
def test_a_hanging_user_variant_is_a_timeout_row(registry):
    spec = f"{MISBEHAVING}:sleepy_loss"
    point = cpu_config(registry.resolve(spec).name, batch=1, context=8, vocab=100, d_model=8)
    outcome = isolate.call(functools.partial(run, calibrate=False), (point, FAST), isolate.Child(specs=(spec,)), 2.0)
    assert outcome.status == "timeout" and "no result after 2 s" in outcome.error


class _Stop(Exception):
    pass


def _stop(*args: object) -> None:
    raise _Stop


def test_predict_and_fit_at_absurd_sizes_warn_before_they_start(monkeypatch, tmp_path):
    """Only where the step is traced whole: a user's chunked loss (the built-in chunked loss
    is extrapolated from a few chunks, whatever its N)."""
    loss = tmp_path / "mine.py"
    loss.write_text("import torch.nn.functional as F\n"
                    "def ce(h, weight, targets, ce_chunk):\n"
                    "    return F.cross_entropy(h @ weight.T, targets)\n")
    spec = f"{loss}:ce"
    monkeypatch.setattr("cebench.engine.points.predict", _stop)
    with pytest.warns(InputWarning, match=r"predict: 488,282 chunks of meta ops"), pytest.raises(_Stop):
        api.predict(target="cpu", variant=f"chunked,{spec}", batch=10_000, context=100_000, ce_chunk=2048)
    with pytest.raises(UsageError, match=r"predict: 4,882,813 chunks of meta ops .* beyond the 1,000,000 cebench "
                                         r"traces .*; fewer tokens or a larger --ce-chunk"):
        api.predict(target="cpu", variant=f"chunked,{spec}", batch=100_000, context=100_000, ce_chunk=2048)
    monkeypatch.undo()
    monkeypatch.setattr("cebench.engine.points.fit", _stop)
    with pytest.warns(InputWarning, match=r"fit \(at --max-batch 4,096\): 200,000 chunks"), pytest.raises(_Stop):
        api.fit(2**40, target="cpu", variant=spec, context=100_000, ce_chunk=2048, d_model=8, vocab=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputWarning)
        with pytest.raises(_Stop):
            api.fit(2**40, target="cpu", variant="chunked", context=100_000, ce_chunk=2048, d_model=8, vocab=100)
    result = invoke("fit", "--budget", "80GiB", "--max-batch", "99999999999", "--context", "100000")
    assert result.exit_code == 2 and "--max-batch: 99,999,999,999 sequences" in result.stderr


def test_show_warns_before_a_very_long_table(measured, monkeypatch):
    monkeypatch.setattr("cebench.cli.analyze.LONG_TABLE", 3)
    result = invoke("show", measured)
    assert result.exit_code == 0
    assert warnings_in(result) == [f"warning: {measured}: 4 rows to lay out, which takes a while; --format csv "
                                   "prints their values sooner, and cebench plot --filter draws a part"]


# -- user variants that exit, interrupt or return NaN in the sweep's own process --

EXITS = '''import os
import signal
import sys
import time

import torch.nn.functional as F


def _dense(h, weight, targets):
    return F.cross_entropy(F.linear(h, weight), targets)


def exits(h, weight, targets):
    if weight.shape[0] > 16:
        sys.exit(3)
    return _dense(h, weight, targets)


def quits(h, weight, targets):
    if weight.shape[0] > 16:
        os._exit(4)
    return _dense(h, weight, targets)


def interrupts(h, weight, targets):
    if weight.shape[0] > 16:
        raise KeyboardInterrupt
    return _dense(h, weight, targets)


def exits_at_once(h, weight, targets):
    sys.exit(5)


def build():
    """A model's build that exits."""
    os._exit(6)


def ctrl_c(h, weight, targets):
    """A person's Ctrl-C while it runs."""
    if weight.shape[0] > 16:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    return _dense(h, weight, targets)
'''


@pytest.fixture(scope="module")
def exits(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("exits") / "exits.py"
    path.write_text(EXITS)
    return path


@pytest.mark.parametrize("fn,how,rows", [("exits", "raised SystemExit(3)", 1), ("quits", "called os._exit(4)", 1),
                                         ("interrupts", "raised KeyboardInterrupt", 1),
                                         ("exits_at_once", "raised SystemExit(5)", None)])
def test_a_variant_that_ends_the_process_is_named_with_isolate_suggested(exits, tmp_path, registry, fn, how, rows):
    out = tmp_path / "r.csv"
    result = invoke("sweep", *TINY, "--batch", "1,2", "--variant", f"dense,{exits}:{fn}", "--out", out)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"cebench: error: --variant: {exits}:{fn} {how} in the sweep's own process")
    assert "--isolate" in line
    assert (len(keys(out)) if out.exists() else None) == rows  # the rows before it kept (none: the smoke test)


SHAPE = ["--vocab", "100", "--d-model", "8", "--context", "8"]


@pytest.mark.parametrize("command", [["predict", "--target", "cpu"], ["predict", "--target", "h100-80gb"],
                                     ["fit", "--target", "cpu", "--budget", "1GiB"],
                                     ["explain", "--target", "cpu"], ["explain", "--device", "cpu"]],
                         ids=lambda c: "-".join(c[::2]))
@pytest.mark.parametrize("fn,how", [("exits", "raised SystemExit(3)"), ("quits", "called os._exit(4)"),
                                    ("interrupts", "raised KeyboardInterrupt"),
                                    ("exits_at_once", "raised SystemExit(5)")])
def test_a_variant_that_ends_the_process_is_one_line_in_every_command(exits, tmp_path, registry, command, fn, how):
    """predict, fit and explain run a user's loss in their own process too: its exits are one
    line naming it, exit 2 (the smoke test's tiny problem included: `exits_at_once`)."""
    out = ["--out", tmp_path / "f.png"] if command[0] == "explain" else []
    batch = [] if command[0] == "fit" else ["--batch", "2"]
    result = invoke(*command, *SHAPE, *batch, "--variant", f"{exits}:{fn}", *out)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"cebench: error: --variant: {exits}:{fn} {how} in cebench's process, which "
                                     "would end the command")
    assert list(tmp_path.iterdir()) == []  # no figure


@pytest.mark.parametrize("command", [["predict", "--target", "cpu"], ["sweep", "--device", "cpu"]],
                         ids=lambda c: c[0])
def test_a_build_that_ends_the_process_is_one_line(exits, tmp_path, command):
    result = invoke(*command, "--model", f"{exits}:build", "--batch", "1", "--context", "8",
                    "--out", tmp_path / "r.csv")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == (f"cebench: error: --model: {exits}:build: build() called "
                                                      "os._exit(6) in cebench's process, which would end the command")
    assert list(tmp_path.iterdir()) == []


def test_a_ctrl_c_while_a_variant_runs_is_an_interruption(exits, tmp_path, registry):
    out = tmp_path / "r.csv"
    result = invoke("sweep", *TINY, "--batch", "1,2", "--variant", f"dense,{exits}:ctrl_c", "--out", out)
    assert result.exit_code == 130, result.output
    assert f"interrupted: 1 of 4 rows kept in {out}" in result.stderr and len(keys(out)) == 1


def _nan_loss(h, weight, targets, ce_chunk=None):
    import torch.nn.functional as F

    return F.cross_entropy(F.linear(h, weight), targets) * float("nan")


def test_a_loss_that_returns_nan_is_an_error_row(registry):
    registry.register(Variant("nan-loss", "loss", _nan_loss, chunked=False, compiled=False, summary="test"))
    result = run(cpu_config("nan-loss"), FAST)
    assert result.status == "error" and "not finite" in result.error


# -- merge --

def _shard_sweep(out: Path, spec: str, batch: str) -> None:
    result = invoke("sweep", *TINY, "--variant", "dense", "--batch", batch, "--shard", spec, "--out", out)
    assert result.exit_code == 0, result.output


def test_merge_counts_shards_per_grid(tmp_path):
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    _shard_sweep(a, "0/2", "1,2")
    _shard_sweep(b, "1/2", "1,2")
    _shard_sweep(c, "1/2", "1,3")  # another sweep's grid
    whole = invoke("merge", a, b, "--out", tmp_path / "ab.csv")
    assert whole.exit_code == 0 and whole.stderr == "", whole.output
    (grid,) = set(pd.read_csv(tmp_path / "ab.csv", dtype=str)["grid"])
    assert re.fullmatch("[0-9a-f]{12}", grid)
    mixed = invoke("merge", a, c, "--out", tmp_path / "ac.csv")
    assert mixed.exit_code == 0
    assert re.fullmatch(r"warning: no rows from shard ./2 \(grid \w+\), ./2 \(grid \w+\): the merged sweep is "
                        "incomplete\n", mixed.stderr), mixed.stderr


def test_merge_refuses_a_newer_schema_and_keeps_the_last_row_of_a_point_in_one_file(measured, tmp_path):
    newer = rewrite(measured, tmp_path / "newer.csv", lambda f: f.assign(schema_version="99"))
    result = invoke("merge", newer, "--out", tmp_path / "x.csv")
    assert result.exit_code == 2 and "line 2 was written with schema 99 by a newer cebench" in result.stderr
    assert not (tmp_path / "x.csv").exists()
    shown = invoke("show", newer)  # a reader reads what it knows of it, and says so
    assert shown.exit_code == 0 and "written by a newer cebench (schema 99; this one reads up to" in shown.stderr
    again = rewrite(measured, tmp_path / "again.csv",
                    lambda f: pd.concat([f, f.iloc[:1].assign(time_ms_median="999")]))
    result = invoke("merge", again, "--out", tmp_path / "m.csv")
    assert result.exit_code == 0, result.output
    assert "1 earlier row of a point measured again dropped: 4 rows" in result.stdout
    merged = pd.read_csv(tmp_path / "m.csv")
    assert len(merged) == 4 and list(merged["time_ms_median"]).count(999) == 1


# -- checked before the work, and kept apart --

def test_resume_of_a_misspelled_path_says_so(measured, tmp_path):
    (tmp_path / "results.csv").write_bytes(measured.read_bytes())
    out = tmp_path / "resutls.csv"
    result = invoke("sweep", *TINY, "--variant", "dense", "--batch", "1", "--resume", "--out", out)
    assert result.exit_code == 0
    assert warnings_in(result) == [f"warning: --resume: {out} does not exist (did you mean "
                                   f"{tmp_path / 'results.csv'}?): every point is measured, into a new CSV"]


def test_unknown_columns_are_refused_before_the_work(tmp_path, monkeypatch):
    out = tmp_path / "r.csv"
    result = invoke("sweep", *TINY, "--variant", "dense", "--batch", "1", "--columns", "bogus", "--out", out)
    assert result.exit_code == 2 and result.stderr.startswith("cebench: error: --columns: unknown column(s) bogus")
    assert not out.exists() and "sweep:" not in result.stderr
    monkeypatch.setattr(api, "explain", _stop)  # never reached
    result = invoke("explain", "--target", "cpu", "--columns", "bogus")
    assert result.exit_code == 2 and "--columns: unknown column(s) bogus (choose from kind" in result.stderr
    result = invoke("explain", "--target", "cpu", "--out", tmp_path / "x.csv")
    assert result.exit_code == 2 and "--out: " in result.stderr and "ending in .png, .svg, .pdf" in result.stderr


def test_predictions_and_measurements_never_share_a_file(measured, tmp_path):
    mixed = tmp_path / "m.csv"
    mixed.write_bytes(measured.read_bytes())
    result = invoke("predict", "--target", "cpu", "--out", mixed)
    assert result.exit_code == 2
    assert "holds measurements (line 2): predictions go in a CSV of their own" in result.stderr
    assert mixed.read_bytes() == measured.read_bytes()
    predicted = tmp_path / "p.csv"
    assert invoke("predict", "--target", "cpu", "--variant", "dense", "--out", predicted).exit_code == 0
    before = predicted.read_bytes()
    result = invoke("sweep", *TINY, "--variant", "dense", "--batch", "1", "--out", predicted)
    assert result.exit_code == 2 and "holds predictions (cebench predict)" in result.stderr
    assert predicted.read_bytes() == before


# -- one style of error line --

def test_a_type_error_is_one_line_and_a_huge_argument_is_shortened():
    result = invoke("sweep", "--repeats", "abc")
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("cebench: error: ") and "--repeats" in line and "╭" not in result.stderr
    unknown = invoke("explain", "--bogus")
    assert unknown.exit_code == 2 and unknown.stderr.startswith("cebench: error: No such option: --bogus")
    huge = invoke("sweep", "--batch", "x" * 6000)
    (line,) = huge.stderr.strip().splitlines()
    assert huge.exit_code == 2 and line.endswith("' is not an integer") and len(line) < 300


def test_fit_help_calls_its_one_value_options_one_value():
    result = invoke("fit", "--help", env={"COLUMNS": "250"})
    for flag in ("--context", "--vocab", "--d-model", "--dtype"):
        (line,) = [row for row in result.stdout.splitlines() if re.search(rf"{flag}\s", row)]
        assert re.search(rf"{flag}\s+VALUE", line) and "comma" not in line and "LIST" not in line, line


def test_the_table_heads_each_ratio_apart(measured):
    from cebench.render.report import results_table
    from cebench.store.frame import load

    headers = [c.header for c in results_table(load(measured)).columns]
    assert len(headers) == len(set(headers)) and "Δ vs base" in headers and "time vs base" in headers


# -- explain's figure and its files --

def test_explain_titles_say_what_each_panel_is():
    import matplotlib.pyplot as plt

    from cebench.analyze.explain import explain
    from cebench.render.explain_plot import figure

    done = [explain(cpu_config(v, batch=2, context=64, vocab=500, d_model=16, ce_chunk=c), False)
            for v, c in (("dense", None), ("chunked", 32), ("torch-lce", 64))]
    fig = figure(done)
    try:
        fig.canvas.draw()
        assert "ce_chunk" not in fig.get_suptitle()
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
        assert [ax.get_title().splitlines()[0] for ax in panels] == ["dense", "chunked · ce_chunk 32",
                                                                     "torch-lce · ce_chunk 64"]
        for ax in panels:
            phases = [t.get_text() for child in ax.child_axes for t in child.get_xticklabels()]
            assert phases == ["forward", "backward"], (ax.get_title(), phases)
    finally:
        plt.close(fig)


def test_explain_json_writes_no_figure_and_its_default_figure_is_ignored_by_git(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("explain", "--target", "cpu", "--variant", "dense", "--batch", "1", "--context", "16",
                    "--vocab", "100", "--d-model", "8", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["figure"] is None and list(tmp_path.iterdir()) == []
    ignored = subprocess.run(["git", "check-ignore", "-q", "results/explain-20260101-120000.png"], cwd=ROOT)
    kept = subprocess.run(["git", "check-ignore", "-q", "results/explain-cpu.png"], cwd=ROOT)
    assert (ignored.returncode, kept.returncode) == (0, 1)


# -- the README's quick start shows chunking engage --

def test_the_quick_start_sweep_shows_chunking():
    readme = (ROOT / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("\n## ", readme.index("## Quick start") + 1)]
    lines = [line.split("#")[0] for line in quick.splitlines() if "cebench sweep" in line and "--ce-chunk" in line]
    assert lines
    for line in lines:
        words = shlex.split(line[line.index("cebench sweep") + len("cebench sweep"):])
        given = {w[2:].replace("-", "_"): v for w, v in zip(words, words[1:], strict=False) if w.startswith("--")}
        grid = GridOptions(**{k: v for k, v in given.items() if k in ("batch", "context", "ce_chunk")}).grid("cpu")
        assert max(b * c for b in grid.batch for c in grid.context) > min(grid.ce_chunk), line


@pytest.mark.parametrize("command", [
    ["explain", "--target", "cpu", "--variant", "dense", "--batch", "1", "--context", "8", "--vocab", "100",
     "--d-model", "8", "--out", "{dir}/f.png"],
    ["explain", "--model", "gpt2", "--target", "cpu", "--batch", "1", "--context", "8", "--out", "{dir}/f.svg"],
    ["plot", "{csv}", "--out-dir", "{dir}"]], ids=lambda c: f"{c[0]}-{c[2]}")
def test_a_figure_onto_a_full_disk_is_one_line_and_no_file(tmp_path, monkeypatch, command):
    """The disk fills half way through a figure: one line, exit 2, nothing left in its folder."""
    import matplotlib.figure

    csv_path = sweep_csv(tmp_path / "r.csv", "--batch", "1,2", "--context", "8") if command[0] == "plot" else ""
    folder = tmp_path / "figures"
    folder.mkdir()

    def full(self, f, **kwargs):
        f.write(b"\x89PNG half a figure")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    result = invoke(*(a.format(dir=folder, csv=csv_path) for a in command))
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("cebench: error: ") and line.endswith(": cannot write there (No space left on device)")
    assert list(folder.iterdir()) == []


def test_a_build_too_large_for_the_machine_is_an_oom_row(tmp_path):
    """The CPU allocator's failure inside a user's build (a 40 GB model on a smaller machine)
    is the point's `oom`, as it would be in its step, not an `error` blaming the build."""
    build = tmp_path / "huge.py"
    build.write_text(textwrap.dedent("""\
        import torch
        from torch import nn

        FAILED = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 42949672960 bytes."


        def build():
            if torch.empty(0).device.type != "meta":  # as allocating 40 GB on this machine fails
                raise RuntimeError(FAILED)
            body = nn.Embedding(100, 8)
            return body, body.weight
        """))
    (row,) = api.sweep(model=f"{build}:build", device="cpu", batch=1, context=8, variant="dense", repeats=1,
                       out=tmp_path / "r.csv")
    assert row.status == "oom" and "can't allocate memory" in row.error


def test_an_isolated_sweep_bounds_a_build_that_hangs_while_it_plans(tmp_path):
    """--point-timeout reaches a user's build that the sweep resolves before any point runs
    (it hung for ever): one line naming it, exit 2, no file."""
    build = tmp_path / "slow.py"
    build.write_text("import time\n\n\ndef build():\n    time.sleep(600)\n")
    start = time.monotonic()
    result = invoke("sweep", "--model", f"{build}:build", "--batch", "1", "--context", "8", "--point-timeout", "1",
                    "--out", tmp_path / "r.csv")
    assert time.monotonic() - start < 60 and result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"cebench: error: --model: {build}:build: build() was still running after 1 s "
                                     "in cebench's process: stopped")
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.parametrize("command", [["predict", "--target", "cpu", "--batch", "2"],
                                     ["fit", "--target", "cpu", "--budget", "1GiB"],
                                     ["explain", "--target", "cpu", "--batch", "2"],
                                     ["explain", "--device", "cpu", "--batch", "2"]], ids=lambda c: "-".join(c[:2]))
def test_point_timeout_stops_a_users_loss_that_hangs_in_every_command(tmp_path, registry, command):
    """predict, fit and explain run a user's loss in their own process: --point-timeout bounds
    it (it hung for ever), one line naming it, exit 2, no figure."""
    spec = f"{MISBEHAVING}:sleepy_loss"
    out = ["--out", tmp_path / "f.png"] if command[0] == "explain" else []
    result = invoke(*command, *SHAPE, "--variant", spec, "--point-timeout", "1", *out)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"cebench: error: --variant: {spec} was still running after 1 s in cebench's "
                                     "process: stopped")
    assert list(tmp_path.iterdir()) == []
    bad = invoke(*command, *SHAPE, "--variant", "dense", "--point-timeout", "-1", *out)
    assert bad.exit_code == 2 and bad.stderr.strip() == ("cebench: error: --point-timeout: -1 must be a positive "
                                                         "number of seconds")


@pytest.mark.parametrize("command", [["predict", "--target", "cpu", "--batch", "1"],
                                     ["fit", "--target", "cpu", "--budget", "1GiB"],
                                     ["explain", "--target", "cpu", "--batch", "1"]], ids=lambda c: c[0])
def test_point_timeout_stops_a_build_that_hangs_in_every_command(tmp_path, command):
    """The build runs when the grid resolves the model, before any trace: bounded too."""
    build = tmp_path / "slow.py"
    build.write_text("import time\n\n\ndef build():\n    time.sleep(600)\n")
    result = invoke(*command, "--model", f"{build}:build", "--context", "8", "--point-timeout", "1")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"cebench: error: --model: {build}:build: build() was still running after 1 s "
                                     "in cebench's process: stopped")


HANG_ONCE_STARTED = '''import pathlib
import time
import torch.nn.functional as F


def loss(h, weight, targets):
    """Says it started its first point (not the smoke test's vocab 16), then hangs."""
    if weight.shape[0] > 16:
        pathlib.Path({started!r}).touch()
        time.sleep(600)
    return F.cross_entropy((h @ weight.T).float(), targets)
'''


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_overwrite_keeps_the_old_rows_until_the_first_new_row(tmp_path, how):
    """--overwrite of a baseline, killed or interrupted while its first point runs: the file
    is as it was (its rows used to be dropped when measuring began)."""
    out = sweep_csv(tmp_path / "baseline.csv", "--batch", "1,2", "--context", "8")
    before = out.read_bytes()
    started = tmp_path / "started"
    variant = tmp_path / "hang.py"
    variant.write_text(HANG_ONCE_STARTED.format(started=str(started)))
    proc = subprocess.Popen([str(CEBENCH), "sweep", *TINY, "--variant", f"{variant}:loss", "--overwrite",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        assert started.exists() and out.read_bytes() == before
        proc.send_signal(how)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0 and out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no half-made replacement


def test_overwrite_of_a_sweep_refused_at_its_first_point_keeps_the_old_rows(tmp_path):
    """A loss that passes the smoke test's tiny problem and exits the process at the first
    point refuses the sweep there (one line, exit 2): the CSV it was to replace keeps its
    rows."""
    out = sweep_csv(tmp_path / "baseline.csv", "--batch", "1", "--context", "8")
    before = out.read_bytes()
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import sys\nimport torch.nn.functional as F\n\n\ndef loss(h, weight, targets):\n"
                     "    if weight.shape[0] > 16:\n        sys.exit(3)\n"
                     "    return F.cross_entropy(h @ weight.T, targets)\n")
    result = invoke("sweep", *TINY, "--variant", f"{wrong}:loss", "--overwrite", "--out", out)
    assert result.exit_code == 2 and "raised SystemExit(3)" in result.stderr, result.output
    assert out.read_bytes() == before


# -- importing a user's module or a peer's package is user code: bounded, and its exits one line --

@pytest.mark.parametrize("command", [["predict", "--target", "cpu", "--batch", "1"],
                                     ["fit", "--target", "cpu", "--budget", "1GiB"],
                                     ["explain", "--target", "cpu", "--batch", "1"],
                                     ["sweep", "--device", "cpu", "--batch", "1"]], ids=lambda c: c[0])
def test_point_timeout_stops_a_build_module_that_hangs_while_imported(tmp_path, command):
    """A build module that sleeps at its top level (it ran on, silent, past any limit): the
    import is bounded as the build is, one line naming the module, exit 2, no file."""
    build = tmp_path / "slow.py"
    build.write_text("import time\n\ntime.sleep(600)\n\n\ndef build():\n    pass\n")
    out = ["--out", tmp_path / "r.csv"] if command[0] == "sweep" else []
    start = time.monotonic()
    result = invoke(*command, "--model", f"{build}:build", "--context", "8", "--point-timeout", "1", *out)
    assert time.monotonic() - start < 60 and result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"cebench: error: --model: {build}:build was still importing {build} after 1 s "
                                     "in cebench's process: stopped")
    assert list(tmp_path.iterdir()) == [build]


EXITS_AT_IMPORT = '''import sys

sys.exit(3)


def build():
    pass


def loss(h, weight, targets):
    pass
'''


@pytest.mark.parametrize("command", [["predict", "--target", "cpu"], ["sweep", "--device", "cpu"]],
                         ids=lambda c: c[0])
@pytest.mark.parametrize("option,fn", [("model", "build"), ("variant", "loss")])
def test_a_module_that_exits_while_imported_is_one_line(tmp_path, registry, command, option, fn):
    """A build's or a loss's module whose top level calls sys.exit(3) ended the command with
    exit 3 and nothing said: one line naming the module, exit 2, no file."""
    module = tmp_path / "exits.py"
    module.write_text(EXITS_AT_IMPORT)
    shape = SHAPE if option == "variant" else ["--context", "8"]
    result = invoke(*command, f"--{option}", f"{module}:{fn}", *shape, "--batch", "1", "--out", tmp_path / "r.csv")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        f"cebench: error: --{option}: {module}:{fn} raised SystemExit(3) while importing {module} in cebench's "
        "process, which would end the command")
    assert list(tmp_path.iterdir()) == [module]


@pytest.mark.slow
@pytest.mark.needs("triton")  # without it cebench names Triton and never imports liger_kernel
def test_a_peer_package_that_exits_while_imported_is_one_line(tmp_path):
    """A `liger_kernel` whose __init__ calls sys.exit(7) (ahead of the one installed): verify
    exited 7, silent; now one line naming the package, exit 2."""
    package = tmp_path / "fake" / "liger_kernel"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import sys\n\nsys.exit(7)\n")
    path = os.pathsep.join(filter(None, [str(tmp_path / "fake"), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([str(CEBENCH), "verify", "--device", "cpu", "--variant", "liger-kernel"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": path})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip().splitlines()[-1] == (
        "cebench: error: --variant: liger-kernel raised SystemExit(7) while importing liger_kernel in cebench's "
        "process, which would end the command")


THREAD_LEFT_RUNNING = '''import threading
import time

from torch import nn


def _forever():
    while True:
        time.sleep(1)


def build():
    threading.Thread(target=_forever, name="poller").start()
    body = nn.Embedding(100, 8)
    return body, body.weight
'''


@pytest.mark.slow
def test_a_build_that_leaves_a_thread_running_does_not_keep_predict_from_exiting(tmp_path):
    """A build that starts a non-daemon thread that never ends kept `predict` running for
    ever after its rows were written: one warning naming it, and the command's exit."""
    build = tmp_path / "threads.py"
    build.write_text(THREAD_LEFT_RUNNING)
    out = tmp_path / "p.csv"
    proc = subprocess.run([str(CEBENCH), "predict", "--target", "cpu", "--model", f"{build}:build", "--batch", "1",
                           "--context", "8", "--variant", "dense", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stderr.strip().splitlines() == [f"warning: {build} left thread 'poller' running; exiting"]
    assert "1 rows → " in proc.stdout or "1 row → " in proc.stdout
    assert len(keys(out)) == 1
