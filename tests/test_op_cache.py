"""The op cache of meta traces (`cebench.engine.op_cache`): a step traced with it logs the
same storage events and counts the same FLOPs as without it; views, ops whose outputs share
a storage with their inputs, and in-place ops that change a layout are always run."""
from __future__ import annotations

import json

import pytest
import torch

from cebench.engine import op_cache, series
from cebench.engine.op_cache import OpCache
from cebench.engine.trace import flop_counter, trace
from cebench.run.grid import GridOptions

MODEL = {"model_type": "llama", "vocab_size": 97, "hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 40}


def logged(config, cached: bool, monkeypatch: pytest.MonkeyPatch):
    with monkeypatch.context() as patch:
        if not cached:
            patch.setattr(op_cache, "_kind", lambda func: None)  # every op runs
        counter = flop_counter()
        traced = trace(config, series.EventTracker, counter)
        return traced.record.events, traced.peak_delta_bytes, traced.base_bytes, traced.state_bytes, traced.flops


@pytest.mark.parametrize("grid", [
    {"variant": "chunked", "context": "16", "vocab": "300", "d_model": "8", "ce_chunk": "8", "batch": "3"},
    {"variant": "torch-lce", "context": "16", "vocab": "300", "d_model": "8", "ce_chunk": "8", "batch": "3",
     "dtype": "bf16", "device": "h100-80gb"},
    {"variant": "dense", "context": "8", "batch": "2", "optimizer": "adamw", "activation_checkpointing": "blocks"},
])
def test_a_trace_with_the_cache_equals_one_without(grid, tmp_path, monkeypatch):
    if "vocab" not in grid:
        path = tmp_path / "model.json"
        path.write_text(json.dumps(MODEL))
        grid = {**grid, "model": str(path)}
    device = grid.pop("device", "cpu")
    config = GridOptions(**grid).grid(device).expand()[0]
    logged(config, True, monkeypatch)  # fills the cache: the next trace is answered from it
    assert logged(config, True, monkeypatch) == logged(config, False, monkeypatch)


def test_a_view_or_a_shared_storage_is_never_answered_from_the_cache():
    cache, x = OpCache(), torch.empty(4, 6, device="meta")
    for _ in range(2):
        view = cache.run(torch.ops.aten._unsafe_view.default, (x, [6, 4]), {},
                         lambda: torch.ops.aten._unsafe_view.default(x, [6, 4]))
        assert view.untyped_storage()._cdata == x.untyped_storage()._cdata
    assert op_cache._kind(torch.ops.aten.view.default) is None


def test_an_in_place_op_that_changes_a_layout_always_runs():
    cache, resize = OpCache(), torch.ops.aten.resize_.default
    for size in (10, 20):
        y = torch.empty(2, device="meta")
        out = cache.run(resize, (y, [size]), {}, lambda y=y, size=size: resize(y, [size]))
        assert out.shape == (size,) and y.untyped_storage().nbytes() == 4 * size


def test_a_fresh_op_answered_from_the_cache_has_its_own_storage():
    cache, a, ran = OpCache(), torch.empty(3, 5, device="meta"), []

    def call() -> torch.Tensor:
        ran.append(1)
        return torch.ops.aten.mul.Tensor(a, a)

    first, second = (cache.run(torch.ops.aten.mul.Tensor, (a, a), {}, call) for _ in range(2))
    assert len(ran) <= 1  # the second call was answered (the first, unless an earlier test ran it)
    assert (second.shape, second.stride(), second.dtype) == (first.shape, first.stride(), first.dtype)
    assert second.untyped_storage()._cdata not in (first.untyped_storage()._cdata, a.untyped_storage()._cdata)
