"""A model's step sharded with FSDP2 (`--fsdp N`), predicted in one process through FSDP2's
own code: per rank, to the byte against two gloo ranks measured on this CPU, extrapolated
along the blocks as traced whole, taken apart by explain, fitted per rank."""
from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
from typer.testing import CliRunner

from cebench import api
from cebench.analyze.anatomy import anatomy
from cebench.cli import app
from cebench.core.errors import UsageError
from cebench.engine import fake_world, series
from cebench.engine.trace import predict_peak
from cebench.models import fsdp
from cebench.models import training as training_mod
from cebench.run.grid import GridOptions
from conftest import model_file

pytestmark = [pytest.mark.fsdp_predicted]

# 2 blocks of hidden 64 (4 heads, 2 key/value heads), an untied head of vocab 512: every parameter divides evenly
# over 2 ranks.
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False}
# Measured on this CPU by two gloo ranks under torchrun (FSDP2 on each block and the root, AdamW), batch 2 × 32,
# each rank's profiler events; the same on both ranks (tests/test_fsdp_measured.py measures them again).
MEASURED = {("dense", "none"): (838_612, 1_418_248), ("dense", "blocks"): (838_612, 1_167_560),
            ("chunked", "none"): (838_612, 1_447_820), ("torch-lce", "none"): (838_612, 1_418_248)}


def config(path: Path, target: str = "cpu", **grid: object):
    grid = {"batch": "2", "context": "32", "ce_chunk": "16", **grid}
    return GridOptions(model=str(path), **{k: str(v) for k, v in grid.items()}).grid(target).expand()[0]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return model_file(tmp_path, TINY)


@pytest.mark.parametrize(("variant", "checkpointing"), list(MEASURED))
def test_two_ranks_are_predicted_as_gloo_measured_them(tiny, variant, checkpointing):
    reading = predict_peak(config(tiny, variant=variant, fsdp=2, activation_checkpointing=checkpointing))
    assert (reading.base_bytes, reading.peak_delta_bytes) == MEASURED[variant, checkpointing]


def test_the_world_leaves_the_process_as_it_found_it(tiny):
    hook = sys.excepthook
    predict_peak(config(tiny, variant="dense", fsdp=2))
    assert not dist.is_initialized() and gc.isenabled() and sys.excepthook is hook  # no '[rank0]:' on tracebacks


def test_a_commands_predictions_share_one_world_and_its_models_to_the_same_bytes(tiny, monkeypatch):
    """Inside a session (every command's), worlds of one size are opened once and a model is built once for every
    shape and loss; each step leaves it as the first left it, so each answer is the one a world of its own gives."""
    points = [config(tiny, variant=v, fsdp=2, batch=b) for v, b in (("dense", 2), ("chunked", 2), ("dense", 3))]
    alone = [predict_peak(p) for p in points]
    built = []
    make_model = training_mod.make_model
    monkeypatch.setattr(training_mod, "make_model", lambda *a, **k: built.append(1) or make_model(*a, **k))
    with fake_world.session():
        assert [predict_peak(p) for p in points] == alone
        assert dist.is_initialized() and gc.isenabled()  # kept open between traces, collecting as usual
    assert len(built) == 1 and not dist.is_initialized()


def test_a_step_that_fails_leaves_no_model_behind_in_the_session(tiny, monkeypatch):
    point = config(tiny, variant="dense", fsdp=2)
    with fake_world.session():
        expected = predict_peak(point)
        monkeypatch.setattr(fsdp.Root, "forward", lambda self, ids, loss: self.body(ids))  # not a loss: backward fails
        with pytest.raises(RuntimeError, match="scalar"):
            predict_peak(point)
        monkeypatch.undo()
        assert predict_peak(point) == expected  # built and settled again, not taken half stepped


def test_a_rank_holds_a_share_of_the_state_and_the_gather_of_whole_blocks(tiny):
    """Parameters, gradients and AdamW's moments divide by the ranks (AdamW's step counts, 4 B each, do not); what
    each rank gathers does not."""
    one, two, four = (predict_peak(config(tiny, variant="dense", fsdp=n)) for n in (1, 2, 4))
    steps = 4 * 21  # a step count per parameter: 2 blocks of 9, an embedding, a norm, a head
    assert one.state_bytes - steps == 2 * (two.state_bytes - steps) == 4 * (four.state_bytes - steps)
    assert one.peak_bytes > two.peak_bytes > four.peak_bytes
    assert two.peak_delta_bytes - one.peak_delta_bytes > 0  # the gathered blocks and their reduce-scatter buffers


def test_extrapolated_along_the_blocks_as_traced_whole(tmp_path, target="h100-80gb"):
    path = tmp_path / "eight.json"
    path.write_text(json.dumps({**TINY, "num_hidden_layers": 8}))
    point = config(path, variant="chunked", fsdp=4, activation_checkpointing="blocks", target=target)
    assert series.layers(point) == 8
    extrapolated, _ = series.predicted(point, flops=False)
    assert extrapolated == predict_peak(point)


def test_explain_splits_a_ranks_peak_into_shards_in_flight_activations_and_loss(tiny):
    sharded = anatomy(config(tiny, variant="dense", fsdp=2))
    whole = anatomy(config(tiny, variant="dense"))
    assert sum(sharded.parts.values()) == sharded.peak_bytes
    assert sharded.parts["in flight"] > 0 == whole.parts["in flight"]
    assert whole.parts["parameters"] == 2 * sharded.parts["parameters"]
    assert whole.parts["optimizer state"] - 4 * 21 == 2 * (sharded.parts["optimizer state"] - 4 * 21)  # step counts


def test_fit_answers_per_rank_for_each_world_side_by_side(tiny):
    fitted = api.fit("16MiB", model=str(tiny), context=32, variant="dense", fsdp="1,4", target="cpu",
                     max_batch=512)
    by_world = {f.config.fsdp: f.batch for f in fitted.fits}
    assert set(by_world) == {1, 4} and by_world[4] >= by_world[1] > 0
    for f in fitted.fits:  # the answer fits and one more sequence does not
        fits, more = (predict_peak(config(tiny, variant="dense", fsdp=f.config.fsdp, batch=b)).peak_bytes
                      for b in (f.batch, f.batch + 1))
        assert fits <= fitted.limit < more


@pytest.mark.parametrize(("setting", "values", "why"), [
    ("compile", "none,blocks", "compiled blocks run unsharded only (--fsdp 1)"),
    ("optimizer", "adamw,adamw-in-backward", "adamw-in-backward runs unsharded only (--fsdp 1)")])
def test_fit_says_a_setting_a_sharded_step_excludes_is_unsupported_as_predict_and_sweep_do(tiny, tmp_path, setting,
                                                                                           values, why):
    """A setting of a model's step that sharding excludes is unsupported wherever it is asked
    (`cebench.engine.support`): fit answers for the other setting and says why for it, as
    predict's and sweep's rows do, through the API and on the command line."""
    fine, excluded = values.split(",")
    grid = {"model": str(tiny), "context": 32, "variant": "dense", "fsdp": "2"}
    fitted = api.fit("16MiB", target="cpu", max_batch=512, **grid, **{setting: values})
    by_value = {str(getattr(f.config, setting)): f for f in fitted.fits}
    assert by_value[fine].unsupported is None and by_value[fine].batch > 0
    refused = by_value[excluded]
    assert refused.unsupported is not None and why in refused.unsupported
    assert (refused.batch, refused.peak_bytes, refused.predictions, refused.tokens_per_s) == (0, None, 0, None)
    (predicted,) = api.predict(target="cpu", batch=2, **grid, **{setting: excluded})
    (measured,) = api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "s.csv", batch=2, **grid,
                            **{setting: excluded})
    assert predicted.status == measured.status == "unsupported"
    assert predicted.error == measured.error == refused.unsupported
    result = CliRunner().invoke(app, ["fit", "--target", "cpu", "--budget", "16MiB", "--max-batch", "512",
                                      "--model", str(tiny), "--context", "32", "--variant", "dense", "--fsdp", "2",
                                      f"--{setting}", values])
    assert result.exit_code == 0, result.output
    assert f"{setting} {excluded}" in result.output and "unsupported [1]" in result.output
    assert f"[1] {refused.unsupported}" in " ".join(result.output.split())  # the note, wrapped at any width


def test_sharding_needs_a_model(tiny):
    with pytest.raises(UsageError, match="fsdp"):
        GridOptions(variant="dense", fsdp="2").grid("cpu")


def test_a_cpu_world_that_is_not_a_power_of_two_says_gloo_measured_more(tmp_path):
    """gloo's ranks measured above the prediction at 3, 5 and 6 ranks (results/README.md): such
    a row says so; a power of two, matched to the byte, does not."""
    model = tmp_path / "tiny.json"
    model.write_text(json.dumps({"model_type": "llama", "hidden_size": 16, "intermediate_size": 32,
                                 "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
                                 "vocab_size": 64}))
    rows = {r.fsdp: r for r in api.predict(target="cpu", model=str(model), batch=1, context=8, variant="dense",
                                           fsdp="2,3,4")}
    assert [("not a power of two" in rows[w].note) for w in (2, 3, 4)] == [False, True, False]
    (gpu,) = api.predict(target="h100-80gb", model=str(model), batch=1, context=8, variant="dense", fsdp=3)
    assert "gloo" not in gpu.note
