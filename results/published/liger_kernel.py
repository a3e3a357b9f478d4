"""Liger-Kernel's plain-PyTorch benchmark losses (provider `huggingface`), as cebench user
variants, op for op from `benchmark/scripts/benchmark_fused_linear_cross_entropy.py` and
`benchmark_cross_entropy.py` of linkedin/Liger-Kernel (2024-09 to 2025-07). Written here
from what those scripts do; no code copied.

Both harnesses call `.backward()` on the mean loss and never reset `.grad` (cebench's
`--grads keep`), and report `torch.cuda.max_memory_allocated() / 2**20` as float32 MiB.

    cebench predict --variant results/published/liger_kernel.py:flce_huggingface \\
        --target a100-80gb --grads keep --dtype bf16 --batch 4096 --context 1 --vocab 128256 --d-model 4096

The same script's `liger` provider needs no function here: `LigerLMHeadCE` calls
`LigerFusedLinearCrossEntropyLoss(ignore_index=-100, reduction="mean")(lin.weight, x, y)`,
which calls the release's autograd Function with its other arguments at their defaults, as
cebench's `--variant liger-kernel` does (`tests/test_published_liger_own.py` traces it with
each release that measured a row).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def flce_huggingface(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """`TorchLMHeadCE`: `nn.Linear(H, V, bias=False)` in the input dtype, then
    `nn.CrossEntropyLoss(ignore_index=-100, reduction="mean")` on the logits as they are (no
    fp32 upcast)."""
    logits = F.linear(h, weight)
    return F.cross_entropy(logits, targets, ignore_index=-100, reduction="mean")


def ce_huggingface(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """`nn.CrossEntropyLoss()` on the harness's (B·T, V) fp32 input, which is `h` here: run it
    with `--d-model V` and `--vocab 2` (the targets must be class indices of `h`'s columns;
    `weight`, unused, is cebench's input the harness lacks). Where `h` has fewer columns than
    the vocabulary (cebench's contract smoke test), the logits are `h @ weight.T` instead."""
    if weight.shape[0] > h.shape[1]:
        return F.cross_entropy(F.linear(h, weight), targets)
    return F.cross_entropy(h, targets)
