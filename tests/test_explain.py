"""`cebench explain`: the breakdown at the peak against the peak sweep and predict report,
the kinds of tensors, the JSON, the figure, and usage errors."""
import csv
import json
import subprocess
import sys

import matplotlib.pyplot as plt
import pytest
from matplotlib import image
from typer.testing import CliRunner

from cebench.analyze.explain import GRADIENT, SAVED, TEMPORARY, explain
from cebench.cli import app
from cebench.core.config import Config
from cebench.core.units import format_bytes
from cebench.engine.points import predict
from cebench.measure.timeline import RECOMPUTE
from cebench.render.explain_plot import figure
from cebench.run.runner import Settings, run
from conftest import cpu_config

# An odd CPU shape: N = 111 rows, not a multiple of ce_chunk, and N > 2 × ce_chunk.
B, T, V, D, CHUNK = 3, 37, 1009, 24, 32
N = B * T
SHAPE = ["--batch", str(B), "--context", str(T), "--vocab", str(V), "--d-model", str(D), "--ce-chunk", str(CHUNK)]


def config(variant: str, ce_chunk: int | None = None) -> Config:
    return cpu_config(variant, batch=B, context=T, vocab=V, d_model=D, ce_chunk=ce_chunk)


def entries(e) -> list:
    return [x for g in e.groups for x in g.entries]


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> dict[str, int]:
    """peak_delta_bytes of dense and chunked at SHAPE, measured by a real `cebench sweep`."""
    out = tmp_path_factory.mktemp("sweep") / "r.csv"
    result = CliRunner().invoke(app, ["sweep", "--device", "cpu", *SHAPE, "--variant", "dense,chunked",
                                      "--repeats", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    with out.open() as f:
        return {r["variant"]: int(r["peak_delta_bytes"]) for r in csv.DictReader(f)}


def test_dense_breakdown_is_three_fp32_logits_and_sums_to_the_swept_peak(swept):
    e = explain(config("dense"))
    assert e.peak_delta_bytes == e.breakdown_bytes == swept["dense"] and e.residue_bytes == 0
    logits = [x for x in entries(e) if x.shape == (N, V)]
    assert [(x.dtype, x.count, x.nbytes) for x in logits] == [("fp32", 1, N * V * 4)] * 3
    assert {(x.kind, x.op, x.phase) for x in logits} == {
        (SAVED, "_log_softmax", "forward"), (TEMPORARY, "nll_loss_backward", "backward"),
        (TEMPORARY, "_log_softmax_backward_data", "backward")}
    assert e.breakdown_bytes - 3 * N * V * 4 == 8  # the loss and the seed gradient
    assert e.peak_block.node == "LogSoftmaxBackward0"


def test_chunked_breakdown_shows_chunk_buffers_and_gradients_and_sums_to_the_swept_peak(swept):
    e = explain(config("chunked", CHUNK))
    assert e.peak_delta_bytes == e.breakdown_bytes == swept["chunked"]
    (chunks,) = [g for g in e.groups if g.shape == (CHUNK, V)]
    assert (chunks.dtype, chunks.count, chunks.nbytes) == ("fp32", 3, 3 * CHUNK * V * 4)
    assert (SAVED, RECOMPUTE) in {(x.kind, x.phase) for x in chunks.entries}  # the log-softmax, recomputed
    grads = {x.shape: x for x in entries(e) if x.kind == GRADIENT}
    assert grads[(N, D)].nbytes == N * D * 4 and grads[(N, D)].op == "slice_backward"  # h's: a full N × d_model
    assert grads[(V, D)].nbytes == V * D * 4
    chunk_count = -(-N // CHUNK)
    states = [x for x in entries(e) if x.op == "get_rng_state"]
    assert states and all(x.kind == SAVED and x.nbytes == 5056 * x.count for x in states)
    assert sum(x.count for x in states) < chunk_count  # one chunk's state is already spent


def test_meta_tracker_breaks_the_peak_down_as_the_allocator_does():
    point = config("chunked", CHUNK)
    measured, traced = explain(point), explain(point, meta=True)
    assert traced.method == "predicted" and traced.peak_delta_bytes == measured.peak_delta_bytes
    assert [(x.shape, x.kind, x.op, x.phase, x.node, x.count, x.nbytes) for x in entries(traced)] == \
           [(x.shape, x.kind, x.op, x.phase, x.node, x.count, x.nbytes) for x in entries(measured)]


@pytest.mark.parametrize("variant", ["torch-lce", "chunked"])
def test_a_custom_ops_kernel_leaves_the_recording_on(variant):
    """torch's `F.linear_cross_entropy` (torch 2.13) runs a custom op whose Python kernel enters
    the tracker again: leaving that kernel must not end the step's recording, or everything
    after it (the backward's gradients: the peak) is missing from the breakdown. The traced
    breakdown sums to the measured peak."""
    if variant == "torch-lce" and not hasattr(__import__("torch").nn.functional, "linear_cross_entropy"):
        pytest.skip("torch-lce needs torch 2.13 or newer")
    point = cpu_config(variant, batch=4, context=64, vocab=5000, d_model=64, ce_chunk=64)
    measured, traced = explain(point), explain(point, meta=True)
    assert traced.peak_delta_bytes == traced.breakdown_bytes == measured.peak_delta_bytes == \
        predict(point).peak_delta_bytes


def explain_json(*args: str) -> dict:
    result = CliRunner().invoke(app, ["explain", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_meta_path_at_the_1b_setting_equals_predict(tmp_path):
    doc = explain_json("--target", "cuda", "--meta", "--variant", "dense,chunked", "--ce-chunk", "2048,8192",
                       "--out", str(tmp_path / "f.png"))
    assert (tmp_path / "f.png").is_file() and doc["figure"] == str(tmp_path / "f.png")
    assert [(x["variant"], x["ce_chunk"]) for x in doc["explanations"]] == [
        ("dense", None), ("chunked", 2048), ("chunked", 8192)]
    for x in doc["explanations"]:
        assert (x["batch"], x["context"], x["vocab"], x["d_model"], x["dtype"]) == (32, 128, 50257, 2048, "bf16")
        point = Config(variant=x["variant"], workload="loss", device="cuda", dtype="bf16",
                       batch=32, context=128, vocab=50257, d_model=2048, ce_chunk=x["ce_chunk"])
        assert x["method"] == "predicted"
        assert x["peak_delta_bytes"] == x["breakdown_bytes"] == predict(point).peak_delta_bytes
    chunked = doc["explanations"][1]["breakdown"]
    assert sum(b["count"] for b in chunked if b["shape"] == [2048, 50257]) == 3


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_target_cuda_without_a_gpu_is_predicted_on_meta(tmp_path):
    doc = explain_json("--target", "cuda", "--variant", "dense", "--batch", "4", "--out", str(tmp_path / "f.png"))
    assert doc["explanations"][0]["method"] == "predicted"


def test_json_agrees_with_the_table(tmp_path):
    args = ["explain", "--target", "cpu", *SHAPE, "--variant", "dense", "--out", str(tmp_path / "f.png")]
    doc = explain_json(*args[1:])
    table = CliRunner().invoke(app, [*args, "--wide"], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    (x,) = doc["explanations"]
    assert set(x["timeline"]) >= {"events", "backward_start", "peak_event", "peak_phase", "forward_peak_bytes",
                                  "backward_peak_bytes", "end_bytes"}
    assert sum(b["bytes"] for b in x["breakdown"]) == x["breakdown_bytes"] == x["peak_delta_bytes"]
    assert all(b["bytes"] == b["count"] * b["bytes_each"] for b in x["breakdown"])
    rows = [line.split() for line in table.stdout.splitlines()]
    for b in x["breakdown"]:
        row = [b["kind"], b["op"], b["phase"], b["node"] or "–", str(b["count"]), *format_bytes(b["bytes"]).split(),
               f"{b['share']:.1%}"]
        assert row in rows, (row, table.stdout)
        assert f"── {b['group']}:" in table.stdout
    assert f"{x['peak_delta_bytes']:,} B" in table.stdout


def test_figure_has_one_panel_per_variant_and_chunk_on_one_y_scale(tmp_path):
    done = [explain(config("dense")), explain(config("chunked", CHUNK)), explain(config("chunked", 16))]
    fig = figure(done)
    try:
        panels = [ax for ax in fig.axes if ax.get_visible()]
        assert len(panels) == 3
        assert len({ax.get_ylim() for ax in panels}) == 1
        assert [ax.get_title().splitlines()[0] for ax in panels] == ["dense", "chunked · ce_chunk 32",
                                                                     "chunked · ce_chunk 16"]
    finally:
        plt.close(fig)
    out = tmp_path / "f.png"
    result = CliRunner().invoke(app, ["explain", "--target", "cpu", *SHAPE, "--variant", "dense,chunked",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"figure → {out}" in result.stdout
    rgb = image.imread(out)[..., :3]
    height, width = rgb.shape[:2]
    assert 800 <= width <= 3000 and 500 <= height <= 2500 and rgb.std() > 0.05


FAST_START = """
import sys
from cebench.cli import main
sys.argv = ["cebench", "explain", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print("torch imported:", "torch" in sys.modules, "exit", code)
"""


def test_help_never_imports_torch():
    proc = subprocess.run([sys.executable, "-c", FAST_START, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip().endswith("torch imported: False exit 0") and "--device" in proc.stdout, proc


@pytest.mark.parametrize("args,message", [
    (["--batch", "2,8"], "--batch: explain takes one value, not 2,8"),
    (["--d-model", "16,32"], "--d-model: explain takes one value"),
    (["--dtype", "fp32,bf16"], "--dtype: explain takes one value"),
    (["--variant", "dense,nope"], "--variant: unknown 'nope'"),
    (["--target", "tpu"], "--target: 'tpu' is not one of auto, cpu, cuda"),
])
def test_usage_errors_are_one_line_exit_2_without_torch(args, message):
    proc = subprocess.run([sys.executable, "-c", FAST_START, *args], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip().endswith("torch imported: False exit 2"), proc
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.reference_torch
@pytest.mark.slow
@pytest.mark.compile
def test_compiled_chunked_holds_every_chunk_of_logits_at_its_peak():
    point = cpu_config("chunked-compiled", batch=4, context=32, vocab=V, d_model=D, ce_chunk=CHUNK)  # 4 chunks
    e = explain(point)
    assert e.peak_delta_bytes == e.breakdown_bytes == run(point, Settings(warmup=1, repeats=1)).peak_delta_bytes
    (logits,) = [g for g in e.groups if g.shape == (CHUNK, V)]
    assert logits.count == 4 and all(x.op.startswith("compiled graph") for x in logits.entries)
    assert e.peak_block.node == "CompiledFunctionBackward"


def test_an_unexplainable_variant_is_named_and_skipped(tmp_path):
    result = CliRunner().invoke(app, ["explain", "--target", "cpu", "--meta", *SHAPE, "--variant",
                                      "dense,cut-cross-entropy", "--out", str(tmp_path / "f.png")])
    assert result.exit_code == 0, result.output
    assert "not explained: cut-cross-entropy: needs CUDA" in result.stderr
    assert "cebench explain · dense" in result.stdout


def test_a_one_panel_figures_title_fits_its_width():
    """Its title's lines are wrapped to the figure: drawn, none runs past either edge."""
    fig = figure([explain(config("dense"))])
    try:
        fig.canvas.draw()
        box = fig._suptitle.get_window_extent()
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width
        assert len(fig._suptitle.get_text().splitlines()) > 3  # three lines, the longer ones wrapped
    finally:
        plt.close(fig)
