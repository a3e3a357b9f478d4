"""Failure is data: oom, error and unsupported rows, and the sweep goes on."""
import csv

import torch
from typer.testing import CliRunner

from cebench.cli import app
from cebench.runner import run
from cebench.variants import Variant
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
