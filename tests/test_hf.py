"""`--model hf:<config>`: the transformers model itself as the body, measured on CPU and
predicted on meta to the byte (with and without its own gradient checkpointing, sharded
too), its own loss (`hf-loss`) the same step as its own forward with labels, its dropout
and `use_cache` as its config says or switched off, and one line for every bad name."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cebench import api
from cebench.cli import app
from cebench.core import devices, pins
from cebench.models import resolve_model

transformers = pytest.importorskip("transformers")

# GQA (6 heads, 2 key/value heads), head_dim 8, an odd vocabulary, an untied head; GPT-2 with its default dropout
# (0.1) and use_cache (true).
LLAMA = {"model_type": "llama", "vocab_size": 211, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 6,
         "num_key_value_heads": 2, "intermediate_size": 40, "tie_word_embeddings": False}
GPT2 = {"model_type": "gpt2", "vocab_size": 211, "n_embd": 48, "n_layer": 2, "n_head": 6, "n_positions": 64}
ADAMW_CPU_RESIDUE = 12  # as in test_model_step: AdamW's scalars a CPU wraps outside the dispatcher
# gelu_new's Python-number multiplications save their scalars, wrapped outside the dispatcher: per block alive
GELU_NEW_RESIDUE = 24


def write(path: Path, config: dict) -> str:
    path.write_text(json.dumps(config))
    return str(path)


def test_predicted_on_meta_equals_measured_on_cpu_with_its_own_checkpointing(tmp_path):
    model = "hf:" + write(tmp_path / "llama.json", LLAMA)
    grid = {"model": model, "variant": "dense,chunked", "batch": 4, "context": 32, "ce_chunk": 48,
            "activation_checkpointing": "none,blocks"}
    measured = api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", **grid)
    predicted = {(r.variant, r.activation_checkpointing): r for r in api.predict(target="cpu", **grid)}
    assert len(measured) == len(predicted) == 4
    for m in measured:
        p = predicted[m.variant, m.activation_checkpointing]
        assert m.status == p.status == "ok", (m.error, p.error)
        assert m.base_bytes == p.base_bytes and m.model_state_bytes == p.model_state_bytes
        assert m.peak_bytes - p.peak_bytes in (0, ADAMW_CPU_RESIDUE), (m.variant, m.activation_checkpointing)
        assert m.body_peak_bytes - p.body_peak_bytes in (0, ADAMW_CPU_RESIDUE)
        assert m.n_params == resolve_model(model).n_params
    bodies = {r.activation_checkpointing: r.body_peak_bytes for r in measured if r.variant == "dense"}
    assert bodies["blocks"] < bodies["none"]  # its own checkpointing ran


def test_the_models_own_step_with_labels_is_hf_loss_to_the_byte(tmp_path):
    """`model(input_ids, labels=labels).loss`, backward, AdamW, zero_grad, as a user's loop
    (or the Trainer) runs it, holds at its peak exactly what cebench's step with hf-loss holds."""
    model, (batch, context) = "hf:" + write(tmp_path / "llama.json", LLAMA), (4, 32)
    fields = dict(LLAMA)
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    torch.manual_seed(0)
    own = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).train()
    optimizer = torch.optim.AdamW(own.parameters())
    ids = torch.randint(0, LLAMA["vocab_size"], (batch, context))

    def step() -> None:
        loss = own(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    held = [*own.parameters(), *(t for s in optimizer.state.values() for t in s.values()), ids]
    reading = devices.get("cpu").peak(step, held)
    [row] = api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", model=model, variant="hf-loss",
                      batch=batch, context=context)
    assert row.status == "ok", row.error
    assert row.peak_bytes - row.base_bytes == reading.peak_bytes - reading.base_bytes
    [dense] = api.predict(target="cpu", model=model, variant="dense", batch=batch, context=context)
    assert dense.peak_bytes == api.predict(target="cpu", model=model, variant="hf-loss", batch=batch,
                                           context=context)[0].peak_bytes  # transformers' loss is dense, op for op


def test_dropout_and_the_cache_are_the_configs_and_switch_off(tmp_path):
    """GPT-2's default dropout is measured as predicted (its gelu_new's scalars aside), and
    turned off it holds less; `use_cache` copies each block's keys and values (fp32, N × d_model
    each) and keeps them to the peak."""
    path = write(tmp_path / "gpt2.json", GPT2)
    grid = {"variant": "dense", "batch": 4, "context": 32, "optimizer": "none"}
    [m] = api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", model=f"hf:{path}", **grid)
    [p] = api.predict(target="cpu", model=f"hf:{path}", **grid)
    assert m.peak_bytes - p.peak_bytes == GELU_NEW_RESIDUE * GPT2["n_layer"]
    peaks = {suffix: api.predict(target="cpu", model=f"hf:{path}{suffix}", **grid)[0].peak_bytes
             for suffix in ("", ":no-dropout", ":no-dropout:no-cache")}
    assert peaks[""] > peaks[":no-dropout"]
    tokens = grid["batch"] * grid["context"]
    assert peaks[":no-dropout"] - peaks[":no-dropout:no-cache"] == GPT2["n_layer"] * 2 * tokens * GPT2["n_embd"] * 4
    # cebench's own decoder of the same config: dropout and gelu_new as transformers runs them, no cache
    decoder = api.predict(target="cpu", model=path, **grid)[0].peak_bytes
    assert abs(decoder - peaks[""]) / peaks[""] < 0.01


@pytest.mark.slow
def test_sharded_predicted_equals_two_ranks_measured(tmp_path):
    model = "hf:" + write(tmp_path / "llama.json", LLAMA)
    grid = {"model": model, "variant": "dense", "batch": 2, "context": 16, "fsdp": 2}
    [m] = api.sweep(device="cpu", repeats=1, warmup=2, out=tmp_path / "s.csv", **grid)
    [p] = api.predict(target="cpu", **grid)
    assert m.status == p.status == "ok", (m.error, p.error)
    assert m.base_bytes == p.base_bytes and m.peak_bytes - p.peak_bytes in (0, ADAMW_CPU_RESIDUE)


def test_the_table_names_the_transformers_model_by_its_file(tmp_path):
    path = write(tmp_path / "llama.json", LLAMA)
    result = CliRunner().invoke(app, ["predict", "--model", f"hf:{path},{path}", "--target", "cpu", "--batch", "1",
                                      "--context", "8", "--variant", "dense"])
    assert result.exit_code == 0, result.output
    assert "── hf:llama.json ·" in result.output and "── llama.json ·" in result.output


@pytest.mark.parametrize(("model", "said"), [
    ("hf:", "name a preset or a config.json after hf:"),
    ("hf:nope", "hf:nope: nope is neither a preset"),
    ("hf:gpt2:no-dropout:nope", "unknown suffix 'nope' (an hf: model takes :no-dropout, :no-cache)"),
])
def test_a_bad_hf_model_is_one_line(model, said):
    result = CliRunner().invoke(app, ["predict", "--model", model, "--target", "cpu", "--batch", "1"])
    assert result.exit_code == 2 and said in result.output, result.output


def test_without_transformers_an_hf_model_says_what_to_install(monkeypatch):
    import sys

    from cebench.models import model as model_mod

    monkeypatch.setitem(sys.modules, "transformers", None)  # an import of it fails
    model_mod._resolve.cache_clear()
    result = CliRunner().invoke(app, ["predict", "--model", "hf:gpt2", "--target", "cpu", "--batch", "1"])
    model_mod._resolve.cache_clear()
    assert result.exit_code == 2 and f"pip install {pins.spec('transformers')}" in result.output, result.output
