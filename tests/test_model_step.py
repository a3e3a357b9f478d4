"""A loss inside its model's training step (`--model`): measured on CPU and predicted on meta
to the byte, the model columns, fit --model with the loss alone beside it, and one line for
every bad model or option before anything runs."""
from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cebench import api
from cebench.cli import app
from cebench.core import devices
from cebench.core.axes import Optimizer
from cebench.core.config import Config
from cebench.engine.trace import predict_peak
from cebench.engine.tracker import OpTracker
from cebench.models import resolve_model, training
from cebench.models.attention import EFFICIENT, FLASH, kernel_for
from cebench.store.frame import load

# 2 blocks, d_model 48 (head_dim 8, as fused attention kernels need), an odd vocabulary, grouped-query attention
# (6 heads, 2 key/value heads), an untied head.
SMALL = {"model_type": "llama", "vocab_size": 211, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 6,
         "num_key_value_heads": 2, "intermediate_size": 40, "tie_word_embeddings": False}
# What AdamW's step allocates on a CPU outside the dispatcher, which a prediction cannot see: `div` by a Python
# number wraps it as a 0-dim float64 tensor (8 B) and copies it to float32 (4 B) while its result is allocated.
ADAMW_CPU_RESIDUE = 12
GRID = {"variant": "dense,chunked", "batch": 2, "context": 9, "ce_chunk": 7}


@pytest.fixture
def small(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    return str(path)


def key(row: object) -> tuple:
    return (row.variant, row.optimizer, row.activation_checkpointing)


def test_predicted_on_meta_equals_measured_on_cpu(small, tmp_path):
    """Dense and chunked, with and without activation checkpointing, with AdamW and none."""
    grid = {**GRID, "model": small, "optimizer": "adamw,none", "activation_checkpointing": "none,blocks"}
    measured = api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", **grid)
    predicted = {key(r): r for r in api.predict(target="cpu", **grid)}
    assert len(measured) == len(predicted) == 8
    for m in measured:
        p = predicted[key(m)]
        assert m.status == p.status == "ok", (m.error, p.error)
        residue = ADAMW_CPU_RESIDUE if m.optimizer == "adamw" else 0
        assert m.base_bytes == p.base_bytes and m.model_state_bytes == p.model_state_bytes, key(m)
        assert m.peak_bytes - p.peak_bytes == residue, key(m)
        assert m.body_peak_bytes - p.body_peak_bytes == residue, key(m)
        assert m.step_peak_bytes == m.peak_bytes and p.step_peak_bytes == p.peak_bytes
        assert m.n_params == p.n_params == resolve_model(small).n_params
        assert (m.vocab, m.d_model, m.model) == (211, 48, small)
    frame = load(tmp_path / "s.csv")  # the columns are in the file too
    assert set(frame["optimizer"]) == {"adamw", "none"} and frame["body_peak_bytes"].notna().all()


def test_checkpointing_lowers_the_body_and_adamw_adds_exactly_its_state(small):
    rows = {key(r): r for r in api.predict(target="cpu", **{**GRID, "variant": "dense", "model": small,
                                                            "optimizer": "adamw,sgd,none",
                                                            "activation_checkpointing": "none,blocks"})}
    # at this small shape AdamW's step is the peak, which checkpointing does not change; with more tokens the
    # activations are, and checkpointing lowers the body's peak
    assert rows["dense", "adamw", "blocks"].body_peak_bytes == rows["dense", "adamw", "none"].body_peak_bytes
    longer = {key(r): r for r in api.predict(target="cpu", **{**GRID, "variant": "dense", "model": small,
                                                              "batch": 8, "context": 64, "optimizer": "adamw,none",
                                                              "activation_checkpointing": "none,blocks"})}
    for opt in ("adamw", "none"):
        assert longer["dense", opt, "blocks"].body_peak_bytes < 0.7 * longer["dense", opt, "none"].body_peak_bytes
    model = resolve_model(small).build("meta")
    params = model.params
    weights = sum(p.numel() * 4 for p in params)
    none = rows["dense", "none", "none"].model_state_bytes
    assert none == 2 * weights  # parameters and their gradients
    assert rows["dense", "sgd", "none"].model_state_bytes == none  # plain SGD keeps no state
    # AdamW: exp_avg and exp_avg_sq per parameter, and its step count, a float32 host scalar: a CPU's own memory
    assert rows["dense", "adamw", "none"].model_state_bytes - none == 2 * weights + 4 * len(params)
    # on a GPU the step counts stay on the host, and every storage is a 512-byte block
    (gpu,) = api.predict(target="cuda", **{**GRID, "variant": "dense", "model": small, "dtype": "fp32"})
    blocks = sum(devices.get("cuda").block_bytes(p.numel() * 4) for p in params)
    assert gpu.model_state_bytes == 4 * blocks


def test_fit_with_a_model_fits_its_batch_and_not_one_more(small):
    budget = 6 * 2**20
    fitted = api.fit(budget, target="cpu", model=small, context=16, variant="dense,chunked", ce_chunk=64)
    assert fitted.fits and set(fitted.alone) == set(range(len(fitted.fits)))
    for i, f in enumerate(fitted.fits):
        assert 1 <= f.batch < 4096
        assert predict_peak(replace(f.config, batch=f.batch)).peak_bytes <= fitted.limit == budget * 19 // 20
        assert predict_peak(replace(f.config, batch=f.batch + 1)).peak_bytes > fitted.limit
        alone = fitted.alone[i]
        assert not alone.config.has_model and (alone.config.vocab, alone.config.d_model) == (211, 48)
        assert alone.batch > f.batch  # the model's step holds far more than its loss


def test_fit_answers_for_each_checkpointing_given_side_by_side(small):
    shape = {"target": "cpu", "model": small, "context": 16, "variant": "dense,chunked", "ce_chunk": 64}
    both = api.fit(6 * 2**20, activation_checkpointing="none,blocks", **shape)
    for setting in ("none", "blocks"):
        one = api.fit(6 * 2**20, activation_checkpointing=setting, **shape)
        assert [(f.config, f.batch) for f in both.fits if f.config.activation_checkpointing == setting] == [
            (f.config, f.batch) for f in one.fits]
    assert len({id(a) for a in both.alone.values()}) == 2  # the loss alone once per variant, whatever the setting
    result = CliRunner().invoke(app, ["fit", "--model", small, "--target", "cpu", "--budget", "6MiB", "--context",
                                      "16", "--variant", "dense", "--activation-checkpointing", "none,blocks",
                                      "--optimizer", "sgd,adamw"])
    assert result.exit_code == 0, result.output
    groups = [line.strip("─ ") for line in result.stdout.splitlines() if line.startswith("── ")]
    assert groups == [f"optimizer {o} · activation_checkpointing {a}" for o in ("sgd", "adamw")
                      for a in ("none", "blocks")]
    assert "each group's optimizer state, activations (as each group says)" in " ".join(result.stdout.split())
    one = CliRunner().invoke(app, ["fit", "--model", small, "--target", "cpu", "--budget", "6MiB", "--context",
                                   "16,32"])
    assert one.exit_code == 2 and "--context: fit takes one value, not 16,32" in one.stderr


def test_sweep_and_fit_show_the_step_and_the_loss_alone(small, tmp_path):
    out = tmp_path / "s.csv"
    result = CliRunner().invoke(app, ["sweep", "--model", small, "--device", "cpu", "--batch", "2", "--context", "9",
                                      "--variant", "dense,chunked", "--ce-chunk", "7", "--repeats", "1", "--out",
                                      str(out), "--wide"])
    assert result.exit_code == 0, result.output
    assert "step peak" in result.output and "loss share" in result.output and "adamw" in result.output
    result = CliRunner().invoke(app, ["fit", "--model", small, "--target", "cpu", "--budget", "6MiB", "--context",
                                      "16", "--variant", "dense", "--wide"])
    assert result.exit_code == 0, result.output
    assert "loss alone" in result.output and "whole training step" in result.output


@pytest.mark.parametrize("args, said", [
    (["--model", "nope"], "--model: unknown model 'nope'"),
    (["--model", "missing.json"], "--model: missing.json: no such file"),
    (["--model", "{bad}"], "--model: {bad}: not valid JSON"),
    (["--model", "{small}", "--vocab", "100"], "--vocab: is the model's own with --model"),
    (["--optimizer", "sgd"], "--optimizer: applies to a model's training step: give --model too"),
    (["--activation-checkpointing", "blocks"], "--activation-checkpointing: applies to a model's training step"),
    (["--model", "{small}", "--optimizer", "adam"], "--optimizer: 'adam' is not one of none, sgd, adamw"),
    (["--model", "{small}", "--grads", "keep"], "--grads: a model's step ends with zero_grad"),
    (["--model", "{small}", "--workload", "sample"], "--model: a model's step is a loss's"),
    (["--model", "none,{small}"], "--model: 'none' (the loss alone) and a model cannot share one grid"),
])
def test_every_bad_model_option_is_one_line_before_anything_runs(small, tmp_path, args, said):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    args = [a.format(small=small, bad=bad) for a in args]
    for command in (["sweep", "--device", "cpu", "--out", str(tmp_path / "s.csv")], ["predict", "--target", "cpu"]):
        result = CliRunner().invoke(app, [*command, *args])
        assert result.exit_code == 2, result.output
        line = said.format(small=small, bad=bad)
        assert line in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "s.csv").exists()


def test_a_users_build_runs_its_step_and_cannot_be_checkpointed_by_cebench(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text('''
import torch
from torch import nn


def build():
    body = nn.Sequential(nn.Embedding(97, 16), nn.Linear(16, 16))
    return body, nn.Parameter(torch.randn(97, 16) * 0.1)
''')
    spec = f"{path}:build"
    (m,) = api.sweep(device="cpu", repeats=1, out=tmp_path / "s.csv", variant="dense", batch=2, context=5, model=spec)
    (p,) = api.predict(target="cpu", variant="dense", batch=2, context=5, model=spec)
    assert m.status == "ok" and (m.vocab, m.d_model, m.n_params) == (97, 16, 97 * 16 * 2 + 16 * 16 + 16)
    assert m.peak_bytes - p.peak_bytes == ADAMW_CPU_RESIDUE and m.model_state_bytes == p.model_state_bytes
    with pytest.raises(api.UsageError, match="checkpoints its own") as caught:
        api.predict(target="cpu", variant="dense", batch=2, context=5, model=spec, activation_checkpointing="blocks")
    assert caught.value.param == "activation_checkpointing"


def test_a_gpu_target_runs_its_attention_kernel_not_the_math_fallback(small):
    """On meta the dispatcher takes the math fallback (batch × heads × context² scores); a
    prediction for a GPU calls the kernel the GPU runs, and for a CPU the CPU's."""
    gpu = devices.get("cuda").capability
    assert kernel_for(gpu, torch.bfloat16, 32, 8, 64) == FLASH
    assert kernel_for(gpu, torch.float32, 32, 32, 64) == EFFICIENT
    context = 64
    for target, dtype in itertools.product(("cuda", "cpu"), ("fp32", "bf16")):
        config = Config(variant="dense", workload="loss", device=target, dtype=dtype, batch=2, context=context,
                        vocab=211, d_model=48, ce_chunk=None, model=small, optimizer="none")
        state = training.make(config, device="meta")
        tracker = OpTracker()
        with tracker:
            state.built.body(state.ids).float().sum().backward()
        shapes = [b.shape for b in tracker.timeline().blocks]
        assert not any(s[-2:] == (context, context) for s in shapes if len(s) >= 2), (target, dtype)


def test_explain_takes_a_models_step_apart_and_plot_draws_it_against_a_budget(small, tmp_path):
    result = CliRunner().invoke(app, ["explain", "--model", small, "--device", "cpu", "--batch", "8", "--context",
                                      "64", "--variant", "dense,chunked", "--ce-chunk", "128", "--json", "--out",
                                      str(tmp_path / "parts.png")])
    assert result.exit_code == 0, result.output
    anatomies = json.loads(result.output)["anatomies"]
    assert (tmp_path / "parts.png").stat().st_size > 0 and len(anatomies) == 2
    for a in anatomies:
        (row,) = api.predict(target="cpu", variant=a["variant"], ce_chunk=a["ce_chunk"] or 128, batch=8, context=64,
                             model=small)
        assert sum(a["parts"].values()) == a["peak_bytes"] == row.step_peak_bytes
        params, tensors = resolve_model(small).n_params * 4, len(resolve_model(small).build("meta").params)
        # AdamW: exp_avg and exp_avg_sq, and a 4-byte step count per parameter tensor (on the host: a CPU's memory)
        assert a["parts"]["parameters"] == params and a["parts"]["optimizer state"] == 2 * params + 4 * tensors
        assert a["parts"]["activations"] > 0 and a["peak_in"] in ("loss", "optimizer step", "body backward")
    dense, chunked = anatomies
    assert chunked["parts"]["loss"] < dense["parts"]["loss"]  # the chunked loss holds less at its peak
    csv = tmp_path / "p.csv"
    api.predict(target="cpu", out=csv, variant="dense,chunked", batch="2,4,8", context=64, model=small)
    result = CliRunner().invoke(app, ["plot", str(csv), "--out-dir", str(tmp_path / "plots"), "--budget", "2MiB"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "plots" / "step-vs-batch.png").exists()


# An op defined through torch.library.Library: its kernels are registered with the dispatcher, not
# kept as Python a tracker could run (as a C++ extension's are), so on meta only its outputs are seen.
CUSTOM_OP_BODY = '''
import torch
from torch import nn

lib = torch.library.Library("cebench_test", "DEF")
lib.define("double(Tensor x) -> Tensor")
lib.impl("double", lambda x: x * 2, "CPU")
lib.impl("double", lambda x: torch.empty_like(x), "Meta")


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.ops.cebench_test.double(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


double = Double.apply


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.mix = nn.Embedding(97, 16), nn.Linear(16, 16)

    def forward(self, ids):
        return self.mix(double(self.embed(ids)))


def build():
    return Body(), nn.Parameter(torch.randn(97, 16) * 0.1)
'''


def test_a_body_that_cannot_be_traced_is_said_not_a_traceback(tmp_path):
    """A custom op in the body hides its buffers from a prediction: predict's row, fit and
    explain say so in one line each."""
    path = tmp_path / "custom.py"
    path.write_text(CUSTOM_OP_BODY)
    spec = f"{path}:build"
    (row,) = api.predict(target="cpu", variant="dense", batch=2, context=5, model=spec)
    assert row.status == "unsupported" and "custom op" in row.error
    result = CliRunner().invoke(app, ["fit", "--target", "cpu", "--variant", "dense", "--context", "5", "--budget",
                                      "4MiB", "--model", spec])
    assert result.exit_code == 2 and "--model: no variant can be predicted in this model's step" in result.output
    explained = api.explain(device="cpu", variant="dense", batch=2, context=5, model=spec)
    assert not explained.anatomies and "custom op" in explained.not_explained["dense"]


def test_a_changed_config_is_predicted_anew(small):
    (before,) = api.predict(target="cpu", variant="dense", batch=2, context=9, model=small)
    config = json.loads(Path(small).read_text())
    Path(small).write_text(json.dumps({**config, "num_hidden_layers": 4}))
    (after,) = api.predict(target="cpu", variant="dense", batch=2, context=9, model=small)
    assert after.n_params > before.n_params and after.model_state_bytes > before.model_state_bytes
    assert after.body_peak_bytes > before.body_peak_bytes and after.peak_bytes > before.peak_bytes


def test_a_cpu_keeps_layernorm_statistics_in_bf16_and_grouped_kv_as_they_are(tmp_path):
    """GPT-2 in bf16: a CPU's LayerNorm saves its mean and 1/std in bf16 (meta's in fp32), so
    the prediction charges them so and equals the measured peak. Grouped-query attention is
    given to a CPU's flash kernel grouped; only a CUDA fp32 step (memory-efficient kernel)
    repeats k/v."""
    gpt2 = {"model_type": "gpt2", "vocab_size": 211, "n_embd": 48, "n_layer": 2, "n_head": 6, "n_positions": 64,
            "activation_function": "gelu_pytorch_tanh"}
    path = tmp_path / "gpt2.json"
    path.write_text(json.dumps(gpt2))
    grid = {"model": str(path), "variant": "dense", "batch": 4, "context": 32, "dtype": "bf16", "optimizer": "none"}
    [m] = api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", **grid)
    [p] = api.predict(target="cpu", **grid)
    assert m.peak_bytes == p.peak_bytes
    model = resolve_model(_small(tmp_path))
    for kind, dtype, repeats in (("cpu", torch.float32, False), ("cpu", torch.bfloat16, False),
                                 ("cuda", torch.float32, True), ("cuda", torch.bfloat16, False)):
        built = model.build("meta", dtype, attention=devices.get(kind))
        assert built.body.blocks[0].attn.repeat_kv is repeats, (kind, dtype)


def _small(tmp_path: Path) -> str:
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))
    return str(path)


def test_fused_adamw_is_predicted_to_the_byte_and_makes_no_parameter_sized_temporary(small, tmp_path):
    grid = {**GRID, "variant": "dense", "model": small, "optimizer": "adamw,adamw-fused"}
    measured = {m.optimizer: m for m in api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", **grid)}
    predicted = {p.optimizer: p for p in api.predict(target="cpu", **grid)}
    fused = measured["adamw-fused"]
    assert fused.status == "ok" and fused.peak_bytes == predicted["adamw-fused"].peak_bytes  # no residue
    assert fused.model_state_bytes == measured["adamw"].model_state_bytes  # the same state
    # at this shape for-each AdamW's step is the peak, in its temporaries (√exp_avg_sq per parameter); the fused
    # kernel makes none, and its step's peak is the backward's
    anatomy = {o: api.explain(device="cpu", meta=True, **{**grid, "optimizer": o}).anatomies[0]
               for o in ("adamw", "adamw-fused")}
    assert anatomy["adamw"].when == "optimizer step" and anatomy["adamw"].parts["optimizer step"] > 0
    assert anatomy["adamw"].peak_bytes == measured["adamw"].peak_bytes - ADAMW_CPU_RESIDUE
    assert anatomy["adamw-fused"].parts["optimizer step"] == 0 and anatomy["adamw-fused"].when == "body backward"
    assert anatomy["adamw-fused"].peak_bytes == fused.peak_bytes < anatomy["adamw"].peak_bytes
    params = resolve_model(small).build("meta").params
    # on a GPU the fused step counts live on the device, one 512-byte block each
    gpu = {p.optimizer: p for p in api.predict(target="cuda", **{**grid, "dtype": "fp32"})}
    assert gpu["adamw-fused"].model_state_bytes - gpu["adamw"].model_state_bytes == 512 * len(params)


def test_a_tied_heads_two_gradients_are_summed_in_place_measured_and_predicted(tmp_path):
    """The embedding and the head share one weight: its two gradients meet in the autograd
    engine, which adds one into the other in place (a trace would add them out of place, a
    vocab × d_model buffer more, unless it follows the engine). A vocabulary larger than the
    tokens makes that sum the body step's peak."""
    path = tmp_path / "tied.json"
    path.write_text(json.dumps({**SMALL, "vocab_size": 4099, "tie_word_embeddings": True}))
    grid = {**GRID, "model": str(path), "optimizer": "none", "activation_checkpointing": "none,blocks"}
    measured = api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", **grid)
    predicted = {key(r): r for r in api.predict(target="cpu", **grid)}
    for m in measured:
        p = predicted[key(m)]
        assert m.status == p.status == "ok", (m.error, p.error)
        assert (m.peak_bytes, m.body_peak_bytes) == (p.peak_bytes, p.body_peak_bytes), key(m)


def test_repeat_kv_repeats_grouped_keys_and_values_per_head_measured_and_predicted(small, tmp_path):
    """`:repeat-kv` after a config: its keys and values repeated per query head before attention on
    every device, as torchtune's attention does; the kernel saves them so."""
    repeated = f"{small}:repeat-kv"
    grid = {**GRID, "variant": "dense", "model": f"{small},{repeated}", "optimizer": "none",
            "activation_checkpointing": "none,blocks"}
    measured = api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", **grid)
    predicted = {(r.model, r.activation_checkpointing): r for r in api.predict(target="cpu", **grid)}
    assert {m.model for m in measured} == {small, repeated}
    for m in measured:
        p = predicted[m.model, m.activation_checkpointing]
        assert m.status == p.status == "ok", (m.error, p.error)
        assert (m.peak_bytes, m.body_peak_bytes) == (p.peak_bytes, p.body_peak_bytes), m.model
    # on a GPU, bf16: each of the 2 blocks saves keys and values for 6 heads, not 2, of head_dim 8
    gpu = {r.model: r for r in api.predict(target="h100-80gb", **{**grid, "batch": 4, "context": 256,
                                                                  "activation_checkpointing": "none"})}
    assert gpu[repeated].step_peak_bytes - gpu[small].step_peak_bytes == 2 * 2 * (4 * 256) * (6 - 2) * 8 * 2
    with pytest.raises(api.UsageError, match="repeat-kv follows a preset"):
        api.predict(target="cpu", model="cebench.api:repeat-kv", variant="dense", batch=1, context=8)


def test_adamw_stepped_in_backward_holds_no_gradients_steps_as_adamw_and_is_predicted(small, tmp_path):
    """torchtune's optimizer_in_bwd: each parameter stepped by fused AdamW as its gradient is
    accumulated, the gradient then freed."""
    grid = {**GRID, "variant": "dense,chunked", "model": small, "optimizer": "adamw-fused,adamw-in-backward",
            "activation_checkpointing": "none,blocks"}
    measured = api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", **grid)
    predicted = {key(r): r for r in api.predict(target="cpu", **grid)}
    rows = {key(m): m for m in measured}
    weights = sum(p.numel() * 4 for p in resolve_model(small).build("meta").params)
    for m in measured:
        p = predicted[key(m)]
        assert m.status == p.status == "ok", (m.error, p.error)
        assert (m.peak_bytes, m.body_peak_bytes, m.model_state_bytes) == (p.peak_bytes, p.body_peak_bytes,
                                                                          p.model_state_bytes), key(m)
        if m.optimizer == "adamw-in-backward":  # no gradients kept: the parameters' worth less state
            fused = rows[m.variant, "adamw-fused", m.activation_checkpointing]
            assert fused.model_state_bytes - m.model_state_bytes == weights
            assert m.body_peak_bytes < fused.body_peak_bytes

    def stepped(name: Optimizer) -> list[torch.Tensor]:
        torch.manual_seed(0)
        layer = torch.nn.Linear(8, 3)
        optimizer = training._optimizer(name, list(layer.parameters()), None)
        for _ in range(2):
            layer(torch.ones(4, 8)).square().sum().backward()
            in_backward = name == Optimizer.ADAMW_IN_BACKWARD
            assert all((p.grad is None) == in_backward for p in layer.parameters())  # stepped and freed already
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return [p.detach() for p in layer.parameters()]

    for a, b in zip(stepped(Optimizer.ADAMW_FUSED), stepped(Optimizer.ADAMW_IN_BACKWARD), strict=True):
        torch.testing.assert_close(a, b)


def test_adamw_stepped_in_backward_is_not_sharded(small, tmp_path):
    grid = {**GRID, "variant": "dense", "model": small, "optimizer": "adamw-in-backward", "fsdp": 2}
    (predicted,) = api.predict(target="cpu", **grid)
    (measured,) = api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "s.csv", **grid)
    for row in (predicted, measured):
        assert row.status == "unsupported" and "runs unsharded only (--fsdp 1)" in row.error
