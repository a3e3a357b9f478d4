"""Failure is data: oom, error and unsupported rows, and the sweep goes on; a sweep cut short
keeps its rows, and a CSV cut short is repaired."""
import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cebench.cli import app
from cebench.losses.variants import Variant
from cebench.run.runner import run
from conftest import FAST, cpu_config


def _raise_oom(h, weight, targets, ce_chunk):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def _cpu_alloc_failure(h, weight, targets, ce_chunk):
    return torch.empty(2**60, dtype=torch.float32).sum()  # 4 EiB: the CPU allocator refuses


def _raise_other(h, weight, targets, ce_chunk):
    raise ValueError("shape mismatch\nsecond line")


def test_injected_oom_becomes_a_row_and_the_sweep_goes_on(registry, tmp_path):
    registry.register(Variant("oom-inject", "loss", _raise_oom, chunked=False, compiled=False, summary="test"))
    out = tmp_path / "r.csv"
    res = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--batch", "1,2", "--context", "16", "--vocab", "300",
                                   "--d-model", "16", "--variant", "dense,oom-inject,chunked", "--ce-chunk", "8",
                                   "--repeats", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(out.open()))
    assert [(r["variant"], r["batch"], r["status"]) for r in rows] == [
        ("dense", "1", "ok"), ("oom-inject", "1", "oom"), ("chunked", "1", "ok"),
        ("dense", "2", "ok"), ("oom-inject", "2", "oom"), ("chunked", "2", "ok"),
    ]
    assert "OutOfMemoryError: CUDA out of memory" in rows[1]["error"]
    assert rows[1]["peak_bytes"] == rows[1]["time_ms_median"] == ""


def test_cpu_allocator_failure_is_oom(registry):
    registry.register(Variant("huge", "loss", _cpu_alloc_failure, chunked=False, compiled=False, summary="test"))
    result = run(cpu_config("huge"), FAST)
    assert result.status == "oom"
    assert "can't allocate memory" in result.error


def test_other_exception_is_an_error_row_with_its_first_line(registry):
    registry.register(Variant("broken", "loss", _raise_other, chunked=False, compiled=False, summary="test"))
    result = run(cpu_config("broken"), FAST)
    assert (result.status, result.error) == ("error", "ValueError: shape mismatch")


def test_variant_that_cannot_run_here_is_unsupported(registry, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    result = run(cpu_config("dense-compiled"), FAST)
    assert result.status == "unsupported"
    assert "C++ compiler" in result.error


def test_a_cut_off_last_row_is_dropped_before_appending(tmp_path):
    out = tmp_path / "r.csv"
    grid = ["sweep", "--device", "cpu", "--batch", "1", "--context", "8", "--vocab", "100", "--d-model", "8",
            "--variant", "dense", "--repeats", "1", "--out", str(out)]
    assert CliRunner().invoke(app, grid).exit_code == 0
    whole = out.read_text()
    out.write_text(whole + "dense,loss,cpu,AMD,fp32,1,8,8,100")  # a crash mid-row: no line end
    res = CliRunner().invoke(app, grid)
    assert res.exit_code == 0, res.output
    assert "last row was cut off" in res.stderr and "dense,loss,cpu,AMD,fp32,1,8,8,100" in res.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and out.read_text().startswith(whole)
    assert CliRunner().invoke(app, ["show", str(out)]).exit_code == 0


def test_a_write_that_fails_stops_the_sweep_in_one_line(tmp_path, monkeypatch):
    real = csv.writer
    calls = []

    class FullDisk:
        """A CSV writer whose third row (the second measured one) meets a full disk."""

        def __init__(self, f):
            self.inner = real(f)

        def writerow(self, row):
            calls.append(row)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
            return self.inner.writerow(row)

    monkeypatch.setattr("cebench.store.files.csv.writer", FullDisk)
    out = tmp_path / "r.csv"
    res = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--batch", "1,2", "--context", "8", "--vocab", "100",
                                   "--d-model", "8", "--variant", "dense", "--repeats", "1", "--out", str(out)])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines()[-1] == (f"cebench: error: {out}: writing failed (No space left on "
                                                   "device); the 1 rows before it are kept")
    monkeypatch.undo()
    assert len(out.read_text().splitlines()) == 2 and CliRunner().invoke(app, ["show", str(out)]).exit_code == 0


@pytest.mark.slow
def test_sigterm_keeps_the_rows_and_exits_143(tmp_path):
    # The first point (batch 1: N = 8) is quick; the second hangs until the signal comes, so
    # exactly one row is kept whenever it comes (the smoke test's tiny problem has vocab 16).
    slow = tmp_path / "slow.py"
    slow.write_text("import time\nimport torch.nn.functional as F\n\n"
                    "def loss(h, weight, targets):\n"
                    "    if weight.shape[0] > 16 and h.shape[0] > 8:\n        time.sleep(600)\n"
                    "    return F.cross_entropy(F.linear(h, weight), targets)\n")
    out = tmp_path / "r.csv"
    cebench = Path(sys.executable).parent / "cebench"
    proc = subprocess.Popen([str(cebench), "sweep", "--device", "cpu", "--batch", "1,2,3,4,5,6", "--context", "8",
                             "--vocab", "100", "--d-model", "8", "--variant", f"{slow}:loss", "--repeats", "1",
                             "--out", str(out)], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while (not out.exists() or len(out.read_text().splitlines()) < 2) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    assert len(out.read_text().splitlines()) == 1 + 1 and f"terminated: 1 of 6 rows kept in {out}" in stderr
    assert "Traceback" not in stderr
