"""Compiled variants predicted on meta as inductor's own generated code runs (`cebench.measure.compiled`),
against the same steps compiled and measured on this CPU: to the byte in fp32, alone and in a model's step."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cebench import api
from cebench.analyze.predict import predict
from cebench.core.config import Config

pytestmark = pytest.mark.compile
LLAMA = {"model_type": "llama", "vocab_size": 211, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 6,
         "num_key_value_heads": 2, "intermediate_size": 40, "tie_word_embeddings": False}


def _same(measured: list, predicted: list) -> None:
    assert len(measured) == len(predicted)
    for m, p in zip(sorted(measured, key=_key), sorted(predicted, key=_key), strict=True):
        assert m.status == p.status == "ok", (m.error, p.error)
        assert (m.base_bytes, m.peak_bytes) == (p.base_bytes, p.peak_bytes), _key(m)
        assert m.flops == p.flops  # inductor's code runs its eager twin's matmuls


def _key(row: object) -> tuple:
    return (row.variant, row.batch, row.activation_checkpointing)


def test_compiled_losses_are_predicted_to_the_byte(tmp_path):
    """Dense and the vendored chunked loss, compiled: at batch 8 inductor's chunked step holds
    nearly what its dense one does (its saved logits are not chunk-sized), unlike eager."""
    grid = {"variant": "dense-compiled,chunked-compiled", "batch": "2,8", "vocab": 4096, "ce_chunk": 256}
    measured = api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "s.csv", **grid)
    predicted = api.predict(target="cpu", **grid)
    _same(measured, predicted)
    peak = {(r.variant, r.batch): r.peak_delta_bytes for r in predicted}
    eager = {r.variant: r.peak_delta_bytes for r in api.predict(target="cpu", variant="dense,chunked", batch=8,
                                                                vocab=4096, ce_chunk=256)}
    assert peak["chunked-compiled", 8] > eager["chunked"] and peak["dense-compiled", 8] < eager["dense"]


def test_a_compiled_loss_in_a_models_step_is_predicted_to_the_byte(tmp_path):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(LLAMA))
    grid = {"model": str(path), "variant": "chunked-compiled", "batch": 4, "context": 64, "ce_chunk": 64,
            "activation_checkpointing": "none,blocks"}
    measured = api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "s.csv", **grid)
    _same(measured, api.predict(target="cpu", **grid))


@pytest.mark.parametrize(("device", "fsdp", "said"), [("h100-80gb", 1, "predicted for a CPU target only"),
                                                      ("cpu", 2, "predicted unsharded only")])
def test_a_compiled_row_it_cannot_predict_says_why(device, fsdp, said, tmp_path: Path):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(LLAMA))
    config = Config(variant="dense-compiled", workload="loss", device=device, dtype="fp32", batch=2, context=8,
                    vocab=211, d_model=48, ce_chunk=None, model=str(path), fsdp=fsdp)
    row = predict(config)
    assert row.status == "unsupported" and said in row.error
