"""torchtune's chunked-output loss, eager and with its recipes' `compile=True` (only the per-chunk
upcast + cross-entropy compiled): its value, its measured peaks against the predicted ones, and
what each holds at its peak on a GPU target, term by term."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cebench import api
from cebench.losses import torchtune, variants

GRID = {"batch": 2, "context": 64, "vocab": 1024, "d_model": 64}
N, VOCAB = 128, 1024
BLOCK = 512  # bytes: a CUDA allocation's rounding


def test_torchtunes_loss_is_the_mean_cross_entropy_over_real_targets():
    gen = torch.Generator().manual_seed(0)
    h, weight = torch.randn(37, 16, generator=gen), torch.randn(50, 16, generator=gen)
    targets = torch.randint(0, 50, (37,), generator=gen)
    targets[::5] = -100
    expected = F.cross_entropy(h @ weight.T, targets)
    torch.testing.assert_close(torchtune.chunked_output_loss(h, weight, targets), expected)


def test_the_compiled_twin_is_named_after_its_eager_one():
    assert variants.eager_twin("torchtune-compiled") == "torchtune"
    assert variants.get("torchtune-compiled").compiles and not variants.get("torchtune-compiled").compiled
    with pytest.raises(ValueError, match="eager twin"):
        variants.register(variants.Variant("nothing-compiled", "loss", "x:y", chunked=False, compiled=False,
                                           compiled_parts=True, summary=""))


@pytest.mark.compile
def test_measured_on_this_cpu_as_predicted(tmp_path):
    """The compiled helper is predicted as inductor's code runs it, to the byte; eager, a CPU
    counts the real targets with an int64 copy of the (N,) mask inside its sum kernel
    (`(targets != -100).sum()`), which no trace of ops sees: N × 8 B, at the forward's peak."""
    grid = {**GRID, "context": 128, "vocab": 4096, "variant": "torchtune,torchtune-compiled"}
    measured = {r.variant: r for r in api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "s.csv", **grid)}
    predicted = {r.variant: r for r in api.predict(target="cpu", **grid)}
    assert measured["torchtune-compiled"].peak_bytes == predicted["torchtune-compiled"].peak_bytes
    assert measured["torchtune"].peak_bytes - predicted["torchtune"].peak_bytes == 2 * 128 * 8
    assert measured["torchtune-compiled"].compile_s > 0


@pytest.mark.needs("triton")
@pytest.mark.compile
def test_on_a_gpu_the_compiled_loss_saves_no_fp32_chunk():
    """bf16 on an H100. Eager, the forward's peak holds the 8 bf16 logit chunks (the model's
    output list), every chunk's fp32 log-softmax saved for the backward, one fp32 upcast
    and 10 scalars. Compiled, the fp32 upcast lives inside the fused kernel and nothing fp32
    is saved: the peak is in the backward, which takes all 8 chunks' logit gradients before
    any projection's backward (the 8 projections ran first, so autograd reaches them last);
    it holds 6 of them after two projections' backward, with the two chunks' weight gradients
    and their sum, two chunks' h gradients and 2 scalars."""
    rows = {r.variant: r.peak_delta_bytes for r in api.predict(target="h100-80gb", dtype="bf16",
                                                               variant="torchtune,torchtune-compiled", **GRID)}
    chunk = N // torchtune.OUTPUT_CHUNKS * VOCAB
    assert rows["torchtune"] == 8 * chunk * 4 + chunk * 4 + 8 * chunk * 2 + 10 * BLOCK
    rows_per_chunk, d_model = N // torchtune.OUTPUT_CHUNKS, GRID["d_model"]
    assert rows["torchtune-compiled"] == (6 * chunk * 2 + 3 * VOCAB * d_model * 2 + 2 * rows_per_chunk * d_model * 2
                                          + 2 * BLOCK)
