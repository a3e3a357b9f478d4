"""Which kernel `F.scaled_dot_product_attention` runs on a device, and that kernel called by
name, so that a step on `meta` tensors allocates what the device's kernel allocates.

On `meta` the dispatcher always takes the math fallback, which materialises batch × heads ×
context² scores; a CPU runs its flash kernel and a CUDA GPU, by its compute capability, its
flash kernel in fp16/bf16 (sm80 and later: every named target) and its memory-efficient
kernel in fp32 (and in fp16 below sm80). What a
kernel allocates inside itself (the CPU flash kernel's per-thread tiles, CUDA flash
backward's fp32 accumulators) is not an op's output, so a prediction does not see it.
"""
from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F

FLASH_CPU, FLASH, EFFICIENT = "flash-cpu", "flash", "efficient"
_SDPA = F.scaled_dot_product_attention  # torch's own, whatever stands in for it while a model runs


FLASH_SM, EFFICIENT_SM = (8, 0), (5, 0)  # the compute capability each CUDA kernel needs
EFFICIENT_BF16_SM = (8, 0)  # the memory-efficient kernel's bf16 (fp16 and fp32: from EFFICIENT_SM)


@torch.compiler.assume_constant_result  # what Dynamo tracing a model's attention takes as given
def kernel_for(capability: tuple[int, int] | None, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int, *,
               dropout: float = 0.0, mask: bool = False) -> str | None:
    """The kernel a CUDA GPU of compute `capability` (None: the host's CPU;
    `cebench.core.devices.Device.capability`) runs for attention of these sizes with
    `dropout` and (`mask`) an explicit mask, else causal (None: the math fallback). CPU: what
    torch here chooses, asked on a tiny problem (outside any dispatch mode: a trace's
    tracker does not see it); CUDA: flash (sm80 on) for fp16/bf16 with head_dim a multiple
    of 8 up to 256 and no mask, else memory-efficient (sm50 on; bf16 sm80 on) for head_dim a
    multiple of 8 (its grouped-query support is the flash kernel's alone)."""
    if capability is None:
        return _cpu_kernel(dtype, heads, kv_heads, head_dim, dropout > 0, mask)
    aligned = head_dim % 8 == 0
    half = dtype in (torch.float16, torch.bfloat16)
    if capability >= FLASH_SM and half and aligned and head_dim <= 256 and not mask:
        return FLASH
    efficient = capability >= (EFFICIENT_BF16_SM if dtype == torch.bfloat16 else EFFICIENT_SM)
    return EFFICIENT if efficient and aligned and kv_heads == heads else None


def repeats_kv(capability: tuple[int, int] | None, dtype: torch.dtype, head_dim: int) -> bool:
    """Whether a model repeats grouped key/value heads per query head before attention on a
    GPU of compute `capability` (None: the host's CPU), so that the kernel it wants runs:
    only where that kernel cannot take them grouped (CUDA's memory-efficient kernel: fp32's,
    and every dtype's below sm80), which would otherwise fall to the math kernel; a CPU's
    flash kernel takes them grouped."""
    return capability is not None and kernel_for(capability, dtype, 2, 1, head_dim) is None \
        and kernel_for(capability, dtype, 2, 2, head_dim) is not None


@functools.cache
def _cpu_kernel(dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int, dropout: bool,
                mask: bool) -> str | None:
    from torch.nn.attention import SDPBackend

    from cebench.shims.torch_names import fused_sdp_choice, modes_off

    with modes_off():
        q = torch.zeros(1, heads, 2, head_dim, dtype=dtype, device="cpu")
        kv = torch.zeros(1, kv_heads, 2, head_dim, dtype=dtype, device="cpu")
        bias = torch.ones(2, 2, dtype=torch.bool, device="cpu") if mask else None
        choice = fused_sdp_choice(q, kv, kv, attn_mask=bias, dropout_p=0.5 if dropout else 0.0,
                                         is_causal=not mask, enable_gqa=kv_heads != heads)
    return FLASH_CPU if choice == SDPBackend.FLASH_ATTENTION.value else None


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, kernel: str | None, *,
           mask: torch.Tensor | None = None, dropout: float = 0.0, causal: bool = True) -> torch.Tensor:
    """Attention of (batch, heads, context, head_dim) q and (batch, kv_heads, ...) k, v
    (grouped-query when kv_heads < heads), causal or under `mask`, with `dropout`, run by
    `kernel` (None: whichever `F.scaled_dot_product_attention` picks on these tensors)."""
    aten = torch.ops.aten
    if kernel == FLASH_CPU:
        return aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout, causal, attn_mask=mask,
                                                                scale=scale)[0]
    if kernel == FLASH:
        return aten._scaled_dot_product_flash_attention(q, k, v, dropout, causal, False, scale=scale)[0]
    if kernel == EFFICIENT:
        bias = None if mask is None else _additive(mask, q.dtype)
        return aten._scaled_dot_product_efficient_attention(q, k, v, bias, q.requires_grad, dropout, causal,
                                                            scale=scale)[0]
    gqa: dict[str, Any] = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    return _SDPA(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal, scale=scale, **gqa)


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask (True: attend) as the additive bias the efficient kernel takes, as
    `F.scaled_dot_product_attention` converts it."""
    return mask if mask.dtype != torch.bool else torch.zeros_like(mask, dtype=dtype).masked_fill(~mask, -torch.inf)
