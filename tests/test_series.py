"""Predictions whose cost does not grow with the loop they predict (`cebench.engine.series`):
a step extrapolated from three small traces equals its whole trace to the byte and the FLOP,
for every batch of every residue, on every kind of target (CUDA's 2 MiB segments included),
for the loss alone, the sampler and a model's step; a huge batch costs three traces; a
variant that does not declare its loop is traced whole."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cebench.core.config import Config
from cebench.engine import series, trace
from cebench.engine.trace import counted, flop_counter, predict_peak
from cebench.run.grid import GridOptions

SMALL = {"model_type": "llama", "vocab_size": 211, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 6,
         "num_key_value_heads": 2, "intermediate_size": 40, "tie_word_embeddings": False}


def point(target: str, **grid: str) -> Config:
    return GridOptions(**{"batch": "1", **grid}).grid(target).expand()[0]


def whole(config: Config) -> tuple[int, int, int | None, int | None]:
    counter = flop_counter()
    reading = predict_peak(config, counter)
    return reading.base_bytes, reading.peak_bytes, reading.state_bytes, counted(counter)


def extrapolated(config: Config) -> tuple[int, int, int | None, int | None] | None:
    found = series.series(config)
    if found is None:
        return None
    reading, flops = found.reading(series.size(config))
    return reading.base_bytes, reading.peak_bytes, reading.state_bytes, flops


def assert_every_batch_equal(config: Config, periods: int = 2) -> None:
    """Every batch up to `periods` periods beyond the samples: a loss alone's period is in
    rows, a batch adds `context` of them."""
    step = series.period(config)
    assert step is not None
    per_batch = 1 if config.has_model else config.context
    checked = 0
    for batch in range(1, (series.SAMPLES + periods) * step // per_batch + 2):
        at = replace(config, batch=batch)
        got, value = extrapolated(at), series.size(at)
        if got is None:  # below the samples: traced whole
            assert value < value % step + series.SAMPLES * step
            continue
        assert got == whole(at), batch
        checked += 1
    assert checked >= periods


LOSS = {"context": "6", "vocab": "50", "d_model": "8", "ce_chunk": "10"}


@pytest.mark.parametrize(("variant", "target", "extra"), [
    ("chunked", "cpu", {}),
    ("chunked", "cpu", {"grads": "keep"}),
    ("chunked", "cuda", {"retain_graph": "yes", "dtype": "bf16"}),
    ("chunked", "h100-80gb", {"dtype": "bf16"}),
    pytest.param("torch-lce", "cpu", {"reduction": "none"}, marks=pytest.mark.torch_lce),
    pytest.param("torch-lce", "h100-80gb", {"dtype": "bf16", "grads": "keep"}, marks=pytest.mark.torch_lce),
    ("dense", "cuda", {"label_smoothing": "0.1", "dtype": "bf16"}),
    ("chunked-sample", "cpu", {"workload": "sample"}),
])
def test_the_loss_alone_extrapolated_equals_its_whole_trace(variant, target, extra):
    """Context 6 and chunks of 10 rows: a period is 10 rows, the last chunk partial in four
    of the five residues a batch of 6 rows leaves."""
    assert_every_batch_equal(point(target, variant=variant, **LOSS, **extra))


def test_cuda_segments_are_charged_at_the_batch_asked_for():
    """Chunks of 64 rows × 50,000 fp32 logits (12.8 MB): each a 2 MiB-rounded segment, whose
    rounding is not affine in the batch, while the rows' bytes are."""
    config = point("cuda", variant="chunked", context="24", vocab="50000", d_model="8", ce_chunk="64", dtype="bf16")
    assert series.period(config) == 64  # rows
    for batch in (37, 61, 93, 160):
        at = replace(config, batch=batch)
        assert extrapolated(at) == whole(at), batch


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(SMALL))
    return str(path)


@pytest.mark.parametrize(("variant", "target", "checkpointing"), [
    ("chunked", "cpu", "blocks"), ("chunked", "h100-80gb", "none"), ("dense", "h100-80gb", "blocks"),
])
def test_a_model_step_extrapolated_equals_its_whole_trace(small, variant, target, checkpointing):
    dtype = "fp32" if target == "cpu" else "bf16"
    config = point(target, variant=variant, model=small, context="6", ce_chunk="10", dtype=dtype,
                   activation_checkpointing=checkpointing)
    assert_every_batch_equal(config, periods=1)


def test_a_huge_batch_costs_three_small_traces(monkeypatch):
    """`fit --ce-chunk 4` at a batch of 10⁵ chunks: three traces of a few chunks each."""
    traced: list[int] = []
    real = series.trace

    def counting(config: Config, *args, **kwargs):
        traced.append(config.batch)
        return real(config, *args, **kwargs)

    monkeypatch.setattr(series, "trace", counting)
    series._batch_series.cache_clear()
    config = point("cpu", variant="chunked", context="8", vocab="512", d_model="16", ce_chunk="4", batch="50001")
    reading, flops = series.predicted(config)
    assert traced == [16, 20, 24]  # rows: N = 400,008 ≡ 0 (mod 4): four periods (4 chunks), then one more each
    assert flops == 6 * 50001 * 8 * 512 * 16 * 4 // 3  # 2 FLOPs per multiply-add: forward, recompute, 2 backward
    # On a CPU each checkpointed chunk keeps the RNG state it saved (5,056 B) until the backward reaches it:
    # 100,002 of them; beside them two (N, d_model) fp32 buffers: h's gradient and the chunk's slice_backward
    # zeros, which the autograd engine adds into it in place; and one chunk's transients, less than three fp32
    # (4, 512) logits buffers.
    chunks, h_bytes = 50001 * 8 // 4, 50001 * 8 * 16 * 4
    rest = reading.peak_bytes - reading.base_bytes - chunks * 5056 - 2 * h_bytes
    assert 0 < rest < 3 * 4 * 512 * 4


def test_variants_that_do_not_declare_their_loop_are_traced_whole(tmp_path):
    """A user's loss: its loop, if it has one, is its own."""
    loss = tmp_path / "mine.py"
    loss.write_text("import torch.nn.functional as F\n"
                    "def ce(h, weight, targets, ce_chunk):\n"
                    "    return F.cross_entropy(h @ weight.T, targets)\n")
    config = point("h100-80gb", variant=f"{loss}:ce", context="6", vocab="50", d_model="8", dtype="bf16",
                   batch="1000")
    assert series.period(config) is None
    assert series.predicted(config) == (predict_peak(config), trace.count_flops(config))


@pytest.mark.torch_lce
@pytest.mark.filterwarnings("ignore:linear_cross_entropy. ``options`` ignored")  # label smoothing: full logits
@pytest.mark.parametrize(("target", "extra"), [
    ("cpu", {}), ("cuda", {"reduction": "none"}), ("h100-80gb", {"label_smoothing": "0.1"}),
    ("h100-80gb", {"grads": "keep"}),
])
def test_torch_lce_auto_is_torch_lce_at_the_chunk_torch_picks_and_is_extrapolated(target, extra):
    """torch resolves `LinearCrossEntropyOptions()` to a chunk from N, vocab and d_model, then
    runs as torch-lce with that chunk: the same trace at every N, so auto is extrapolated."""
    dtype = "fp32" if target == "cpu" else "bf16"
    for batch in (37, 1000, 4097):
        config = point(target, variant="torch-lce-auto", batch=str(batch), context="3", vocab="500", d_model="24",
                       dtype=dtype, **extra)
        same = series.traced_as(config)
        assert same.variant == "torch-lce" and same.ce_chunk and whole(config) == whole(same)
        assert series.period(config) == same.ce_chunk
        got, flops = series.predicted(config)
        assert (got.base_bytes, got.peak_bytes, got.state_bytes, flops) == whole(config)


def test_insertions_are_found_as_repeated_runs():
    s0 = list("ab" + "xyz" * 3 + "c" + "pq" * 2 + "d")
    s1 = list("ab" + "xyz" * 4 + "c" + "pq" * 3 + "d")
    runs = series._insertions(s0, s1)
    assert [length for _, _, length in runs] == [3, 2]
    assert runs[0][0] == 2  # as early as the loop allows
    with pytest.raises(series.NotRepeating):
        series._insertions(list("abc"), list("abxc"))  # an insertion that repeats nothing
    with pytest.raises(series.NotRepeating):
        series._insertions(list("abcc"), list("abbc"))  # not an insertion at all


def test_the_variants_declaring_their_loop():
    from cebench.losses import variants

    assert {v.name for v in variants.listed() if v.affine_in_rows and not v.compiled} == {
        "dense", "chunked", "vocab-parallel", "torch-lce", "hf-loss", "dense-sample", "chunked-sample"}


def test_a_user_build_is_traced_whole(tmp_path: Path):
    build = tmp_path / "build.py"
    build.write_text("import torch\n"
                     "def build():\n"
                     "    body = torch.nn.Embedding(50, 8)\n"
                     "    return body, body.weight\n")
    config = point("cpu", variant="chunked", model=f"{build}:build", context="6", ce_chunk="10")
    assert series.period(config) is None


# Seven blocks: extrapolated along them from traces of 2, 3 and 4 (`series.layers`).
DEEP = {"hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 7, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 101}
DEEP_TYPES = {
    "llama": {"model_type": "llama", **DEEP},
    "gemma2": {"model_type": "gemma2", **DEEP, "head_dim": 8, "query_pre_attn_scalar": 8,
               "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
    "gpt2": {"model_type": "gpt2", "n_embd": 24, "n_layer": 7, "n_head": 4, "n_positions": 16, "vocab_size": 101},
}


def deep(tmp_path: Path, model_type: str, blocks: int = 7) -> str:
    """A config file of `model_type` with `blocks` blocks."""
    config = DEEP_TYPES[model_type]
    path = tmp_path / f"{model_type}-{blocks}.json"
    path.write_text(json.dumps({**config, ("n_layer" if "n_layer" in config else "num_hidden_layers"): blocks}))
    return str(path)


@pytest.mark.parametrize(("model_type", "variant", "target", "checkpointing", "optimizer"), [
    ("llama", "chunked", "cpu", "blocks", "adamw"),
    ("llama", "dense", "h100-80gb", "none", "adamw"),
    pytest.param("llama", "torch-lce-auto", "h100-80gb", "blocks", "sgd", marks=pytest.mark.torch_lce),
    ("gemma2", "dense", "cpu", "none", "none"),  # its softcap of 30 applied
    ("gpt2", "dense", "cuda", "blocks", "adamw"),
    ("llama", "chunked", "h100-80gb", "blocks", "adamw-in-backward"),  # each block's parameters stepped apart
    ("gpt2", "dense", "cpu", "none", "adamw-fused"),
])
def test_a_model_step_extrapolated_along_its_blocks_equals_its_whole_trace(
        tmp_path, model_type, variant, target, checkpointing, optimizer):
    """AdamW loops over every parameter, checkpointing saves every block's inputs (and on a
    CPU its RNG state), a tied head (gpt2) is one parameter: every variant's step, any model."""
    dtype = "fp32" if target == "cpu" else "bf16"
    config = point(target, variant=variant, model=deep(tmp_path, model_type), context="6", ce_chunk="10",
                   dtype=dtype, activation_checkpointing=checkpointing, optimizer=optimizer, batch="3")
    assert series.layers(config) == 7
    got, flops = series.predicted(config)
    assert (got.base_bytes, got.peak_bytes, got.state_bytes, flops) == whole(config)


def test_blocks_and_batch_extrapolated_together_equal_the_whole_trace(tmp_path, monkeypatch):
    """A chunked loss at a large batch inside a deep model: the batch's three samples are each
    written out from three traces of 2, 3 and 4 blocks; nothing is traced with 7."""
    config = point("h100-80gb", variant="chunked", model=deep(tmp_path, "llama"), context="6", ce_chunk="10",
                   dtype="bf16", activation_checkpointing="blocks")
    traced: list[tuple[int, int | None]] = []
    real = series.trace

    def counting(config: Config, *args, **kwargs):
        traced.append((config.batch, kwargs.get("layers")))
        return real(config, *args, **kwargs)

    monkeypatch.setattr(series, "trace", counting)
    for batch in (61, 64):  # two residues of a period of 5 sequences
        at = replace(config, batch=batch)
        got, flops = series.predicted(at)
        assert (got.base_bytes, got.peak_bytes, got.state_bytes, flops) == whole(at), batch
    assert {layers for _, layers in traced} == {2, 3, 4}
    assert len(traced) == 2 * 3 * 3  # per residue: three batches, each three block counts


def test_a_shallow_model_is_not_extrapolated_along_its_blocks(small):
    assert series.layers(point("cpu", variant="dense", model=small, context="6")) is None


def test_a_billion_blocks_cost_what_seven_do(tmp_path, monkeypatch):
    """Parameters are counted on decoders of no block and one, steps traced with 2, 3 and 4:
    a config of 10⁹ blocks answers in the time 7 do, its state exactly affine in the blocks."""
    from cebench.models.decoder import Decoder
    from cebench.models.model import resolve_model

    seven = deep(tmp_path, "llama")
    decoder = Decoder(resolve_model(seven).spec, device="meta")
    assert resolve_model(seven).n_params == sum(p.numel() for p in decoder.parameters())
    traced: list[int | None] = []
    real = series.trace

    def counting(config: Config, *args, **kwargs):
        traced.append(kwargs.get("layers"))
        return real(config, *args, **kwargs)

    monkeypatch.setattr(series, "trace", counting)
    grid = {"variant": "chunked", "context": "6", "ce_chunk": "10", "dtype": "bf16", "batch": "3"}
    billion, _ = series.predicted(point("h100-80gb", model=deep(tmp_path, "llama", 10**9), **grid))
    assert set(traced) == {2, 3, 4}
    eight = deep(tmp_path, "llama", 8)
    seven_state, eight_state = (whole(point("h100-80gb", model=m, **grid))[2] for m in (seven, eight))
    assert billion.state_bytes == seven_state + (10**9 - 7) * (eight_state - seven_state)

