"""Liger-Kernel's fused linear cross-entropy (`liger-kernel`) predicted on meta tensors.

Liger allocates its buffers with torch in Python and its Triton kernels write into them:
the trace follows that Python with every launch skipped (`cebench.engine.triton_launches`)
and its reads of data answered from the point (`cebench.engine.data_reads`: the count of
targets that are not padding, which `round(N × ignore_frac)` fixes; the upstream gradient
1 of a scalar loss). On this CPU its kernels run under Triton's interpreter, which is what
`sweep` measures; the prediction for `cpu` follows the same (host) branches of Liger's code.

One residue, the interpreter's and not Liger's: `GridExecutor` (triton/runtime/interpreter.py)
copies a launch's tensor arguments to the host and back through recursive closures
(`_to_cpu`, `_from_cpu`), each holding a dict of the arguments' storages: a reference
cycle, so a launch's arguments outlive it until Python's cyclic garbage collector runs.
The logits chunk Liger passes to its kernel (`X_ptr`) is the one argument that would
otherwise be freed: the measured peak holds `k` chunks' logits more than Liger's code does,
`k` set by where the collector happens to run (the measurement collects garbage before the
step, so `k` is the same at every run of a shape). Collecting after each launch (as a GPU's
compiled launcher needs no collector to do) removes it: prediction = measurement to the byte.

A kernel-internal temporary meta never makes: on the CPU `(target != ignore_index).sum()`
sums the bool mask through an int64 copy (N × 8 B, inside `aten::sum`). It never reaches
the peak: the chunk loop holds a logits chunk of about N × H × 4 B (Liger sizes its chunks
so) besides the same buffers, and H ≥ 2.
"""
from __future__ import annotations

import gc
import importlib.util
import math
import os
import subprocess
import sys

import pytest

from cebench import api
from cebench.core import interpreter
from cebench.engine import triton_launches

pytestmark = [pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None
                                 or importlib.util.find_spec("triton") is None,
                                 reason="needs liger-kernel and triton (`make install-peers`)")]
LIGER = "0.8.5"  # the version whose code these numbers follow
COMMON = dict(dtype="fp32", ignore_frac=0.25, reduction="sum")
# shape → chunks' logits the interpreter's reference cycle still holds at the measured peak
SHAPES = [(dict(batch=2, context=32, vocab=500, d_model=16), 1),  # 32 chunks of 2 rows
          (dict(batch=4, context=64, vocab=1000, d_model=32), 0),  # 32 chunks of 8 rows
          (dict(batch=3, context=50, vocab=700, d_model=16), 0),  # N = 150: a last chunk of 2 rows
          (dict(batch=2, context=32, vocab=500, d_model=16, reduction="none"), 2)]  # gradients in its backward


def chunk_rows(n: int, vocab: int, d_model: int) -> int:
    """Liger 0.8.5's chunk size (fused_linear_cross_entropy_forward): transient logits bounded
    by about N × H elements, the rows a power of two, at most N."""
    inc_factor = -(-vocab // d_model)
    return min(2 ** math.ceil(math.log2(-(-n // inc_factor))), n)


def measure_and_predict(shape: dict, tmp_path) -> tuple:
    point = {**COMMON, **shape}
    (predicted,) = api.predict(variant="liger-kernel", target="cpu", **point)
    (measured,) = api.sweep(variant="liger-kernel", device="cpu", repeats=1, warmup=1, threads=1,
                            out=tmp_path / "m.csv", **point)
    assert predicted.status == measured.status == "ok", (predicted.error, measured.error)
    return predicted, measured


@pytest.mark.checked_triton
@pytest.mark.skipif(interpreter.has_gpu_nodes(), reason="with a GPU, Triton kernels run compiled")
@pytest.mark.parametrize(("shape", "held"), SHAPES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items())
                         if isinstance(s, dict) else f"held{s}")
def test_liger_predicted_equals_measured_on_cpu_but_the_interpreters_cycle(shape, held, tmp_path):
    predicted, measured = measure_and_predict(shape, tmp_path)
    n = shape["batch"] * shape["context"]
    logits_chunk = chunk_rows(n, shape["vocab"], shape["d_model"]) * shape["vocab"] * 4  # fp32
    assert predicted.base_bytes == measured.base_bytes
    assert measured.peak_delta_bytes - predicted.peak_delta_bytes == held * logits_chunk
    # logits, ∇h, ∇weight; with reduction none the forward computes the logits alone and the backward all three
    matmuls = 4 if shape.get("reduction") == "none" else 3
    assert predicted.flops == measured.flops == 2 * matmuls * n * shape["vocab"] * shape["d_model"]
    assert predicted.note.startswith("Triton launches skipped (liger_cross_entropy_kernel)")


@pytest.mark.checked_triton
@pytest.mark.skipif(interpreter.has_gpu_nodes(), reason="with a GPU, Triton kernels run compiled")
@pytest.mark.parametrize("shape", [SHAPES[0][0], SHAPES[3][0]], ids=["sum", "none"])
def test_without_the_cycle_prediction_is_measurement_to_the_byte(shape, tmp_path, monkeypatch):
    from triton.runtime.interpreter import InterpretedFunction

    run = InterpretedFunction.run

    def collected(self, *args, **kwargs):
        out = run(self, *args, **kwargs)
        gc.collect(0)  # the launch's arguments, held by the interpreter's reference cycle (young), go now
        return out

    monkeypatch.setattr(InterpretedFunction, "run", collected)
    predicted, measured = measure_and_predict(shape, tmp_path)
    assert (predicted.base_bytes, predicted.peak_delta_bytes) == (measured.base_bytes, measured.peak_delta_bytes)


def test_liger_for_an_h100_at_the_llama_3_8b_head():
    """N = 8 × 1024 = 8,192 tokens, H = 4,096, V = 128,256, bf16, for an H100. Liger 0.8.5's
    `fused_linear_cross_entropy_forward` on the CUDA branch (its code sees `cuda:0` and
    capability 9.0 through the device view):

    - chunks: inc_factor = cdiv(V, H) = 32, chunk_size = next_power_of_2(cdiv(N, 32)) = 256
      rows, 32 chunks;
    - `grad_input = zeros_like(h)`: N × H × 2 = 64 MiB; `grad_weight = zeros_like(weight)`
      (bf16: accum_dtype None): V × H × 2 = 1,050,673,152 B;
    - `loss_1d`: N fp32 = 32 KiB; `target_mask`: N bool = 8 KiB (its `.sum().item()`, the
      count of real targets, answered: N − round(N × 0) = N);
    - `logits_storage`: (256, V) bf16 = 65,667,072 B, made once since `_can_use_mm_out` holds
      (cuda, grad mode off inside the autograd Function, matching dtypes): each chunk's
      logits are `torch.mm(..., out=)` into it, the kernel turns them into their gradient in
      place, ∇h is `mm(out=)` into `grad_input`'s rows and ∇weight `addmm(out=grad_weight)`
      (capability ≥ 8, bf16): nothing else per chunk. All five are live together in the loop.
    - the backward: `torch.equal(grad_output, 1.0)` is True (a scalar loss), so no kernel
      runs and the forward's gradients are the inputs' `.grad`.

    The base is h, weight, targets and one 32 MiB cuBLAS workspace (the forward's thread
    ran the matmuls; the backward none). FLOPs: 3 matmuls of N × V × H."""
    n, h, v = 8 * 1024, 4096, 128256
    (row,) = api.predict(variant="liger-kernel", target="h100-80gb", batch=8, context=1024, vocab=v, d_model=h,
                         dtype="bf16")
    assert row.status == "ok", row.error
    assert chunk_rows(n, v, h) == 256
    assert row.peak_delta_bytes == n * h * 2 + v * h * 2 + 256 * v * 2 + n * 4 + n == 1_183_490_048
    assert row.base_bytes == n * h * 2 + v * h * 2 + n * 8 + 32 * 2**20
    assert row.flops == 2 * 3 * n * v * h
    assert row.note == ("Triton launches skipped (liger_cross_entropy_kernel): their buffers are "
                        f"liger-kernel {LIGER}'s Python, followed on meta")
    # the host branch is another: a logits chunk per chunk and a V × H temporary for ∇weight
    (cpu,) = api.predict(variant="liger-kernel", target="cpu", batch=8, context=1024, vocab=v, d_model=h,
                         dtype="bf16")
    assert cpu.status == "ok" and cpu.peak_delta_bytes > row.peak_delta_bytes


def test_fit_answers_for_liger_in_a_model():
    fitted = api.fit(variant="dense,liger-kernel", target="h100-80gb", model="llama-3.2-1b", context=2048)
    batches = {f.config.variant: f.batch for f in fitted.fits}
    assert not fitted.not_fitted and batches["liger-kernel"] > batches["dense"] > 0


def test_the_note_says_when_the_installed_liger_is_another(monkeypatch):
    skipped = triton_launches.Skipped({"liger_cross_entropy_kernel"}, {"liger_kernel"})
    from dataclasses import replace

    from cebench.losses import variants

    liger = variants.REGISTRY["liger-kernel"]
    monkeypatch.setitem(variants.REGISTRY, "liger-kernel", replace(liger, peer=replace(liger.peer, checked=("0.0.1",
                                                                                                          "0.0.2"))))
    assert "(cebench checked 0.0.1, 0.0.2: its buffers may differ)" in skipped.note()
    assert triton_launches.Skipped().note() == ""


def test_a_read_of_an_unknown_value_is_an_error_not_a_guess():
    import torch

    from cebench.engine.data_reads import Answers, UnknownValue

    answers = Answers()
    targets = torch.empty(10, dtype=torch.long, device="meta")
    answers.labels(targets, ignored=3, ignore_index=-100)
    with answers.data_factories(), answers:
        assert (targets != -100).sum().item() == 7 and (targets == -100).sum().item() == 3
        assert torch.equal(torch.ones_like(torch.empty((), device="meta")), torch.tensor(1.0, device="meta"))
        assert not torch.equal(torch.ones(2, device="meta"), torch.ones(3, device="meta"))
        assert torch.tensor(2.0).item() == 2.0  # a host tensor's data is its own
        with pytest.raises(UnknownValue, match="does not know"):
            torch.empty(3, device="meta").sum().item()
        loss = torch.zeros(4, device="meta")
        loss.add_(1)  # written: no longer known
        with pytest.raises(UnknownValue):
            bool(loss.sum())


def test_the_reads_of_older_liger_releases_are_answered_from_what_is_known():
    """Liger 0.2.1 to 0.4.2 also count each chunk's real targets (a slice of the targets: known
    where none or all are padding, not where the padding's places decide) and branch on 0-dim
    tensors computed from known values (`n / total if total > 0`, `torch.ne(grad_output, 1.0)`):
    a pointwise op of constants is run on one host element of each."""
    import torch

    from cebench.engine.data_reads import Answers, UnknownValue

    answers = Answers()
    targets, padded, padding = (torch.empty(10, dtype=torch.long, device="meta") for _ in range(3))
    answers.labels(targets, ignored=0, ignore_index=-100)
    answers.labels(padded, ignored=3, ignore_index=-100)
    answers.labels(padding, ignored=10, ignore_index=-100)
    with answers.data_factories(), answers:
        total = (targets != -100).sum()
        assert (targets[2:6] != -100).sum().item() == 4 and (padding[2:6] != -100).sum().item() == 0
        assert bool(total > 0) and (4 / total).item() == torch.tensor(4 / 10, dtype=torch.float32).item()
        assert not bool(torch.ne(torch.ones((), device="meta"), torch.tensor(1.0, device="meta")))
        with pytest.raises(UnknownValue):
            (padded[2:6] != -100).sum().item()
        with pytest.raises(UnknownValue):  # a pointwise op of an unknown value is unknown
            bool(torch.empty((), device="meta") > 0)


def test_triton_is_not_imported_for_a_step_that_needs_it_not():
    code = ("import sys; from cebench.engine.triton_launches import skipped\n"
            "with skipped() as s: pass\n"
            "print('triton' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != interpreter.ENV}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
