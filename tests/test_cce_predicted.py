"""Cut Cross-Entropy (`cut-cross-entropy`) predicted on meta tensors.

CCE allocates its buffers with torch in Python and its Triton kernels write into them: the
trace follows that Python (cut-cross-entropy 25.1.1's `cce.py`, `cce_lse_forward.py`,
`indexed_dot.py`, `cce_backward.py`, `utils.py`) with every launch skipped
(`cebench.engine.triton_launches`), its one read of data answered from the point
(`(targets != ignore_index).nonzero()`, whose size, the count of real targets, sizes its
buffers: `cebench.engine.data_reads`), and its two `torch.compile(fullgraph=True)`
helpers run eagerly (`cebench.engine.compiled_helpers`). Its kernels do not run on this
CPU: Triton's interpreter does not implement libdevice, which they call.

`peak_by_hand` is what its code holds when its backward kernel is launched, its peak:
∇e and ∇c (`zeros_like`), their locks (one int32 per `nd = cdiv(d, 64)` columns per row,
rows rounded up to a multiple of nd), the forward's saved `lse` (B fp32, B the real
targets) and `logit_avg` (V fp32), the vocabulary's order (`argsort(logit_avg)` as int32;
its int64 indices freed before), the real targets' row numbers (`valids`, B int32, none
without padding), the loss and its upstream gradient.
"""
from __future__ import annotations

import importlib.util
import sys
import traceback
import types

import pytest
import torch

from cebench import api
from cebench.core import interpreter
from cebench.engine import compiled_helpers, triton_launches
from cebench.engine.data_reads import Answers, UnknownValue
from cebench.engine.tracker import StorageTracker
from cebench.losses import variants

needs_cce = pytest.mark.skipif(importlib.util.find_spec("cut_cross_entropy") is None
                               or importlib.util.find_spec("triton") is None,
                               reason="needs cut-cross-entropy and triton (`make install-peers`)")
CCE = "25.1.1"  # the version whose code these numbers follow
SHAPE = dict(batch=2, context=100, vocab=3000, d_model=96)  # N = 200; nd = 2 locks per row
KERNELS = "_cce_backward_kernel, _cce_lse_forward_kernel, _indexed_neg_dot_forward_kernel"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block(nbytes: int) -> int:
    """A GPU caching allocator's charge for a small request: a multiple of 512 B."""
    return cdiv(nbytes, 512) * 512


def peak_by_hand(n: int, vocab: int, d: int, itemsize: int, ignored: int, reduction: str) -> int:
    """CCE 25.1.1's peak Δ at its backward kernel's launch (every buffer under 10 MiB)."""
    kept, nd = n - ignored, cdiv(d, 64)
    grads = block(n * d * itemsize) + block(vocab * d * itemsize)
    locks = block(cdiv(kept, nd) * nd * 4) + block(cdiv(vocab, nd) * nd * 4)
    saved = block(kept * 4) + block(vocab * 4) + (block(kept * 4) if ignored else 0)  # lse, logit_avg, valids
    order = block(vocab * 4)
    # mean, sum: a scalar and its ones_like; none: the N-row loss (its upstream gradient is the step's input)
    loss = block(n * 4) if reduction == "none" else 2 * 512
    return grads + locks + saved + order + loss


@needs_cce
@pytest.mark.parametrize(("ignore_frac", "reduction", "softcap", "dtype"),
                         [(0.0, "mean", 0.0, "bf16"), (0.25, "mean", 30.0, "bf16"), (0.25, "sum", 0.0, "fp16"),
                          (0.0, "none", 30.0, "bf16"), (0.25, "none", 0.0, "bf16")])
def test_cce_predicted_is_its_buffers_by_hand(ignore_frac, reduction, softcap, dtype):
    point = dict(SHAPE, ignore_frac=ignore_frac, reduction=reduction, softcap=softcap, dtype=dtype)
    n = SHAPE["batch"] * SHAPE["context"]
    ignored = round(n * ignore_frac)
    (row,) = api.predict(variant="cut-cross-entropy", target="h100-80gb", **point)
    assert row.status == "ok", row.error
    assert row.peak_delta_bytes == peak_by_hand(n, SHAPE["vocab"], SHAPE["d_model"], 2, ignored, reduction)
    inputs = block(n * SHAPE["d_model"] * 2) + block(SHAPE["vocab"] * SHAPE["d_model"] * 2) + block(n * 8)
    upstream = block(n * 4) if reduction == "none" else 0
    assert row.base_bytes == inputs + upstream  # no cuBLAS workspace: no matmul is torch's
    assert row.flops is None and row.predicted_floor_ms is None
    compiled = "softcapping, sort_logit_avg" if softcap else "sort_logit_avg"
    assert row.note == (f"Triton launches skipped ({KERNELS}): their buffers are cut-cross-entropy {CCE}'s "
                        f"Python, followed on meta; torch.compile'd {compiled} ran eagerly; time not predicted: its "
                        "matmuls run inside its Triton kernels, which the time model does not count")
    assert row.predicted_time_ms is None


@needs_cce
def test_kept_gradients_add_to_the_base_not_the_peak():
    fresh, kept = api.predict(variant="cut-cross-entropy", target="a100-80gb", dtype="bf16", grads="none,keep",
                              **SHAPE)
    n = SHAPE["batch"] * SHAPE["context"]
    grads = block(n * SHAPE["d_model"] * 2) + block(SHAPE["vocab"] * SHAPE["d_model"] * 2)
    assert kept.base_bytes - fresh.base_bytes == grads
    assert kept.peak_delta_bytes == fresh.peak_delta_bytes  # its new ∇e, ∇c, then added into .grad


@needs_cce
def test_fit_answers_for_cce_alone_and_in_a_model():
    alone = api.fit(variant="dense,cut-cross-entropy", target="h100-80gb", context=1024, vocab=128256,
                    d_model=4096, dtype="bf16", max_batch=64)
    assert {f.config.variant: f.batch for f in alone.fits} == {"dense": 50, "cut-cross-entropy": 64}
    inside = api.fit(variant="cut-cross-entropy", target="h100-80gb", model="llama-3.2-1b", context=2048)
    (fitted,) = inside.fits
    assert not inside.not_fitted and fitted.batch > 0 and fitted.peak_bytes <= inside.budget


@needs_cce
def test_cce_says_why_it_cannot_run_on_a_cpu():
    reason = variants.get("cut-cross-entropy").unsupported_reason("cpu")
    assert reason is not None and "libdevice" in reason
    (row,) = api.predict(variant="cut-cross-entropy", target="cpu", dtype="bf16", **SHAPE)
    assert row.status == "unsupported" and "libdevice" in row.error


@pytest.mark.checked_triton
@needs_cce
@pytest.mark.skipif(interpreter.has_gpu_nodes(), reason="with a GPU, Triton kernels run compiled")
def test_tritons_interpreter_cannot_run_cce_on_a_cpu():
    """What `devices_reason` says: the forward kernel's log-sum-exp calls libdevice's log1p, a
    stub without a body under the interpreter (it returns None). Should a Triton run it,
    this fails: then CCE could be measured on a CPU, as Liger is."""
    interpreter.enable()
    from cut_cross_entropy import linear_cross_entropy
    from triton.runtime.errors import InterpreterError

    h = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(50, 64, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(InterpreterError) as raised:
        linear_cross_entropy(h, weight, torch.randint(0, 50, (8,)), impl="cce")
    cause: BaseException = raised.value
    while cause.__cause__ is not None:
        cause = cause.__cause__
    assert isinstance(cause, AttributeError) and "'NoneType' object has no attribute 'dtype'" in str(cause)
    assert "tl_logaddexp" in {frame.name for frame in traceback.extract_tb(cause.__traceback__)}  # log1p's None


def test_the_count_of_real_targets_answers_nonzero():
    answers = Answers()
    targets = torch.empty(10, dtype=torch.long, device="meta")
    answers.labels(targets, ignored=3, ignore_index=-100)
    with answers:
        rows = (targets != -100).nonzero()
        assert rows.shape == (7, 1) and rows.dtype == torch.long
        with pytest.raises(UnknownValue, match="does not know"):
            torch.empty(4, dtype=torch.bool, device="meta").nonzero()


def test_a_peers_compiled_helper_runs_eagerly_and_is_named(monkeypatch):
    package = types.ModuleType("cebench_test_peer")

    def doubled(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    package.doubled = torch.compile(doubled, fullgraph=True)
    monkeypatch.setitem(sys.modules, package.__name__, package)
    ran: set[str] = set()
    x = torch.empty(3, device="meta")
    with compiled_helpers.eager([package.__name__], ran), StorageTracker() as tracker:
        assert package.doubled(x).shape == (3,)
    assert ran == {"doubled"} and tracker.peak == 12  # its one op, seen by the tracker
    assert package.doubled is not doubled and hasattr(package.doubled, "_torchdynamo_orig_callable")  # restored
    skipped = triton_launches.Skipped({"kernel"}, {"cut_cross_entropy"}, {"doubled"})
    assert skipped.note().endswith("; torch.compile'd doubled ran eagerly")
