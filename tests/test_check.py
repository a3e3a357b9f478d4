"""`cebench check`: the peak-memory regression gate, on real sweep CSVs edited row by row."""
from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner, Result

from cebench.cli import app
from cebench.losses.variants import Variant
from conftest import fail, rewrite, sweep_csv


def rows(frame: pd.DataFrame, variant: str, batch: int) -> pd.Series:
    return (frame["variant"] == variant) & (frame["batch"] == str(batch))


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    return sweep_csv(tmp_path_factory.mktemp("check") / "results.csv", "--batch", "1,2", "--context", "32")


def check(*args: object) -> Result:
    return CliRunner().invoke(app, ["check", *map(str, args)])


def report(*args: object) -> dict:
    result = check(*args, "--json")
    return {"exit_code": result.exit_code, **json.loads(result.stdout)}


def scale_peak(frame: pd.DataFrame, variant: str, batch: int, factor: float) -> None:
    mask = rows(frame, variant, batch)
    frame.loc[mask, "peak_delta_bytes"] = frame.loc[mask, "peak_delta_bytes"].map(lambda v: str(int(int(v) * factor)))


def test_identical_results_pass(measured):
    result = check(measured, "--baseline", measured)
    assert result.exit_code == 0, result.output
    assert "PASS: 4 points matched; 0 regressed, 0 improved, 0 missing" in result.stdout
    r = report(measured, "--baseline", measured)
    assert r["passed"] and r["matched"] == 4 and not (r["regressed"] or r["improved"] or r["missing"])


def test_a_predicted_baseline_is_said_to_be_one(measured, tmp_path):
    predicted = tmp_path / "predicted.csv"
    made = CliRunner().invoke(app, ["predict", "--target", "cpu", "--variant", "dense,chunked", "--batch", "1,2",
                                    "--context", "32", "--vocab", "1000", "--d-model", "16", "--ce-chunk", "16",
                                    "--out", str(predicted)])
    assert made.exit_code == 0, made.output
    result = check(measured, "--baseline", predicted)
    said = f"warning: {predicted}: 4 row(s) are predictions (cebench predict), not measurements"
    output = result.output.replace("\n", "")  # warnings wrap at the terminal's width, paths too
    assert result.exit_code == 0 and said in output and f"{measured}:" not in output, result.output
    assert "warning" not in check(measured, "--baseline", measured).output  # measurements alone: nothing to say


def test_baseline_peak_lowered_by_10_percent_fails(measured, tmp_path):
    baseline = rewrite(measured, tmp_path / "baseline.csv", lambda f: scale_peak(f, "chunked", 2, 0.9))
    result = check(measured, "--baseline", baseline)
    assert result.exit_code == 1
    assert "FAIL" in result.stdout and "regressed" in result.stdout
    r = report(measured, "--baseline", baseline)
    assert r["exit_code"] == 1 and not r["passed"]
    [finding] = r["regressed"]
    assert finding["config"] == {"variant": "chunked", "workload": "loss", "device": "cpu", "dtype": "fp32",
                                 "batch": 2, "context": 32, "vocab": 1000, "d_model": 16, "ce_chunk": 16,
                                 "ignore_frac": 0, "softcap": 0, "label_smoothing": 0, "z_loss": 0,
                                 "reduction": "mean", "grads": "none", "retain_graph": "no", "model": "none",
                                 "optimizer": "none", "activation_checkpointing": "none", "fsdp": 1,
                                 "compile": "none", "tp": 1}
    assert finding["metric"] == "peak_delta_bytes"
    assert finding["change"] == pytest.approx(1 / 0.9 - 1, abs=1e-4)
    assert finding["current"] > finding["baseline"]


@pytest.mark.parametrize("status", ["oom", "error"])
def test_ok_point_that_now_fails_is_a_regression(measured, tmp_path, status):
    results = rewrite(measured, tmp_path / "results.csv", lambda f: fail(f, rows(f, "dense", 2), status))
    r = report(results, "--baseline", measured)
    assert r["exit_code"] == 1
    [finding] = r["regressed"]
    assert (finding["config"]["variant"], finding["config"]["batch"]) == ("dense", 2)
    assert (finding["metric"], finding["baseline"], finding["current"]) == ("status", "ok", status)
    # The other way round, the point is an improvement and the gate passes.
    back = report(measured, "--baseline", results)
    assert back["exit_code"] == 0 and [f["current"] for f in back["improved"]] == ["ok"]


def _with_peak(value: int) -> Callable[[pd.DataFrame], None]:
    def edit(frame: pd.DataFrame) -> None:
        frame.loc[rows(frame, "chunked", 1), "peak_delta_bytes"] = str(value)
    return edit


@pytest.mark.parametrize("tolerance,grown,exit_code", [
    ("1%", 1_010_000, 0), ("1%", 1_010_001, 1), ("1", 1_010_000, 0), ("1", 1_010_001, 1),
    ("0.5%", 1_005_000, 0), ("0.5%", 1_005_001, 1), ("0%", 1_000_000, 0), ("0", 1_000_001, 1),
])
def test_memory_tolerance_boundary(measured, tmp_path, tolerance, grown, exit_code):
    """Growth of exactly the tolerance passes; one byte more fails."""
    baseline = rewrite(measured, tmp_path / "baseline.csv", _with_peak(1_000_000))
    results = rewrite(measured, tmp_path / "results.csv", _with_peak(grown))
    result = check(results, "--baseline", baseline, "--mem-tol", tolerance)
    assert result.exit_code == exit_code, result.output


def test_default_tolerance_is_one_percent(measured, tmp_path):
    baseline = rewrite(measured, tmp_path / "baseline.csv", _with_peak(1_000_000))
    assert check(rewrite(measured, tmp_path / "ok.csv", _with_peak(1_010_000)), "--baseline", baseline).exit_code == 0
    assert check(rewrite(measured, tmp_path / "bad.csv", _with_peak(1_010_001)), "--baseline", baseline).exit_code == 1


def test_improvements_are_listed_and_pass(measured, tmp_path):
    baseline = rewrite(measured, tmp_path / "baseline.csv", lambda f: scale_peak(f, "dense", 2, 1.1))
    r = report(measured, "--baseline", baseline)
    assert r["exit_code"] == 0 and r["passed"] and not r["regressed"]
    [finding] = r["improved"]
    assert finding["config"]["variant"] == "dense" and finding["change"] == pytest.approx(1 / 1.1 - 1, abs=1e-4)
    assert "improved" in check(measured, "--baseline", baseline).stdout


def test_points_on_one_side_only_warn_and_fail_with_strict(measured, tmp_path):
    short = rewrite(measured, tmp_path / "short.csv", lambda f: f[~rows(f, "dense", 1)])
    new = report(measured, "--baseline", short)
    assert new["exit_code"] == 0 and [m["only_in"] for m in new["missing"]] == ["results"]
    gone = report(short, "--baseline", measured)
    assert gone["exit_code"] == 0 and [m["only_in"] for m in gone["missing"]] == ["baseline"]
    assert gone["missing"][0]["config"]["variant"] == "dense" and gone["missing"][0]["config"]["ce_chunk"] is None
    assert "only in baseline" in check(short, "--baseline", measured).stdout
    strict = report(short, "--baseline", measured, "--strict")
    assert strict["exit_code"] == 1 and not strict["passed"] and not strict["regressed"]


def test_unsupported_now_is_missing_not_a_regression(measured, tmp_path):
    unsupported = rewrite(measured, tmp_path / "results.csv", lambda f: fail(
        f, rows(f, "chunked", 1), "unsupported", "torch.compile on CPU needs a C++ compiler"))
    r = report(unsupported, "--baseline", measured)
    assert r["exit_code"] == 0 and not r["regressed"]
    [missing] = r["missing"]
    assert missing["only_in"] == "baseline" and "unsupported: torch.compile" in missing["detail"]


def _repeat_worse(last: bool) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """Add a second chunked batch-2 row with 20 % more memory, after (`last`) or before the original."""
    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        worse = frame[rows(frame, "chunked", 2)].copy()
        scale_peak(worse, "chunked", 2, 1.2)
        return pd.concat([frame, worse] if last else [worse, frame])
    return edit


def test_last_row_of_a_repeated_configuration_is_compared(measured, tmp_path):
    worse_last = report(rewrite(measured, tmp_path / "last.csv", _repeat_worse(last=True)), "--baseline", measured)
    assert worse_last["exit_code"] == 1 and len(worse_last["regressed"]) == 1
    assert any("repeat an earlier configuration" in w for w in worse_last["warnings"])
    worse_first = report(rewrite(measured, tmp_path / "first.csv", _repeat_worse(last=False)), "--baseline", measured)
    assert worse_first["exit_code"] == 0 and not worse_first["regressed"]


def test_time_is_gated_only_with_time_tol(measured, tmp_path):
    def slower(frame: pd.DataFrame) -> None:
        mask = rows(frame, "dense", 1)
        for column in ("time_ms_median", "time_ms_p25", "time_ms_p75"):
            frame.loc[mask, column] = frame.loc[mask, column].map(lambda v: repr(float(v) * 2))
        frame.loc[mask, "time_ms_samples"] = frame.loc[mask, "time_ms_samples"].map(
            lambda v: " ".join(repr(float(x) * 2) for x in v.split()))

    results = rewrite(measured, tmp_path / "slow.csv", slower)
    assert report(results, "--baseline", measured)["exit_code"] == 0
    r = report(results, "--baseline", measured, "--time-tol", "50%")
    assert r["exit_code"] == 1 and r["time_tol_pct"] == 50.0
    [finding] = r["regressed"]
    assert finding["metric"] == "time_ms_median" and finding["change"] == pytest.approx(1.0, rel=1e-4)
    assert report(results, "--baseline", measured, "--time-tol", "150")["exit_code"] == 0


@pytest.mark.parametrize("option,value", [("--mem-tol", "abc"), ("--mem-tol", "-1%"), ("--mem-tol", "1%%"),
                                          ("--mem-tol", ""), ("--time-tol", "fast")])
def test_bad_tolerance_is_a_usage_error(measured, option, value):
    result = check(measured, "--baseline", measured, option, value)
    assert result.exit_code == 2
    assert f"{option}: '{value}' is not a percentage" in result.stderr


def test_no_configuration_in_common_is_a_usage_error(measured, tmp_path):
    other = rewrite(measured, tmp_path / "other.csv", lambda f: f.assign(vocab="2000"))
    result = check(measured, "--baseline", other)
    assert result.exit_code == 2 and "no measured configuration in common" in result.stderr


def test_help_documents_exit_codes():
    text = " ".join(CliRunner().invoke(app, ["check", "--help"]).stdout.split())
    assert "Exit codes: 0 pass · 1 regression" in text and "2 usage or input error" in text


def test_installed_entry_point_exits_1_on_regression(measured, tmp_path):
    baseline = rewrite(measured, tmp_path / "baseline.csv", lambda f: scale_peak(f, "dense", 1, 0.9))
    cebench = Path(sys.executable).parent / "cebench"
    proc = subprocess.run([str(cebench), "check", str(measured), "--baseline", str(baseline)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "FAIL: 4 points matched; 1 regressed" in proc.stdout and "Traceback" not in proc.stderr


class FakeClock:
    """`time.perf_counter` for a sweep whose step times are chosen, not measured: the
    clock moves 1 µs a reading, and `cost(ms)` a loss whose each call moves it `ms` more
    (0.1 % more each call, so that no two samples tie)."""

    def __init__(self) -> None:
        self.now, self.calls = 0.0, 0

    def __call__(self) -> float:
        self.now += 1e-6
        return self.now

    def cost(self, ms: float):
        def loss(h, weight, targets, ce_chunk):
            self.calls += 1
            self.now += ms / 1e3 * (1 + self.calls / 1000)
            return (h.sum() + weight.sum()) * 0.0
        return loss


def _timed_sweep(registry, clock: FakeClock, path: Path, ms: float) -> Path:
    """A real sweep of a variant whose step takes `ms` on `clock`."""
    registry.REGISTRY.pop("timed", None)
    registry.register(Variant("timed", "loss", clock.cost(ms), chunked=False, compiled=False, summary="test"))
    result = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--variant", "timed", "--batch", "1",
                                      "--context", "8", "--vocab", "100", "--d-model", "8", "--repeats", "6",
                                      "--out", str(path)])
    assert result.exit_code == 0, result.output
    return path


def test_time_gate_fails_a_slowdown_a_sweep_measured(registry, tmp_path, monkeypatch):
    clock = FakeClock()
    with monkeypatch.context() as patch:
        patch.setattr(time, "perf_counter", clock)  # the step times are the clock's: nothing left to chance
        baseline = _timed_sweep(registry, clock, tmp_path / "fast.csv", 10)
        slow = _timed_sweep(registry, clock, tmp_path / "slow.csv", 20)
    fast_ms, slow_ms = ([float(v) for v in next(csv.DictReader(p.open()))["time_ms_samples"].split()]
                        for p in (baseline, slow))
    assert len(fast_ms) == len(slow_ms) == 6 and max(fast_ms) < 11 and 20 < min(slow_ms)
    r = report(slow, "--baseline", baseline, "--time-tol", "5%")
    assert r["exit_code"] == 1 and r["alpha"] == 0.05
    [finding] = r["regressed"]
    assert finding["metric"] == "time_ms_median" and finding["change"] > 0.8
    assert finding["p_value"] == pytest.approx(1 / 924)  # 6 + 6 samples without overlap: the exact test's least p
    assert report(baseline, "--baseline", baseline, "--time-tol", "5%")["exit_code"] == 0


def _with_samples(values: list[float]) -> Callable[[pd.DataFrame], None]:
    """Every ok row timed as `values` (ms), its statistics recomputed from them."""
    def edit(frame: pd.DataFrame) -> None:
        q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
        frame[["time_ms_samples", "time_ms_median", "time_ms_p25", "time_ms_p75", "time_ms_min", "repeats"]] = [
            " ".join(map(repr, values)), repr(q2), repr(q1), repr(q3), repr(min(values)), str(len(values))]
    return edit


def test_time_gate_passes_noise_whose_medians_differ_beyond_the_tolerance(measured, tmp_path):
    # Two runs of the same code on a noisy machine: medians 10.0 and 10.8 ms (+8 %), but the
    # samples interleave, so the slowdown beyond 5 % is not significant.
    baseline = rewrite(measured, tmp_path / "a.csv", _with_samples([9.2, 9.6, 10.0, 10.9, 11.4]))
    noisy = rewrite(measured, tmp_path / "b.csv", _with_samples([9.4, 9.9, 10.8, 11.0, 11.6]))
    r = report(noisy, "--baseline", baseline, "--time-tol", "5%")
    assert r["exit_code"] == 0 and not r["regressed"] and not r["warnings"]
    # The same medians from a single sample each cannot be tested: the gate falls back to them.
    r = report(rewrite(measured, tmp_path / "c.csv", _with_samples([10.8])), "--baseline",
               rewrite(measured, tmp_path / "d.csv", _with_samples([10.0])), "--time-tol", "5%")
    assert r["exit_code"] == 1 and len(r["regressed"]) == 4
    assert any("too few step-time samples" in w for w in r["warnings"])
