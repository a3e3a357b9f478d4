"""The peers predicted on meta tensors. torch's `F.linear_cross_entropy` (`torch-lce`) is a
custom op whose kernel is Python: the tracker runs that Python, so its chunk buffers are
seen, and its prediction for this CPU equals its measurement to the byte (and its FLOPs
are the 3 matmuls it does). For a GPU target its code sees the target device and takes its
CUDA branch."""
from __future__ import annotations

import textwrap

import pytest
import torch

from cebench import api
from cebench.core import devices
from cebench.engine.device_view import seen_as

pytestmark = pytest.mark.skipif(not hasattr(torch.nn.functional, "linear_cross_entropy"),
                                reason="torch-lce needs torch ≥ 2.13")
SHAPES = [dict(batch=4, context=64, vocab=3000, d_model=32, ce_chunk=64),
          dict(batch=3, context=50, vocab=1000, d_model=16, ce_chunk=64, reduction="sum"),  # N not a multiple
          dict(batch=2, context=64, vocab=1000, d_model=16, ce_chunk=32, reduction="none"),  # its second op
          dict(batch=2, context=64, vocab=1000, d_model=16, ce_chunk=32, ignore_frac=0.25),
          dict(batch=2, context=64, vocab=1000, d_model=16, ce_chunk=256)]  # one chunk


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_torch_lce_predicted_equals_measured_on_cpu(shape, tmp_path):
    (predicted,) = api.predict(variant="torch-lce", target="cpu", **shape)
    (measured,) = api.sweep(variant="torch-lce", device="cpu", repeats=1, warmup=1, threads=1,
                            out=tmp_path / "m.csv", **shape)
    assert predicted.status == measured.status == "ok", (predicted.error, measured.error)
    assert (predicted.base_bytes, predicted.peak_delta_bytes) == (measured.base_bytes, measured.peak_delta_bytes)
    n = shape["batch"] * shape["context"]
    # 3 matmuls of N × vocab × d_model (logits, ∇h, ∇weight, the last accumulated in place by addmm_); with
    # reduction none its backward computes the logits again (4)
    matmuls = 4 if shape.get("reduction") == "none" else 3
    assert predicted.flops == measured.flops == 2 * matmuls * n * shape["vocab"] * shape["d_model"]


def test_torch_lce_sees_the_gpu_it_is_predicted_for():
    """Its buffers follow `input.device.type == "cuda"`: a GPU target's prediction takes that
    branch (an fp32 buffer more than on the host), inside a model's step too."""
    shape = dict(batch=2, context=64, vocab=1000, d_model=16, ce_chunk=32, dtype="bf16")
    (cpu,) = api.predict(variant="torch-lce", target="cpu", **shape)
    (gpu,) = api.predict(variant="torch-lce", target="h100-80gb", **shape)
    assert cpu.status == gpu.status == "ok" and gpu.peak_delta_bytes > cpu.peak_delta_bytes
    step = dict(target="h100-80gb", model="llama-3.2-1b", batch=1, context=256, ce_chunk=256)
    (lce,), (dense,) = api.predict(variant="torch-lce", **step), api.predict(variant="dense", **step)
    assert lce.status == dense.status == "ok" and lce.body_peak_bytes <= lce.step_peak_bytes <= dense.step_peak_bytes


def test_the_device_view_is_the_peers_alone_and_ends_with_its_block():
    x = torch.empty(4, device="meta")
    with seen_as(devices.get("cuda")):
        made = torch.zeros(2, device="cuda:0")  # a GPU tensor asked for inside is made on meta
        assert made.device.type == "meta" and x.device.type == "meta"  # this module is no peer
        namespace = {"__name__": "liger_kernel.ops.example", "x": x}
        exec("seen = x.device", namespace)  # code of a peer's module sees the target
        assert namespace["seen"] == torch.device("cuda", 0)
    exec("after = x.device", namespace)
    assert namespace["after"].type == "meta" and torch.Tensor.new_zeros is torch._C.TensorBase.new_zeros


PYTHON_OP_BODY = '''
import torch
from torch import nn


@torch.library.custom_op("cebench_test::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty(*x.shape[:-1], 4 * x.shape[-1], dtype=x.dtype, device=x.device)  # an internal buffer
    y[..., : x.shape[-1]] = x
    return y[..., : x.shape[-1]] * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)


twice.register_autograd(lambda ctx, grad: grad * 2)


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.mix = nn.Embedding(97, 16), nn.Linear(16, 16)

    def forward(self, ids):
        return self.mix(twice(self.embed(ids)))


def build():
    return Body(), nn.Parameter(torch.randn(97, 16) * 0.1)
'''


def test_a_python_custom_op_in_a_body_is_predicted_with_its_buffers(tmp_path):
    path = tmp_path / "python_op.py"
    path.write_text(textwrap.dedent(PYTHON_OP_BODY))
    spec = f"{path}:build"
    step = dict(variant="dense", batch=2, context=5, model=spec, optimizer="sgd")  # AdamW: 12 B of Python numbers
    (predicted,) = api.predict(target="cpu", **step)
    (measured,) = api.sweep(device="cpu", repeats=1, warmup=1, threads=1, out=tmp_path / "m.csv", **step)
    assert predicted.status == measured.status == "ok", predicted.error
    assert predicted.step_peak_bytes == measured.step_peak_bytes


@pytest.mark.filterwarnings("ignore:linear_cross_entropy:UserWarning")  # the measurement's passes after its warm-up
def test_torch_lce_with_label_smoothing_says_it_computed_the_full_logits(tmp_path):
    """torch's chunked path needs label_smoothing 0: with 0.1 it warns that it ignores its
    options and computes the full logits. The predicted row says so as the measured one does,
    and both hold N × vocab fp32 logits beyond the chunked step's."""
    shape = dict(batch=2, context=64, vocab=1000, d_model=16, ce_chunk=32, label_smoothing=0.1)
    (predicted,) = api.predict(variant="torch-lce", target="cpu", **shape)
    (measured,) = api.sweep(variant="torch-lce", device="cpu", repeats=1, warmup=1, threads=1,
                            out=tmp_path / "m.csv", **shape)
    assert predicted.note == measured.note and "``options`` ignored; chunked path needs" in predicted.note
    (chunked,) = api.predict(variant="torch-lce", target="cpu", **{**shape, "label_smoothing": 0.0})
    assert predicted.peak_delta_bytes == measured.peak_delta_bytes > chunked.peak_delta_bytes + 128 * 1000 * 4
