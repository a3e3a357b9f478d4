"""The built-in implementations: dense references and the vendored system under test.

A loss is ``fn(h, weight, targets, ce_chunk) -> scalar mean loss``; a sampler is
``fn(h, weight, temperature, ce_chunk) -> (N,) int64 token ids`` (see `cebench.contract`).
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


def dense_sample(h: torch.Tensor, weight: torch.Tensor, temperature: float, ce_chunk: int | None = None) -> torch.Tensor:
    """Full (N, vocab) fp32 logits, softmax at `temperature`, one multinomial draw per row."""
    probs = torch.softmax(F.linear(h.to(weight.dtype), weight).float() / temperature, dim=-1)
    return torch.multinomial(probs, 1).view(-1)


def vendored_chunked_sample(h: torch.Tensor, weight: torch.Tensor, temperature: float,
                            ce_chunk: int | None = None) -> torch.Tensor:
    """The system under test: `sample_tokens_chunked`, `ce_chunk` rows at a time."""
    assert ce_chunk is not None, "chunked variants are always given a ce_chunk"
    return sample_tokens_chunked(h, weight, temperature=temperature, ce_chunk=ce_chunk)
