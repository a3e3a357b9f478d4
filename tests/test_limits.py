"""The limits on every row: `flops` counted on meta tensors, `tflops_per_s`, and the measured
`matmul_floor_ms`, through real `sweep` and `predict` runs and in the table."""
from __future__ import annotations

import csv
import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from torch.utils.flop_counter import FlopCounterMode
from typer.testing import CliRunner

from cebench.cli import app
from cebench.core.config import Config
from cebench.engine.trace import count_flops
from cebench.measure import limits
from cebench.run.runner import Settings, run
from conftest import FAST, cpu_config

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "results" / "baseline.csv"  # schema 1: no flops, tflops_per_s, matmul_floor_ms
# N = 50 and 150 rows: ce_chunk 16 divides neither, ce_chunk 64 is one chunk at N = 50.
SHAPES = ["--batch", "1,3", "--context", "50", "--vocab", "1000", "--d-model", "24", "--ce-chunk", "16,64"]
MORE_SHAPES = ["--vocab", "1000,1536", "--d-model", "16,24"]  # predictions cost milliseconds
# FLOPs per N · vocab · d_model; torch-lce: its custom op's Python kernel, run under the counter
PER_MAC = {"dense": 6, "chunked": 8, "dense-sample": 2, "chunked-sample": 2, "torch-lce": 6}


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open()))


def nvd(row: dict[str, str]) -> int:
    return int(row["tokens"]) * int(row["vocab"]) * int(row["d_model"])


def test_flops_are_exact_in_sweep_and_predict_rows(tmp_path):
    swept, predicted = tmp_path / "sweep.csv", tmp_path / "predict.csv"
    variants = "dense,chunked,dense-sample,chunked-sample,torch-lce"
    runner = CliRunner()
    result = runner.invoke(app, ["sweep", "--device", "cpu", *SHAPES, "--repeats", "1", "--workload", "loss,sample",
                                 "--variant", variants, "--out", str(swept)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["predict", "--target", "cpu", *SHAPES, *MORE_SHAPES, "--dtype", "fp32",
                                 "--workload", "loss,sample", "--variant", variants,
                                 "--out", str(predicted)])
    assert result.exit_code == 0, result.output
    measured = rows(swept)
    assert len(measured) == 2 * (1 + 2 + 1 + 2 + 2) and all(r["status"] == "ok" for r in measured)
    for row in measured:
        assert int(row["flops"]) == PER_MAC[row["variant"]] * nvd(row), row
        assert float(row["matmul_floor_ms"]) > 0, row
        # tflops_per_s = flops / median (s) / 1e12, both cells rounded to 6 significant digits
        assert float(row["tflops_per_s"]) == pytest.approx(int(row["flops"]) / float(row["time_ms_median"]) / 1e9,
                                                           rel=1e-5)
    predictions = rows(predicted)
    assert len(predictions) == 2 * 2 * 2 * (1 + 2 + 1 + 2 + 2)
    for row in predictions:
        assert row["status"] == "ok" and int(row["flops"]) == PER_MAC[row["variant"]] * nvd(row), row
        assert row["tflops_per_s"] == row["matmul_floor_ms"] == ""  # nothing was timed


def test_compiled_and_user_variants_are_counted_like_their_eager_function(registry, tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent("""
        import torch.nn.functional as F

        def my_ce(h, weight, targets):
            return F.cross_entropy(h @ weight.T, targets)

        def on_host(h, weight, targets):  # .item() cannot run on meta tensors
            return F.cross_entropy(h @ weight.T, targets) * (targets.max().item() > 0)
        """))
    mine = f"{tmp_path / 'mine.py'}:my_ce"
    for name, chunk, per_mac in [("dense-compiled", None, 6), ("chunked-compiled", 16, 8), (mine, None, 6),
                                 (f"{mine}-compiled", None, 6)]:
        registry.resolve(name)
        config = cpu_config(name, batch=3, context=50, vocab=1000, ce_chunk=chunk)
        assert count_flops(config) == per_mac * config.tokens * 1000 * 32, name  # no compile happens here
    # A step that cannot run on meta tensors (.item()) is left empty, and its row is still measured.
    registry.resolve(f"{tmp_path / 'mine.py'}:on_host")
    config = cpu_config(f"{tmp_path / 'mine.py'}:on_host")
    assert count_flops(config) is None
    row = run(config, FAST)
    assert row.status == "ok" and row.flops is None and row.tflops_per_s is None and row.matmul_floor_ms > 0


def test_a_count_beyond_int64_is_left_empty():
    # 6 · N · vocab · d_model = 6 · 2^62 > 2^63 - 1; on meta nothing is allocated.
    huge = cpu_config(batch=2**10, context=2**10, vocab=2**22, d_model=2**20)
    assert count_flops(huge) is None
    assert count_flops(cpu_config(batch=2**10, context=2**10, vocab=2**22, d_model=2**17)) == 6 * 2**59


def test_the_floor_is_calibrated_once_per_shape_and_never_fails_a_row(monkeypatch):
    monkeypatch.setattr(limits, "_FLOORS", {})
    calls: list[Config] = []
    timed = limits._time_matmuls

    def counted(config: Config, settings: Settings) -> float:
        calls.append(config)
        return timed(config, settings)

    monkeypatch.setattr(limits, "_time_matmuls", counted)
    dense, chunked = run(cpu_config("dense"), FAST), run(cpu_config("chunked", ce_chunk=32), FAST)
    assert len(calls) == 1 and dense.matmul_floor_ms == chunked.matmul_floor_ms > 0
    # Given (measured by a parent process, say): used as it is, nothing is calibrated.
    given = run(cpu_config("dense", batch=3), FAST, calibrate=False, floor_ms=1.5)
    assert given.matmul_floor_ms == 1.5 and len(calls) == 1
    # A calibration that failed elsewhere is not tried again here.
    assert run(cpu_config("dense", batch=3), FAST, calibrate=False).matmul_floor_ms is None and len(calls) == 1
    # Buffers that do not fit: no floor, and the row is measured as ever.

    def out_of_memory(config: Config, settings: Settings) -> float:
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 TB")

    monkeypatch.setattr(limits, "_time_matmuls", out_of_memory)
    row = run(cpu_config("dense", batch=4), FAST)
    assert row.status == "ok" and row.matmul_floor_ms is None and row.flops == 6 * 256 * 2000 * 32


@pytest.mark.parametrize("workload,names", [("loss", ("dense", "chunked")),
                                            ("sample", ("dense-sample", "chunked-sample"))])
def test_the_floor_times_a_subset_of_every_variants_work(workload, names):
    """The floor is below a variant's time because its matmuls are a strict subset of that
    variant's work: counted, they are dense's FLOPs, no more (dense adds the log-softmax,
    its backward and fresh N × vocab allocations), and a chunked variant counts as many or
    more. (Comparing the two measured times would fail by chance on a busy machine.)"""
    settings = Settings(warmup=1, repeats=2)
    config = cpu_config(names[0], workload=workload, batch=3, context=50, vocab=1000, d_model=24)
    counter = FlopCounterMode(display=False)
    with counter:
        floor_ms = limits._time_matmuls(config, settings)
    assert floor_ms > 0
    per_step = counter.get_total_flops() / (settings.warmup + settings.repeats)
    assert per_step == count_flops(config) == PER_MAC[names[0]] * config.tokens * 1000 * 24
    assert count_flops(replace(config, variant=names[1], ce_chunk=16)) >= per_step


def test_old_csvs_load_and_show_with_the_limits_empty():
    runner = CliRunner()
    shown = runner.invoke(app, ["show", str(BASELINE), "--wide"])
    assert shown.exit_code == 0, shown.output
    assert "vs bound" in shown.stdout and "vs floor" in shown.stdout
    records = json.loads(runner.invoke(app, ["show", str(BASELINE), "--format", "json"]).stdout)
    for r in records:
        assert r["flops"] is None and r["matmul_floor_ms"] is None and r["time_vs_floor"] is None
        assert r["mem_vs_lower_bound"] == pytest.approx(r["peak_delta_bytes"] / r["lower_bound_bytes"])


@pytest.mark.slow
@pytest.mark.compile
def test_a_compiled_row_carries_its_eager_twins_flops():
    config = cpu_config("dense-compiled", batch=3, context=50, vocab=1000, d_model=16)
    row = run(config, FAST)
    assert row.status == "ok" and row.flops == 6 * 150 * 1000 * 16
    assert row.tflops_per_s == pytest.approx(row.flops / row.time_ms_median / 1e9)
    assert row.matmul_floor_ms == limits.matmul_floor_ms(cpu_config("dense", batch=3, context=50, vocab=1000,
                                                                    d_model=16), FAST)
