"""The time model: each traced op's FLOPs and bytes (checked by hand), the roofline summed over
them, predicted rows' time columns, their extrapolation at any size, `fit`'s fastest setting,
and the model judged on the published rows it never saw (`results/time-judged.csv`)."""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from cebench import api
from cebench.core import targets, timemodel
from cebench.core.timemodel import ELEMENTWISE, FP8, FP32, FUSED, HALF, MATMUL, REDUCTION, Efficiency, OpCost
from cebench.engine import series, trace
from cebench.engine.costs import Costs, tensor_bytes
from cebench.run.grid import GridOptions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "results"))
import judge_time  # noqa: E402 - results/ is no package: on the path first

H100 = targets.BY_NAME["h100-80gb"]


def point(target: str = "h100-80gb", **grid: object):
    (config,) = GridOptions(**grid).grid(target).expand()
    return config


def traced(config) -> Costs:
    costs = Costs()
    trace.trace(config, costs=costs)
    return costs


def test_each_op_reads_its_inputs_and_writes_its_outputs_once():
    n, v, d = 96, 1000, 64
    costs = traced(point(variant="dense", batch=n, context=1, vocab=v, d_model=d, dtype="bf16"))
    by_name = Counter()
    for op, count in costs.ops.items():
        by_name[op.op] += count
    logits = [op for op in costs.sequence if op.op == "mm" and op.nbytes == (n * d + v * d + n * v) * 2]
    assert logits and logits[0].flops == 2 * n * v * d and logits[0].kind == MATMUL and logits[0].precision == HALF
    # the logits' gradient times the weight (∇h) and times h (∇weight): 2·N·V·d FLOPs each
    assert sorted(op.flops for op in costs.sequence if op.kind == MATMUL) == [2 * n * v * d] * 3
    upcast, downcast = [op for op in costs.sequence if op.op == "_to_copy"]  # the logits, and their gradient
    assert upcast.kind == ELEMENTWISE and upcast.nbytes == downcast.nbytes == n * v * (2 + 4)
    # each named by its input's dtype: bf16 read, then fp32
    assert (upcast.precision, downcast.precision) == (HALF, FP32)
    (softmax,) = [op for op in costs.sequence if op.op == "_log_softmax"]
    assert (softmax.kind, softmax.nbytes, softmax.precision) == (REDUCTION, 2 * n * v * 4, FP32)
    # the NLL loss gathers one log-probability a row: its (N, V) input is not read, the int64 targets are
    (nll,) = [op for op in costs.sequence if op.op == "nll_loss_forward"]
    assert nll.nbytes == n * 8 + 4 + 4  # targets; the loss and its total weight written
    assert by_name["view"] == by_name["t"] == 0  # views launch nothing


def test_an_fp8_matmul_runs_at_the_fp8_rate():
    costs = Costs()
    a = torch.empty(64, 32, device="meta", dtype=torch.float8_e4m3fn)
    b = torch.empty(16, 32, device="meta", dtype=torch.float8_e4m3fn).t()
    scale = torch.ones((), device="meta")
    args, kwargs = (a, b, scale, scale), {"out_dtype": torch.bfloat16}  # as the dispatcher passes them
    costs.op(torch.ops.aten._scaled_mm.default, args, kwargs, torch._scaled_mm(*args, **kwargs))
    (op,) = costs.sequence
    assert (op.kind, op.precision, op.flops, op.nbytes) == (MATMUL, FP8, 2 * 64 * 32 * 16, 64 * 32 + 16 * 32 + 4 + 4
                                                            + 64 * 16 * 2)


def test_a_broadcast_input_counts_its_distinct_elements():
    t = torch.empty(5, device="meta").expand(7, 5)
    assert tensor_bytes(t) == 5 * 4 and tensor_bytes(torch.empty(3, 4, device="meta", dtype=torch.bfloat16)) == 24


def test_a_skipped_triton_launch_reads_its_arguments_and_writes_its_largest():
    costs = Costs()
    logits, targets_ = torch.empty(8, 1000, device="meta"), torch.empty(8, dtype=torch.long, device="meta")
    costs.launch([logits, targets_], "liger_cross_entropy_kernel")
    (op,) = costs.sequence
    assert (op.kind, op.nbytes, op.op) == (FUSED, 2 * 8 * 1000 * 4 + 8 * 8, "liger_cross_entropy_kernel")


def test_the_roofline_takes_the_slower_of_compute_and_memory_plus_a_launch():
    c = Efficiency(matmul=0.5, matmul_memory=0.25, elementwise=0.5, reduction=0.25, fused=1.0, launch_us=10, rows="")
    compute_bound = OpCost(MATMUL, HALF, flops=10**12, nbytes=10**6)
    memory_bound = OpCost(MATMUL, HALF, flops=10**6, nbytes=10**10)
    assert c.seconds(compute_bound, H100) == pytest.approx(1e-5 + 1e12 / (H100.bf16_flops * 0.5))
    assert c.seconds(memory_bound, H100) == pytest.approx(1e-5 + 1e10 / (H100.hbm_bytes_per_s * 0.25))
    assert c.seconds(OpCost(MATMUL, FP32, 10**12, 0), H100) == pytest.approx(1e-5 + 1e12 / (H100.fp32_flops * 0.5))
    assert c.seconds(OpCost(REDUCTION, FP32, 0, 10**9), H100) == pytest.approx(1e-5 + 1e9 / (H100.hbm_bytes_per_s
                                                                                               * 0.25))
    fp8 = OpCost(MATMUL, FP8, 10**12, 0)  # torch._scaled_mm: the card's FP8 rate; Ampere has none, BF16's used
    assert c.seconds(fp8, H100) == pytest.approx(1e-5 + 1e12 / (1979e12 * 0.5))
    assert c.seconds(fp8, targets.BY_NAME["a100-80gb"]) == pytest.approx(1e-5 + 1e12 / (312e12 * 0.5))
    assert timemodel.step_ms({compute_bound: 3}, H100, c) == pytest.approx(3e3 * c.seconds(compute_bound, H100))


def test_a_predicted_row_carries_the_time_of_its_traced_ops_and_its_tokens_per_second():
    grid = {"variant": "dense", "batch": 8, "context": 128, "vocab": 5000, "d_model": 256, "dtype": "bf16",
            "ignore_frac": 0.25}
    (row,) = api.predict(target="h100-80gb", **grid)
    expected = timemodel.step_ms(traced(point(**grid)).ops, H100)
    assert row.predicted_time_ms == pytest.approx(expected, rel=1e-12)
    assert row.predicted_tokens_per_s == pytest.approx(8 * 128 * 0.75 / expected * 1e3)
    assert "time under 1 ms" in row.note  # a step this short is mostly launches: the row says so
    (generic,) = api.predict(target="cuda", **grid)  # no card's figures: no time
    assert generic.predicted_time_ms is None and generic.predicted_tokens_per_s is None


@pytest.mark.parametrize(("grid", "why"), [
    pytest.param({"variant": "cut-cross-entropy"}, "matmuls run inside its Triton kernels",
                 marks=pytest.mark.needs("cut_cross_entropy")),
    ({"variant": "dense", "target": "b200"}, "blackwell uncalibrated, hopper's efficiencies used"),
])
def test_a_row_says_what_limits_or_prevents_its_time(grid, why):
    target = grid.pop("target", "h100-80gb")
    (row,) = api.predict(target=target, batch=4, context=512, vocab=32000, d_model=1024, dtype="bf16", **grid)
    assert why in row.note
    assert (row.predicted_time_ms is None) == ("inside" in why)


@pytest.mark.parametrize("grid", [
    {"variant": "chunked", "ce_chunk": 10, "context": 6, "vocab": 50, "d_model": 8},
    pytest.param({"variant": "torch-lce", "ce_chunk": 10, "context": 6, "vocab": 50, "d_model": 8, "grads": "keep"},
                 marks=pytest.mark.torch_lce),
    {"variant": "chunked", "ce_chunk": 12, "model": "llama-3.2-1b", "context": 6},
])
def test_time_at_any_size_is_extrapolated_exactly(grid):
    """A chunked loss's ops repeat each chunk, a model's each block: the time at a size far past
    the traced samples is what a whole trace counts, op for op."""
    config = point(batch=500, dtype="bf16", **grid)
    assert series.series(config) is not None
    extrapolated = series.predicted(config)[0].time_ms
    assert extrapolated is not None and extrapolated == pytest.approx(trace.predict_peak(config).time_ms, rel=1e-12)


def test_fit_names_the_setting_that_trains_the_most_tokens_per_second():
    fitted = api.fit("8GiB", target="h100-80gb", variant="dense,chunked,torch-lce", ce_chunk="512,4096", context=512,
                     vocab=32000, d_model=1024, dtype="bf16", max_batch=256)
    speeds = [f.tokens_per_s for f in fitted.fits]
    assert all(s is not None and s > 0 for s in speeds)
    assert fitted.fastest == speeds.index(max(speeds))  # type: ignore[type-var]
    best = fitted.fits[fitted.fastest]
    (row,) = api.predict(target="h100-80gb", variant=best.config.variant, ce_chunk=best.config.ce_chunk,
                         batch=best.batch, context=512, vocab=32000, d_model=1024, dtype="bf16")
    assert row.predicted_time_ms == pytest.approx(best.time_ms, rel=1e-12)


judged = judge_time.committed


def test_the_published_rows_it_never_saw_are_predicted_within_the_bar():
    """Over the later published rows of at least 1 ms: the median and 90th percentile of the
    error, and the faster of two providers named rightly; each is recomputed from the rows."""
    s = judge_time.summary(judged())
    assert s["rows"] >= 800
    assert s["median"] <= 0.15 and s["p90"] <= 0.35
    assert s["pairs"] >= 300 and s["ranked"] >= 0.9
    assert s["within_2x"] == 1.0 and s["max_factor"] <= 2
    assert s["fixed"] <= 0.01 * s["rows"]  # the rows set apart stay a handful, each shown on the figure


def test_a_logits_row_whose_time_does_not_grow_with_its_logits_is_set_apart():
    """A cross-entropy row whose next run row has twice the logits in under 15 % more time was
    timed by a fixed cost, not the GPU; a fused-linear row may be flat (its weight's gradient
    dominates) and stays judged."""
    def row(kernel, n, v, ms, provider="liger"):
        return {"gpu": "g", "source": "s", "timestamp": "t", "provider": provider, "dtype": "fp32",
                "kernel": kernel, "N": str(n), "V": str(v), "D": "0", "ms_p50": str(ms), "error": 0.0,
                "predicted_ms": ms}
    flat = [row("cross_entropy", 16384, v, ms) for v, ms in ((4096, 1.8), (8192, 1.85), (16384, 1.9), (32768, 2.6))]
    growing = [row("cross_entropy", 16384, v, ms, "torch") for v, ms in ((4096, 1.3), (8192, 2.0), (16384, 3.2))]
    fused = [row("fused_linear_cross_entropy", n, 128256, ms) for n, ms in ((4096, 60.0), (8192, 61.0))]
    found = judge_time.fixed_cost(flat + growing + fused)
    assert [(r["V"], r["provider"]) for r in found] == [("4096", "liger"), ("8192", "liger")]
    assert judge_time.summary(flat + growing + fused)["fixed"] == 2


@pytest.mark.needs("triton")
def test_the_judged_rows_are_what_this_code_predicts_now():
    """A sample of the committed judgement, predicted again with this environment's code (the
    plain-PyTorch rows: no peer release needed), gives the committed figures."""
    rows = [r for r in judged() if not r["traced_with"] and r["predicted_ms"] is not None]
    points = list({(r["gpu"], r["harness"], r["kernel"], r["N"], r["V"], r["D"]): r for r in rows}.values())
    sample = {i: points[i] for i in range(0, len(points), max(1, len(points) // 12))}
    harness = judge_time.harness_point_of()
    assert len(sample) >= 10
    for r in sample.values():
        grid = harness({**r, "mode": "full", "provider": r["provider"], "harness": r["harness"]})
        assert isinstance(grid, dict), grid
        (row,) = api.predict(**grid)
        assert row.predicted_time_ms == pytest.approx(r["predicted_ms"], rel=1e-5), r


def test_on_this_cpu_the_probe_predicts_steps_measured_beside_them(capsys, tmp_path):
    """`--target cpu` predicts with this machine's own measured rates (`cebench.measure.probe`):
    a sweep's medians and the predictions of the same points, side by side in the report.
    How close they are is a timing claim (results/README.md), not held here: a shared CI machine
    measured a step 5x slower than its own probe once. What is held: every point is predicted,
    four times the tokens cost more, and for dense at most four times as much (its weight's
    bytes and its launches do not grow with the batch; chunked's launches do)."""
    grid = {"variant": "dense,chunked", "batch": "4,16", "context": 64, "vocab": 8000, "d_model": 64,
            "ce_chunk": 128}
    predicted = api.predict(target="cpu", **grid)
    measured = api.sweep(device="cpu", repeats=3, out=tmp_path / "cpu.csv", **grid)
    with capsys.disabled():
        print("\nvariant  batch  measured ms  predicted ms  ratio")
        for p, m in zip(predicted, measured, strict=True):
            assert (p.variant, p.batch) == (m.variant, m.batch) and p.predicted_time_ms is not None
            print(f"{p.variant:8} {p.batch:5} {m.time_ms_median:12.2f} {p.predicted_time_ms:13.2f} "
                  f"{p.predicted_time_ms / m.time_ms_median:6.2f}")
    by_point = {(p.variant, p.batch): p.predicted_time_ms for p in predicted}
    assert 1 < by_point["dense", 16] / by_point["dense", 4] <= 4 * (1 + 1e-9), by_point
    assert by_point["chunked", 16] > by_point["chunked", 4], by_point


@pytest.mark.fsdp_predicted
def test_fsdp_collectives_cross_the_link_beside_the_computation(tmp_path):
    """Each all-gather sends the gathered tensor less this rank's shard, each reduce-scatter its
    input less its output, at the card's link rate; the step takes the longer of that and
    the rest (FSDP overlaps them)."""
    model = tmp_path / "tiny.json"
    model.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                                 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                 "vocab_size": 512, "rms_norm_eps": 1e-6, "tie_word_embeddings": True}))
    grid = {"variant": "dense", "model": str(model), "batch": 2, "context": 32, "fsdp": 4, "dtype": "bf16"}
    config = point(**grid)
    costs = traced(config)
    collectives = [op for op in costs.sequence if op.kind == timemodel.COLLECTIVE]
    assert {"_allgather_base_", "_reduce_scatter_base_"} <= {op.op for op in collectives}
    root = (512 * 64 + 64) * 2  # the root's parameters (the tied embedding, the final norm), bf16
    block = (64 * 64 * 2 + 32 * 64 * 2 + 128 * 64 * 3 + 64 * 2) * 2  # q, o; k, v; gate, up, down; two norms
    gathered = {op.nbytes for op in collectives if op.op == "_allgather_base_"}
    assert gathered == {root * 3 // 4, block * 3 // 4}  # each rank sends the 3/4 of them it does not hold
    constants = timemodel.FAMILIES["hopper"]
    talk = sum(constants.seconds(op, H100) for op in collectives)
    work = sum(constants.seconds(op, H100) for op in costs.sequence if op.kind != timemodel.COLLECTIVE)
    assert trace.step_time(config, costs) == pytest.approx(max(work, talk) * 1e3, rel=1e-12)
    (row,) = api.predict(target="h100-80gb", **grid)
    assert row.predicted_time_ms == pytest.approx(trace.step_time(config, costs), rel=1e-9)
    assert "FSDP's collectives at 450 GB/s a direction, h100-80gb's link by its datasheet" in row.note


def test_the_logits_workload_measures_and_predicts_the_loss_of_given_logits(tmp_path):
    """`--workload logits`: dense is `F.cross_entropy` of an (N, vocab) input that requires grad
    (d_model does not apply: 0), measured on this CPU as predicted to the byte; its three
    fp32 N × vocab buffers (the log-softmax, and the backward's two) beside the input."""
    grid = {"workload": "logits", "variant": "dense", "batch": "16,40", "context": 3, "vocab": 997}
    measured = api.sweep(device="cpu", repeats=1, out=tmp_path / "logits.csv", **grid)
    predicted = api.predict(target="cpu", **grid)
    for m, p in zip(measured, predicted, strict=True):
        n = m.tokens
        assert (m.workload, m.d_model, m.status) == ("logits", 0, "ok")
        assert m.peak_delta_bytes == p.peak_delta_bytes == 3 * n * 997 * 4 + 8  # and the loss and its seed gradient
        assert m.base_bytes == p.base_bytes == n * 997 * 4 + n * 8  # the logits and the targets
        assert m.lower_bound_bytes == n * 997 * 4 + 4
    with pytest.raises(Exception, match="not a logits variant"):
        api.predict(target="cpu", workload="logits", variant="chunked", batch=1, context=8, vocab=100)
