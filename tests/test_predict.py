"""The storage tracker, `predict` against measurement, and the `fit` search."""
import gc
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

from cebench import api
from cebench.cli import app
from cebench.core import devices
from cebench.engine.points import fit, predict
from cebench.engine.trace import predict_peak
from cebench.engine.tracker import StorageTracker
from cebench.run.runner import Settings, run
from cebench.store.schema import PREDICTED
from conftest import cpu_config

ONE_STEP = Settings(warmup=1, repeats=1)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_tracker_releases_temporaries_so_the_peak_is_not_the_sum(device):
    with StorageTracker() as tracker:
        for _ in range(10):
            torch.empty(1000, device=device)  # 4000 B, freed before the next
        keep = torch.empty(500, device=device)
        torch.empty(250, device=device)
    assert tracker.peak == 4000
    assert tracker.current == 2000
    del keep
    gc.collect()
    assert tracker.current == 0


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_tracker_never_counts_inputs_or_their_views(device):
    weight = torch.zeros(300, 20, device=device)
    h = torch.zeros(50, 20, device=device)
    with StorageTracker(ignore=[weight, h]) as tracker:
        views = [weight.t(), weight[10:], h.view(-1), h.unsqueeze(0)]
        weight.add_(1.0)
        out = h @ weight.t()  # (50, 300) fp32: the only new storage
    assert tracker.peak == tracker.current == out.untyped_storage().nbytes() == 50 * 300 * 4
    assert all(v.untyped_storage()._cdata in (weight.untyped_storage()._cdata, h.untyped_storage()._cdata)
               for v in views)


def test_tracker_follows_resizes_and_rounds_to_cuda_blocks():
    with StorageTracker() as exact:
        grow = torch.empty(0)
        grow.resize_(1000)
    assert exact.peak == exact.current == 4000
    with StorageTracker(granularity=512) as rounded:
        tiny = torch.empty(1)  # 4 B → one 512 B block
        small = torch.empty(129)  # 516 B → two blocks
    assert rounded.peak == rounded.current == 512 + 1024
    del tiny, small, grow
    gc.collect()
    assert rounded.current == exact.current == 0


class _Kept(torch.autograd.Function):
    """x * 2, whose backward keeps the gradient it returns (so the engine is not its only holder)."""

    kept: list[torch.Tensor] = []

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        _Kept.kept.append(grad * 2)
        return _Kept.kept[-1]


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_gradients_summed_for_one_input_are_summed_in_place_as_the_engine_does(device):
    """Two uses of one tensor, the later one's backward first: the engine adds the second
    gradient into the first in place when it alone holds the first, else into a new tensor."""
    leaf = torch.zeros(1000, device=device, requires_grad=True)  # gradients of 4,000 B

    def peak(second) -> int:
        with StorageTracker(ignore=[leaf]) as tracker:
            ((leaf * 3).sum() + second(leaf).sum()).backward()  # the forward holds one 4,000 B product
        leaf.grad = None
        return tracker.peak

    assert peak(lambda x: x * 2) == 2 * 4000 + 2 * 4  # the two gradients (and the two sums' scalars)
    assert peak(_Kept.apply) == 3 * 4000 + 2 * 4 and _Kept.kept  # and their sum


SHAPES = [  # batch, context, vocab, d_model, ce_chunk: odd sizes, N not divisible, ce_chunk > N
    (3, 37, 1013, 24, 64),
    (5, 50, 2000, 48, 32),
    (2, 16, 999, 16, 100),
]
VARIANTS = [("dense", "loss"), ("chunked", "loss"), ("dense-sample", "sample"), ("chunked-sample", "sample")]


@pytest.mark.parametrize("variant,workload", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_predict_for_cpu_agrees_with_the_measured_peak(variant, workload, shape):
    batch, context, vocab, d_model, chunk = shape
    config = cpu_config(variant, workload=workload, batch=batch, context=context, vocab=vocab, d_model=d_model,
                        ce_chunk=chunk if "chunked" in variant else None)
    measured = run(config, ONE_STEP)
    predicted = predict(config)
    assert measured.mem_method == devices.get("cpu").mem_method and predicted.mem_method == PREDICTED
    assert predicted.base_bytes == measured.base_bytes
    diff = abs(predicted.peak_delta_bytes - measured.peak_delta_bytes)
    assert diff <= max(0.01 * measured.peak_delta_bytes, 64 * 1024), (predicted.peak_delta_bytes,
                                                                      measured.peak_delta_bytes)
    if variant in ("dense", "chunked"):  # the loss: to the byte
        assert predicted.peak_delta_bytes == measured.peak_delta_bytes


def test_predict_leaves_time_empty():
    row = predict(cpu_config("dense"))
    assert row.status == "ok" and row.time_ms_median is None and row.repeats is None


@pytest.mark.parametrize("variant,chunk", [("dense", None), ("chunked", 96)])
def test_fit_finds_the_largest_batch_a_scan_would(variant, chunk):
    config = cpu_config(variant, context=32, vocab=3000, d_model=32, ce_chunk=chunk)
    peaks = {b: predict_peak(replace(config, batch=b)).peak_bytes for b in range(1, 41)}
    budget = (peaks[17] + peaks[18]) // 2
    result = fit(config, budget, max_batch=40)
    assert result.batch == 17 and result.peak_bytes == peaks[17] and not result.at_limit
    assert result.predictions < 20  # a search, not a scan of all 40
    assert fit(config, peaks[40] + 1, max_batch=40).at_limit
    assert fit(config, peaks[1] - 1, max_batch=40).batch == 0


def test_predict_and_fit_commands(tmp_path):
    runner = CliRunner()
    out = tmp_path / "p.csv"
    res = runner.invoke(app, ["predict", "--target", "cpu", "--batch", "2,4", "--context", "32", "--vocab", "1000",
                              "--d-model", "16", "--ce-chunk", "32", "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text().splitlines()
    # 2 batches × (dense, chunked, dense-compiled, chunked-compiled, torch-lce, cce); on a CPU target
    # torch-lce-auto and liger-kernel (Triton's interpreter) are on request only
    assert len(text) == 1 + 2 * 6 and all(",predicted," in line for line in text[1:] if ",ok," in line)
    # the CUDA-only peer cannot be predicted here (compiled variants are, as inductor's code runs; torch-lce
    # needs torch 2.13)
    unsupported = {line.split(",")[0] for line in text[1:] if ",unsupported," in line}
    expected = {"cut-cross-entropy"} | ({"torch-lce"} if not hasattr(torch.nn.functional, "linear_cross_entropy")
                                        else set())
    assert unsupported == expected and sum(",unsupported," in line for line in text) == 2 * len(expected)
    for command in (["show", str(out)], ["check", str(out), "--baseline", str(out), "--time-tol", "5%"]):
        res = runner.invoke(app, command)
        assert res.exit_code == 0, (command, res.output)
    res = runner.invoke(app, ["plot", str(out), "--out-dir", str(tmp_path / "fig")])
    assert res.exit_code == 0 and res.output.split() == [str(tmp_path / "fig" / "memory-vs-batch.png")]
    res = runner.invoke(app, ["fit", "--budget", "600KiB", "--target", "cpu", "--context", "32", "--vocab", "1000",
                              "--d-model", "16", "--ce-chunk", "32,64", "--max-batch", "64", "--measure",
                              "--variant", "dense,chunked"])
    assert res.exit_code == 0, res.output
    assert "max batch" in res.output and "measured peak" in res.output and "chunked" in res.output
    for args, message in ((["--budget", "lots"], "is not a byte size"), (["--budget", "1GiB", "--target", "tpu"],
                                                                         "--target: 'tpu'")):
        res = runner.invoke(app, ["fit", *args])
        assert res.exit_code == 2 and message in res.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_fit_measure_on_cuda_needs_a_gpu():
    res = CliRunner().invoke(app, ["fit", "--budget", "80GiB", "--measure"])
    assert res.exit_code == 2 and "no CUDA GPU is visible" in res.output


def test_the_chunked_loss_sums_each_chunks_h_gradient_in_place():
    """Each chunk's slice backward makes an N × d_model gradient the engine adds into h's in
    place: two such buffers at the peak (1.96× the bound here), not three, measured and predicted."""
    config = cpu_config("chunked", batch=16, context=128, vocab=256, d_model=512, ce_chunk=128)
    measured, predicted = run(config, ONE_STEP), predict(config)
    assert predicted.peak_delta_bytes == measured.peak_delta_bytes
    h_grad = 16 * 128 * 512 * 4
    assert 2 * h_grad < measured.peak_delta_bytes < 3 * h_grad


def test_predict_reports_each_point_before_it_is_predicted():
    seen = []
    rows = api.predict(target="cpu", variant="dense,chunked", batch="1,2", context=8, vocab=256, d_model=32, ce_chunk=4,
                       progress=lambda done, total, point: seen.append((done, total, point.variant, point.batch)))
    assert [s[:2] for s in seen] == [(i, len(rows)) for i in range(len(rows))] and len(rows) == 4
    assert [s[2:] for s in seen] == [(r.variant, r.batch) for r in rows]
