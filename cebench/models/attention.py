"""Which kernel `F.scaled_dot_product_attention` runs on a device, and that kernel called by
name, so that a step on `meta` tensors allocates what the device's kernel allocates.

On `meta` the dispatcher always takes the math fallback, which materialises batch × heads ×
context² scores; a CPU runs its flash kernel and a CUDA GPU (sm80 and later: every named
target) its flash kernel in fp16/bf16 and its memory-efficient kernel in fp32. What a
kernel allocates inside itself (the CPU flash kernel's per-thread tiles, CUDA flash
backward's fp32 accumulators) is not an op's output, so a prediction does not see it.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

FLASH_CPU, FLASH, EFFICIENT = "flash-cpu", "flash", "efficient"


def kernel_for(kind: str, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int) -> str | None:
    """The kernel a device of `kind` ('cpu', 'cuda') runs for causal attention of these
    sizes (None: the math fallback). CPU: what torch here chooses, asked on a tiny problem;
    CUDA: flash for fp16/bf16 with head_dim a multiple of 8 up to 256, else memory-efficient
    for head_dim a multiple of 8 (its grouped-query support is the flash kernel's alone)."""
    if kind == "cpu":
        from torch.nn.attention import SDPBackend

        q = torch.zeros(1, heads, 2, head_dim, dtype=dtype)
        kv = torch.zeros(1, kv_heads, 2, head_dim, dtype=dtype)
        choice = torch._fused_sdp_choice(q, kv, kv, is_causal=True, enable_gqa=kv_heads != heads)
        return FLASH_CPU if choice == SDPBackend.FLASH_ATTENTION.value else None
    aligned = head_dim % 8 == 0
    if dtype in (torch.float16, torch.bfloat16) and aligned and head_dim <= 256:
        return FLASH
    return EFFICIENT if aligned and kv_heads == heads else None


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, kernel: str | None) -> torch.Tensor:
    """Causal attention of (batch, heads, context, head_dim) q and (batch, kv_heads, ...) k, v
    (grouped-query when kv_heads < heads) with `kernel` (None: whichever
    `F.scaled_dot_product_attention` picks on these tensors)."""
    aten = torch.ops.aten
    if kernel == FLASH_CPU:
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True, scale=scale)[0]
    if kernel == FLASH:
        return aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False, scale=scale)[0]
    if kernel == EFFICIENT:
        return aten._scaled_dot_product_efficient_attention(q, k, v, None, q.requires_grad, 0.0, True,
                                                            scale=scale)[0]
    gqa: dict[str, Any] = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, **gqa)
