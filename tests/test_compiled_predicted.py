"""Compiled variants predicted on meta as inductor's own generated code runs (`cebench.engine.compiled`),
against the same steps compiled and measured on this CPU: to the byte in fp32, alone and in a model's step."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cebench import api
from cebench.core.config import Config
from cebench.engine.points import predict
from cebench.shims import torch_names

pytestmark = pytest.mark.compile
LLAMA = {"model_type": "llama", "vocab_size": 211, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 6,
         "num_key_value_heads": 2, "intermediate_size": 40, "tie_word_embeddings": False}


def _same(measured: list, predicted: list) -> None:
    """Each measured row predicted to the byte; on torch 2.8, whose Dynamo can break transformers'
    decoder block into several graphs, such a compiled row may be unsupported instead, saying so."""
    assert len(measured) == len(predicted)
    for m, p in zip(sorted(measured, key=_key), sorted(predicted, key=_key), strict=True):
        if torch_names.RELEASE.startswith("2.8.") and m.model.startswith("hf:") and p.status == "unsupported":
            assert str(m.compile) == "blocks" and "graphs (Python runs between them)" in p.error, p.error
            continue
        assert m.status == p.status == "ok", (m.error, p.error)
        assert (m.base_bytes, m.peak_bytes) == (p.base_bytes, p.peak_bytes), _key(m)
        assert m.flops == p.flops  # inductor's code runs its eager twin's matmuls


def _key(row: object) -> tuple:
    return (row.model, row.variant, row.batch, str(row.activation_checkpointing), str(row.compile))


@pytest.mark.reference_torch
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


@pytest.mark.fsdp_predicted
def test_a_sharded_compiled_row_says_why_it_is_not_predicted(tmp_path: Path):
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(LLAMA))
    config = Config(variant="dense-compiled", workload="loss", device="cpu", dtype="fp32", batch=2, context=8,
                    vocab=211, d_model=48, ce_chunk=None, model=str(path), fsdp=2)
    row = predict(config)
    assert row.status == "unsupported" and "predicted unsharded only" in row.error


@pytest.mark.reference_torch
@pytest.mark.needs("triton")
def test_a_compiled_loss_on_a_gpu_target_is_inductors_triton_code_for_the_card(monkeypatch):
    """Without a GPU or a CUDA build of torch: each partitioned graph is lowered from fake CUDA
    tensors (inductor's Triton wrapper), for the card's SM count. The peaks are explained
    term by term: dense saves its bf16 logits and takes its logits' gradient in their place;
    the checkpointed chunked loss, compiled, recomputes every chunk's logits at once in its
    backward (N / ce_chunk of them), as on a CPU; each tensor on the card rounds to 512 B."""
    import torch
    from torch._inductor import compile_fx

    from cebench.engine import compiled

    lowered: list[tuple[str, ...]] = []
    real = compile_fx.compile_fx_inner

    def recording(gm, example_inputs, **kwargs):
        lowered.append(tuple(str(x.device) for x in example_inputs if isinstance(x, torch.Tensor)))
        return real(gm, example_inputs, **kwargs)

    compiled._captured.cache_clear()
    compiled._lowered.cache_clear()
    monkeypatch.setattr(compile_fx, "compile_fx_inner", recording)
    n, vocab, d, chunk, b = 1024, 4096, 128, 256, 2  # bf16: 2 B an element
    rows = {r.variant: r for r in api.predict(target="h100-80gb", variant="dense-compiled,chunked-compiled",
                                              batch=2, context=512, vocab=vocab, d_model=d, ce_chunk=chunk,
                                              dtype="bf16")}
    assert lowered and all(device == "cuda:0" for devices in lowered for device in devices)
    scalars = 2 * 512  # the loss, and its upstream gradient
    assert rows["dense-compiled"].peak_delta_bytes == (n * vocab + vocab * d + n * d) * b + scalars
    every_chunk = n // chunk * (chunk * vocab)  # its logits, recomputed
    assert rows["chunked-compiled"].peak_delta_bytes == (every_chunk + vocab * d + chunk * d) * b + scalars
    assert all(compiled.GPU_NOTE in r.note for r in rows.values())


def test_a_compiled_chunked_loss_is_predicted_up_to_the_chunks_it_compiles(monkeypatch):
    """Dynamo unrolls the chunk loop, so a compiled step's compile grows with its chunks: past
    `MAX_CHUNKS` a row says so (nothing compiled), a fit stops there, and a fit that names no
    variant leaves the compiled ones out (each batch it asks of one would compile again)."""
    from cebench.engine import compiled

    monkeypatch.setattr(compiled, "MAX_CHUNKS", 4)
    shape = {"context": 64, "vocab": 64, "d_model": 8, "ce_chunk": 64}
    over, = api.predict(target="cuda", variant="chunked-compiled", batch=5, **shape)
    assert over.status == "unsupported" and "5 chunks would compile 5 copies" in over.error
    fitted = api.fit(2**40, target="cpu", variant="chunked-compiled", **shape)
    (answer,) = fitted.fits
    assert (answer.batch, answer.at_limit) == (4, True)
    assert not any(f.config.variant.endswith("-compiled") for f in api.fit(2**40, target="cpu", **shape).fits)


def test_a_gpu_targets_compiled_row_without_triton_says_to_install_it(monkeypatch):
    import importlib.util

    from cebench.core import devices
    from cebench.engine import compiled

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    assert "pip install --no-deps triton==" in compiled.unsupported_reason(devices.get("cuda"))
    assert compiled.unsupported_reason(devices.get("cpu")) is None


@pytest.mark.needs("triton")
def test_compiled_blocks_are_predicted_to_the_byte(tmp_path):
    """`--compile blocks` (each block compiled in place, as torchtune's compile=True does), in
    cebench's decoder and in transformers' own model, alone and under activation
    checkpointing (the block compiled on its first call inside a checkpoint). Compiled blocks
    save less for the backward than eager ones (the measured step shows it too)."""
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(LLAMA))
    grid = {"model": f"{path},hf:{path}:no-cache", "variant": "dense", "batch": 2, "context": 64,
            "activation_checkpointing": "none,blocks", "compile": "none,blocks"}
    measured = api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "s.csv", **grid)
    _same(measured, api.predict(target="cpu", **grid))
    peak = {(r.model.startswith("hf:"), str(r.activation_checkpointing), str(r.compile)): r.peak_bytes
            for r in measured}
    assert peak[False, "none", "blocks"] < peak[False, "none", "none"]
    assert all(r.compile_s > 0 for r in measured if str(r.compile) == "blocks")


@pytest.mark.needs("triton")
def test_the_blocks_of_a_decoder_are_lowered_once_whatever_their_number(monkeypatch, tmp_path):
    """A compiled block is captured per block (Dynamo decides per module) but lowered once per
    distinct graph: a prediction's cost does not grow with the blocks. On an H100 target in
    bf16 compiled blocks hold less than eager ones."""
    from torch._inductor import compile_fx

    from cebench.engine import compiled

    lowered: list[int] = []
    real = compile_fx.compile_fx_inner

    def recording(gm, example_inputs, **kwargs):
        lowered.append(len(example_inputs))
        return real(gm, example_inputs, **kwargs)

    monkeypatch.setattr(compile_fx, "compile_fx_inner", recording)
    peaks = {}
    for layers in (2, 5):
        compiled._lowered.cache_clear()
        lowered.clear()
        path = tmp_path / f"llama{layers}.json"
        path.write_text(json.dumps({**LLAMA, "num_hidden_layers": layers}))
        rows = api.predict(target="h100-80gb", model=str(path), variant="dense", batch=2, context=64, dtype="bf16",
                           compile="none,blocks")
        assert len(lowered) == 2  # one block's forward and backward, for every block
        peaks[layers] = {str(r.compile): r.peak_bytes for r in rows}
        assert compiled.GPU_NOTE in next(r.note for r in rows if str(r.compile) == "blocks")
    assert all(p["blocks"] < p["none"] for p in peaks.values())


def test_what_dynamo_does_not_compile_runs_eagerly_and_what_it_breaks_is_unsupported(tmp_path):
    """torch's chunked loss is a custom op Dynamo captures no graph of: compiled, it runs
    eagerly, and is predicted so. A block whose graph breaks (Python between two graphs) is
    not predicted; a sharded step with compiled blocks neither, nor measured."""
    lce = {r.variant: r.peak_bytes for r in api.predict(target="cpu", variant="torch-lce,torch-lce-compiled",
                                                         batch=2, context=64, vocab=512, ce_chunk=32)}
    assert lce["torch-lce-compiled"] == lce["torch-lce"]
    build = tmp_path / "broken.py"
    build.write_text(BROKEN)
    row, = api.predict(target="cpu", model=f"{build}:build", variant="dense", batch=1, context=8, compile="blocks")
    assert row.status == "unsupported" and "breaks Block into 2 graphs" in row.error
    path = tmp_path / "llama.json"
    path.write_text(json.dumps(LLAMA))
    sharded = {"model": str(path), "variant": "dense", "batch": 2, "context": 8, "compile": "blocks", "fsdp": 2}
    row, = api.predict(target="cpu", **sharded)
    assert row.status == "unsupported" and "unsharded only" in row.error
    row, = api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "s.csv", **sharded)
    assert row.status == "unsupported" and "unsharded only" in row.error


BROKEN = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        x = self.a(x)
        torch._dynamo.graph_break()
        return self.b(x)


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.blocks = nn.ModuleList([Block()])

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return x


def build():
    body = Body()
    return body, body.embed.weight
'''
