"""The chunked loss matches the dense one, both against a float64 reference."""
import pytest
import torch
import torch.nn.functional as F

from cebench.losses import inputs, variants
from conftest import cpu_config


def _loss_and_grads(fn, h, w, t, ce_chunk):
    h = h.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    loss = fn(h, w, t, ce_chunk)
    loss.backward()
    return loss.detach(), h.grad, w.grad


@pytest.mark.parametrize("variant,ce_chunk", [("dense", None), ("chunked", 32), ("chunked", 100), ("chunked", 500)])
def test_loss_and_gradients_match_float64_reference(variant, ce_chunk):
    # N = 3 × 33 = 99 rows: not divisible by 32; 500 > N is a single chunk.
    x = inputs.make(cpu_config(batch=3, context=33, vocab=1500, d_model=48))
    ref = _loss_and_grads(lambda h, w, t, c: F.cross_entropy(F.linear(h, w), t),
                          x.h.double(), x.weight.double(), x.targets, None)
    got = _loss_and_grads(variants.get(variant).load(), x.h, x.weight, x.targets, ce_chunk)
    for name, r, g in zip(("loss", "grad_h", "grad_weight"), ref, got, strict=True):
        assert g.dtype == torch.float32
        rel = ((g.double() - r).abs().max() / r.abs().max()).item()
        assert rel < 1e-5, f"{variant} {name}: max relative error {rel:.2e}"
