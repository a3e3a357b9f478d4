"""torchtune's chunked-output cross-entropy, as its recipes run it, eager and with `compile=True`.

torchtune's `CEWithChunkedOutputLoss` (`num_output_chunks` 8) is given the model's output
already split: the decoder projects its final hidden states to logits in 8 chunks along
the sequence, all 8 returned as a list, and the loss upcasts one chunk at a time to fp32
for `F.cross_entropy(..., reduction="sum")`, dividing the sum by the real targets. With
`compile=True` a recipe compiles that per-chunk upcast and cross-entropy alone
(`compute_cross_entropy`), not the projection: inductor fuses the upcast into the
cross-entropy, so no fp32 chunk is saved for the backward.

Here `h` (N, d_model) is split into 8 row chunks (torchtune splits the sequence of each
batch row: the chunks have the same sizes). The compiled twin's helper is a module-level
`torch.compile`d function, which a prediction on meta runs as inductor's code runs it
(`cebench.engine.compiled_helpers.predicted`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from cebench.losses.inputs import IGNORE_INDEX

OUTPUT_CHUNKS = 8  # torchtune's num_output_chunks, as its recipes set it


def _chunk_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """One chunk's loss summed over its real targets, its logits upcast to fp32 first
    (torchtune's `compute_cross_entropy`)."""
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX, reduction="sum")


_compiled_chunk_cross_entropy = torch.compile(_chunk_cross_entropy)


def _chunked_output_loss(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         per_chunk: object) -> torch.Tensor:
    """The mean loss over real targets: every chunk's logits first (the model's output
    list), then `per_chunk` on each."""
    logits = [F.linear(rows, weight) for rows in h.tensor_split(OUTPUT_CHUNKS)]
    total: torch.Tensor | float = 0.0
    for chunk, chunk_targets in zip(logits, targets.tensor_split(OUTPUT_CHUNKS), strict=True):
        total = total + per_chunk(chunk, chunk_targets)  # type: ignore[operator]
    assert isinstance(total, torch.Tensor)
    return total / (targets != IGNORE_INDEX).sum()


def chunked_output_loss(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                        ce_chunk: int | None = None) -> torch.Tensor:
    """torchtune's CEWithChunkedOutputLoss, eager: 8 output chunks, each upcast to fp32
    for its cross-entropy. `ce_chunk` is ignored (torchtune sets a number of chunks)."""
    return _chunked_output_loss(h, weight, targets, _chunk_cross_entropy)


def chunked_output_loss_compiled(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                 ce_chunk: int | None = None) -> torch.Tensor:
    """torchtune's CEWithChunkedOutputLoss with compile=True: the per-chunk upcast and
    cross-entropy compiled, the projection eager. `ce_chunk` is ignored."""
    return _chunked_output_loss(h, weight, targets, _compiled_chunk_cross_entropy)
