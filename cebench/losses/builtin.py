"""The built-in implementations: dense references and the vendored system under test.

A loss is ``fn(h, weight, targets, ce_chunk) -> scalar mean loss``; a sampler is
``fn(h, weight, temperature, ce_chunk) -> (N,) int64 token ids`` (see `cebench.losses.contract`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from cebench.vendor.fractus_ce import chunked_cross_entropy, sample_tokens_chunked


def dense_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None = None
) -> torch.Tensor:
    """Full (N, vocab) logits, upcast to fp32, mean cross-entropy. `ce_chunk` is ignored."""
    return F.cross_entropy(F.linear(h, weight).float(), targets)


def vendored_chunked_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None = None
) -> torch.Tensor:
    """The system under test: `ce_chunk` rows at a time, each chunk checkpointed."""
    assert ce_chunk is not None, "chunked variants are always given a ce_chunk"
    return chunked_cross_entropy(h, weight, targets, ce_chunk=ce_chunk)


def dense_sample(
    h: torch.Tensor, weight: torch.Tensor, temperature: float, ce_chunk: int | None = None
) -> torch.Tensor:
    """Full (N, vocab) fp32 logits, softmax at `temperature`, one multinomial draw per row."""
    probs = torch.softmax(F.linear(h.to(weight.dtype), weight).float() / temperature, dim=-1)
    return torch.multinomial(probs, 1).view(-1)


def vendored_chunked_sample(h: torch.Tensor, weight: torch.Tensor, temperature: float,
                            ce_chunk: int | None = None) -> torch.Tensor:
    """The system under test: `sample_tokens_chunked`, `ce_chunk` rows at a time."""
    assert ce_chunk is not None, "chunked variants are always given a ce_chunk"
    return sample_tokens_chunked(h, weight, temperature=temperature, ce_chunk=ce_chunk)


def torch_linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                               ce_chunk: int | None = None) -> torch.Tensor:
    """torch's own `F.linear_cross_entropy` (torch >= 2.13), chunked `ce_chunk` rows at a
    time; its custom op computes the gradients inside the forward."""
    options = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=ce_chunk)
    return F.linear_cross_entropy(h, weight, targets, options=options)


def torch_linear_cross_entropy_auto(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                    ce_chunk: int | None = None) -> torch.Tensor:
    """`F.linear_cross_entropy` with `LinearCrossEntropyOptions()`: torch picks the chunking."""
    return F.linear_cross_entropy(h, weight, targets, options=torch.nn.LinearCrossEntropyOptions())


def liger_fused_linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                     ce_chunk: int | None = None) -> torch.Tensor:
    """Liger-Kernel's fused linear cross-entropy (Triton, CUDA): it picks its own chunk
    size and computes the gradients inside the forward. Arguments after the first three
    are passed by keyword: their order changed between Liger releases."""
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy as liger

    return liger(h, weight, targets, reduction="mean", ignore_index=-100)


def cut_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                      ce_chunk: int | None = None) -> torch.Tensor:
    """Apple's Cut Cross-Entropy, `impl="cce"` (Triton, CUDA), with its default gradient
    filtering. Its backward needs bf16 or fp16 embeddings."""
    if h.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"cut-cross-entropy (impl='cce') needs bf16 or fp16 inputs for its backward, not "
                         f"{h.dtype}: sweep it with --dtype bf16")
    from cut_cross_entropy import linear_cross_entropy

    return linear_cross_entropy(h, weight, targets, ignore_index=-100, reduction="mean", impl="cce")
