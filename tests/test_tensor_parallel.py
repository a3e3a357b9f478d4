"""A model's step split with tensor parallelism (`--tp 2`, gloo on the CPU): measured equal to
its prediction to the byte, dense under loss_parallel and Megatron's vocab-parallel loss, with
and without checkpointing, on a vocabulary the ranks split unevenly; the vocab-parallel loss's
values and gradients, split and unsplit, against dense; what --tp refuses; and with --fsdp 2, four
ranks measured (sharing this machine's cores) as predicted.

The rank functions below run in the ranks' processes, which import this module: it imports
nothing heavy."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cebench import api
from cebench.core.world import World
from cebench.run import ranks
from cebench.run.grid import GridOptions
from cebench.run.isolate import Child

pytestmark = pytest.mark.fsdp_predicted

# 2 blocks, 4 query heads over 2 key/value heads, d_ff 128: each divides over 2 ranks; vocab 1001 does not (rank 0
# holds 501 rows of the head, rank 1 500).
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1001, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False}
GRID = {"batch": 2, "context": 64, "ce_chunk": 24, "tp": 2, "optimizer": "sgd", "variant": "dense,vocab-parallel",
        "activation_checkpointing": "none,blocks"}
COLUMNS = ("base_bytes", "peak_bytes", "model_state_bytes", "step_peak_bytes", "body_peak_bytes", "n_params")
SEMANTICS = [{}, {"softcap": 30.0}, {"label_smoothing": 0.1}, {"z_loss": 1e-3}, {"reduction": "sum"},
             {"reduction": "none", "softcap": 20.0, "label_smoothing": 0.2, "z_loss": 1e-2}]


def _key(row) -> tuple[str, str]:
    return row.variant, str(row.activation_checkpointing)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    from conftest import model_file  # here: the ranks' processes import this module, and nothing heavy with it

    return str(model_file(tmp_path_factory.mktemp("tp"), TINY))


@pytest.fixture(scope="module")
def measured(model, tmp_path_factory) -> dict[tuple[str, str], object]:
    out = tmp_path_factory.mktemp("tp") / "measured.csv"
    return {_key(r): r for r in api.sweep(device="cpu", repeats=1, warmup=1, out=out, model=model, **GRID)}


@pytest.fixture(scope="module")
def predicted(model) -> dict[tuple[str, str], object]:
    return {_key(r): r for r in api.predict(target="cpu", model=model, **GRID)}


@pytest.mark.slow
@pytest.mark.parametrize("checkpointing", ["none", "blocks"])
@pytest.mark.parametrize("variant", ["dense", "vocab-parallel"])
def test_two_ranks_split_by_tp_measure_what_is_predicted_to_the_byte(measured, predicted, variant, checkpointing):
    m, p = measured[variant, checkpointing], predicted[variant, checkpointing]
    assert m.status == p.status == "ok", (m.error, p.error)
    for column in COLUMNS:
        assert getattr(m, column) == getattr(p, column), column
    assert m.tp == p.tp == 2 and m.fsdp == 1 and m.threads == ranks.share(None, 2)
    assert "peak by rank" in m.note  # rank 1 holds one row of the head less


@pytest.mark.slow
def test_four_ranks_split_and_sharded_measure_what_is_predicted_to_the_byte(model, tmp_path):
    grid = {**GRID, "fsdp": 2, "activation_checkpointing": "none"}
    measured = api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "four.csv", model=model, **grid)
    predicted = api.predict(target="cpu", model=model, **grid)
    assert [(r.variant, r.fsdp, r.tp) for r in measured] == [(r.variant, 2, 2) for r in predicted]
    for m, p in zip(measured, predicted, strict=True):
        assert m.status == p.status == "ok", (m.error, p.error)
        for column in COLUMNS:
            assert getattr(m, column) == getattr(p, column), (m.variant, column)


@pytest.mark.slow
def test_checkpointing_lowers_a_split_step_and_megatron_holds_less_than_loss_parallel(measured):
    peak = {key: row.peak_bytes for key, row in measured.items()}
    assert peak["dense", "blocks"] < peak["dense", "none"] and peak["vocab-parallel", "blocks"] < peak[
        "vocab-parallel", "none"]
    assert peak["vocab-parallel", "none"] < peak["dense", "none"] and peak["vocab-parallel", "blocks"] < peak[
        "dense", "blocks"]
    # checkpointed, Megatron's loss adds nothing to the body's peak here: one chunk's softmax is less than a block's
    megatron = measured["vocab-parallel", "blocks"]
    assert megatron.peak_bytes == megatron.body_peak_bytes < measured["dense", "blocks"].peak_bytes


def test_tp_1_is_the_unsplit_step(model):
    grid = {**GRID, "variant": "dense", "activation_checkpointing": "none"}
    (split,) = api.predict(target="cpu", model=model, **{**grid, "tp": 1})
    (plain,) = api.predict(target="cpu", model=model, **{k: v for k, v in grid.items() if k != "tp"})
    assert split.tp == 1 and (split.peak_bytes, split.body_peak_bytes) == (plain.peak_bytes, plain.body_peak_bytes)


@pytest.mark.parametrize("semantics", SEMANTICS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "plain")
def test_vocab_parallel_unsplit_is_dense(semantics):
    import torch

    from cebench.losses.builtin import dense_cross_entropy
    from cebench.losses.vocab_shards import vocab_parallel_cross_entropy

    h, weight, targets = _inputs()
    for ce_chunk in (None, 5, 64):
        values = []
        for fn in (dense_cross_entropy, vocab_parallel_cross_entropy):
            h_, w_ = h.clone().requires_grad_(), weight.clone().requires_grad_()
            loss = fn(h_, w_, targets, ce_chunk, **semantics)
            loss.backward(torch.ones_like(loss))
            values.append((loss.detach(), h_.grad, w_.grad))
        for dense, megatron in zip(*values, strict=True):
            torch.testing.assert_close(megatron, dense, rtol=1e-5, atol=1e-6)


def _inputs():
    import torch

    gen = torch.Generator().manual_seed(0)
    h = torch.randn(23, 16, generator=gen, dtype=torch.float64)
    weight = torch.randn(101, 16, generator=gen, dtype=torch.float64)
    targets = torch.randint(0, 101, (23,), generator=gen)
    targets[::4] = -100
    return h, weight, targets


def split_loss(mesh, semantics: dict):
    """In a rank: the vocab-parallel loss of `_inputs` with the weight split over the ranks, its
    value and the gradients of h and of the whole weight."""
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from cebench.losses.vocab_shards import plain, vocab_parallel_cross_entropy

    h, weight, targets = _inputs()
    h = distribute_tensor(h, mesh, [Replicate()]).requires_grad_()
    weight = distribute_tensor(weight, mesh, [Shard(0)]).requires_grad_()
    loss = plain(vocab_parallel_cross_entropy(h, weight, targets, 7, **semantics))
    loss.backward(torch.ones_like(loss))
    return [t.tolist() for t in (loss.detach(), h.grad.full_tensor(), weight.grad.full_tensor())]  # tensors: fds


def test_vocab_parallel_over_two_ranks_is_dense_on_the_whole_vocabulary():
    import torch

    from cebench.losses.builtin import dense_cross_entropy

    semantics = {"softcap": 20.0, "label_smoothing": 0.2, "z_loss": 1e-2, "reduction": "none"}
    outcome = ranks.launch(split_loss, (semantics,), World(fsdp=2), Child(threads=1), 120)  # a 1-D mesh
    assert outcome.status == "ok", outcome.error
    h, weight, targets = _inputs()
    h.requires_grad_(), weight.requires_grad_()
    loss = dense_cross_entropy(h, weight, targets, **semantics)
    loss.backward(torch.ones_like(loss))
    for rank in outcome.value:
        for got, want in zip(rank, (loss.detach(), h.grad, weight.grad), strict=True):
            torch.testing.assert_close(torch.tensor(got, dtype=want.dtype), want, rtol=1e-5, atol=1e-6)  # fp32 logits


@pytest.mark.parametrize(("grid", "reason"), [
    ({"tp": 3}, "--tp 3 does not divide the model's 4 query heads"),
    ({"context": 15}, "--tp 2 splits the sequence between the layers (sequence parallelism, as torchtitan): context 15 "
                      "is not a multiple of it"),
    ({"variant": "dense-compiled"}, "dense-compiled runs on an unsplit head only (--tp 1): cebench compiles no loss "
                                    "on DTensors"),
    ({"label_smoothing": 0.1}, "dense does not support --label-smoothing 0.1 on a vocabulary split by --tp 2"),
    ({"optimizer": "adamw-in-backward"}, "adamw-in-backward runs unsplit and unsharded only (--fsdp 1 --tp 1)"),
])
def test_what_a_split_step_cannot_run_is_unsupported_with_the_reason(model, grid, reason):
    (row,) = api.predict(target="cpu", model=model, **{"batch": 1, "context": 16, "tp": 2, "variant": "dense", **grid})
    assert (row.status, row.error) == ("unsupported", reason)


def test_a_tied_head_is_split_with_the_embedding(tmp_path):
    """Gemma 2: the head is the embedding's weight, split over the vocabulary once; its branch norms
    join the residual stream's sequence shard. Measured on 2 gloo ranks it holds at most 72 B more than
    predicted (scalars a CPU wraps outside the dispatcher, as for AdamW; results/README.md)."""
    config = json.loads((Path(api.__file__).parent / "models" / "presets" / "gemma-2-2b.json").read_text())
    config.update(num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=256)
    path = tmp_path / "gemma.json"
    path.write_text(json.dumps(config))
    rows = {r.variant: r for r in api.predict(target="cpu", model=str(path), batch=2, context=64, ce_chunk=24, tp=2,
                                              optimizer="sgd", variant="dense,vocab-parallel")}
    assert all(r.status == "ok" for r in rows.values()), [r.error for r in rows.values()]
    assert (rows["dense"].peak_bytes, rows["vocab-parallel"].peak_bytes) == (895_884, 721_420)


@pytest.mark.needs("transformers")  # an hf: model is resolved (built on meta) before the split is refused
def test_transformers_models_and_builds_are_not_split(model):
    (row,) = api.predict(target="cpu", model=f"hf:{model}", batch=1, context=16, tp=2, variant="dense")
    assert row.status == "unsupported"
    assert row.error == "--tp splits cebench's decoder (a preset or a config.json), not a transformers model (hf:) " \
                        "(--tp 1)"


def test_a_loss_without_a_split_form_runs_on_the_head_gathered_whole(model):
    rows = {r.variant: r for r in api.predict(target="cpu", model=model, batch=1, context=38, ce_chunk=24, tp=2,
                                              optimizer="sgd", variant="chunked,vocab-parallel")}
    assert rows["chunked"].status == rows["vocab-parallel"].status == "ok"
    # the whole head (1001 × 64 fp32) gathered on each rank, and the whole vocabulary's logits chunks
    assert rows["chunked"].peak_bytes - rows["vocab-parallel"].peak_bytes > 1001 * 64 * 4


def test_split_and_sharded_a_world_of_four_is_predicted_per_rank(model):
    rows = {(r.fsdp, r.tp): r for r in api.predict(target="cpu", model=model, batch=2, context=38, ce_chunk=24,
                                                   optimizer="adamw", variant="vocab-parallel", fsdp="1,2", tp="1,2")}
    assert all(r.status == "ok" for r in rows.values()), [r.error for r in rows.values()]
    state = {key: r.model_state_bytes for key, r in rows.items()}
    assert state[2, 2] < state[1, 2] < state[1, 1] and state[2, 2] < state[2, 1] < state[1, 1]


def test_fit_answers_for_each_world_side_by_side(model):
    from cebench.render.fit import fit_note, fit_table

    fitted = api.fit(target="cpu", model=model, context=38, variant="dense", tp="1,2", budget="3MiB",
                     optimizer="sgd")
    answers = {f.config.tp: f.batch for f in fitted.fits}
    assert set(answers) == {1, 2} and answers[2] > answers[1] > 0
    # each answer's loss share: its peak beside its body step's at the same batch, as predict gives them
    for f in fitted.fits:
        (row,) = api.predict(target="cpu", model=model, context=38, variant="dense", tp=f.config.tp, batch=f.batch,
                             optimizer="sgd")
        assert (f.peak_bytes, f.body_peak_bytes) == (row.peak_bytes, row.body_peak_bytes)
        assert 0 < f.body_peak_bytes < f.peak_bytes
    assert "loss_share" in [c.key for c in fit_table(fitted).columns]
    note = fit_note(fitted)  # the ranks it speaks of are split by TP alone
    assert "with TP one rank's: rank 0's" in note and "with FSDP" not in note


def test_gpus_splits_each_world_into_fsdp_over_what_tp_leaves(model):
    grid = GridOptions(model=model, batch=2, gpus="8,64", tp="1,8", variant="dense").grid("cpu")
    assert sorted((p.fsdp, p.tp) for p in grid.expand()) == [(1, 8), (8, 1), (8, 8), (64, 1)]
    alone = GridOptions(model=model, batch=2, gpus=4, variant="dense").grid("cpu")
    assert [(p.fsdp, p.tp) for p in alone.expand()] == [(4, 1)]


@pytest.mark.parametrize(("grid", "param", "words"), [
    ({"gpus": "8", "fsdp": "2"}, "gpus", "give --gpus or --fsdp, not both"),
    ({"gpus": "8", "tp": "1,3"}, "tp", "3 does not divide --gpus 8"),
    ({"gpus": "0"}, "gpus", "must be a positive integer"),
    ({"gpus": "8", "model": None}, "gpus", "give --model too"),
])
def test_gpus_refuses_what_makes_no_world(model, grid, param, words):
    with pytest.raises(api.UsageError, match=words) as caught:
        api.predict(target="cpu", **{"model": model, "variant": "dense", **grid})
    assert caught.value.param == param


def test_explain_takes_one_world_size(model):
    with pytest.raises(api.UsageError, match="explain takes one value, not 4,8") as caught:
        api.explain(device="cpu", model=model, gpus="4,8", variant="dense")
    assert caught.value.param == "gpus"


@pytest.mark.slow
def test_a_split_steps_tokens_per_second_are_per_gpu(measured, model):
    # the TP group's two ranks share one step's tokens: a rate per GPU halves them
    for row in measured.values():
        assert row.tokens_per_s == pytest.approx(row.batch * row.context / 2 / (row.time_ms_median / 1e3))
    rows = api.predict(target="h100-80gb", model=model, batch=2, context=64, optimizer="sgd", variant="dense",
                       gpus=4, tp="1,2")
    assert [(r.fsdp, r.tp) for r in rows] == [(4, 1), (2, 2)]
    for row in rows:
        assert row.predicted_tokens_per_s == pytest.approx(2 * 64 / row.tp / (row.predicted_time_ms / 1e3))
    # the rate the collectives are costed at is stated: the H100's NVLink, one direction
    assert "time: collectives at 450 GB/s a direction, h100-80gb's link" in rows[1].note
    assert "tensor parallelism's each waited for" in rows[1].note
