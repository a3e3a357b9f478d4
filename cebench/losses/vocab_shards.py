"""Losses on a head weight split over the vocabulary (`--tp`, `cebench.models.tensor_parallel`):
each rank holds rows [start, start + V_r) of the (V, d_model) weight, a `DTensor` sharded on
dim 0, and the hidden states whole (a Replicate `DTensor`).

- `vocab_parallel_cross_entropy` (the `vocab-parallel` variant): Megatron-LM's algorithm on
  each rank's (rows, V_r) logits, `ce_chunk` rows at a time, each chunk checkpointed. Three
  all-reduces over the ranks per chunk (the row max, the sum of exponentials, the target's
  logit; with label smoothing a fourth, the sum of the logits), none in its own backward; one
  fp32 (rows, V_r) buffer, softmax in place, kept for the backward. Unsplit (one rank, plain
  tensors) it is the same computation without collectives.
- `dense` runs as it is under torch's `loss_parallel()` (the step enters it, forward and
  backward): `F.cross_entropy` on logits sharded on the class dimension, torchtitan's loss.
- Any other variant (`form`) runs on the weight all-gathered whole on every rank, what a user
  of a loss that needs the whole head does: V × d_model more per rank, and the whole logits.

A loss may come back a Replicate DTensor (`dense`'s): `plain` is its value as a tensor."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from cebench.losses.builtin import reduce
from cebench.losses.inputs import IGNORE_INDEX

Fn = Callable[..., torch.Tensor]


def _shards(h: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int, Any]:
    """(this rank's h, its rows of the weight, the vocabulary index of its first row, the
    process group of the ranks the vocabulary is split over; None unsplit). Gradients of h
    from this rank's rows are partial sums, added up over the ranks in h's backward."""
    from torch.distributed.tensor import DTensor, Partial

    if not isinstance(weight, DTensor):
        return h, weight, 0, None
    mesh = weight.device_mesh
    per_rank = -(-weight.shape[0] // mesh.size())  # torch.chunk's split, as Shard(0) makes it
    local_h = h.to_local(grad_placements=[Partial()]) if isinstance(h, DTensor) else h
    return local_h, weight.to_local(), mesh.get_local_rank() * per_rank, mesh.get_group()


def _all_reduce(tensor: torch.Tensor, op: Any, group: Any) -> None:
    if group is not None:
        import torch.distributed as dist

        dist.all_reduce(tensor, op=op, group=group)


def _local_targets(targets: torch.Tensor, start: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(each target's column among this rank's `width` rows from `start`, clamped into them;
    whether this rank holds it)."""
    local = targets - start
    return local.clamp(0, width - 1), (local >= 0) & (local < width)


class _Rows(torch.autograd.Function):
    """Per-row losses of fp32 logits (rows, V_r) whose other columns other ranks hold (see
    the module); the gradient is made in the backward, in place on the saved softmax."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, start: int, vocab: int, group: Any,
                label_smoothing: float, z_loss: float) -> torch.Tensor:
        import torch.distributed as dist

        width = logits.shape[1]
        row_max = logits.amax(dim=1)
        _all_reduce(row_max, dist.ReduceOp.MAX, group)
        softmax = (logits - row_max[:, None]).exp_()
        total = softmax.sum(dim=1)
        _all_reduce(total, dist.ReduceOp.SUM, group)
        column, inside = _local_targets(targets, start, width)
        target_logit = logits.gather(1, column[:, None]).squeeze(1) * inside
        _all_reduce(target_logit, dist.ReduceOp.SUM, group)
        lse = total.log() + row_max
        rows = (lse - target_logit) * (1.0 - label_smoothing)
        if label_smoothing:
            summed = logits.sum(dim=1)
            _all_reduce(summed, dist.ReduceOp.SUM, group)
            rows = rows + label_smoothing * (lse - summed / vocab)
        if z_loss:
            rows = rows + z_loss * lse.square()
        kept = targets != IGNORE_INDEX
        softmax.div_(total[:, None])
        ctx.save_for_backward(softmax, column, inside & kept, kept, lse)
        ctx.vocab, ctx.label_smoothing, ctx.z_loss = vocab, label_smoothing, z_loss
        return rows * kept

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        softmax, column, hit, kept, lse = ctx.saved_tensors
        scale = grad * kept
        factor = scale * (1.0 + 2.0 * ctx.z_loss * lse) if ctx.z_loss else scale
        out = softmax.mul_(factor[:, None])
        out.scatter_add_(1, column[:, None], (-(1.0 - ctx.label_smoothing) * scale * hit)[:, None])
        if ctx.label_smoothing:
            out.sub_((ctx.label_smoothing / ctx.vocab) * scale[:, None])
        return out, None, None, None, None, None, None


def _chunk_rows(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, start: int, vocab: int, group: Any,
                softcap: float, label_smoothing: float, z_loss: float) -> torch.Tensor:
    logits = F.linear(h, weight)
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return _Rows.apply(logits.float(), targets, start, vocab, group, label_smoothing, z_loss)


def vocab_parallel_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None = None, *,
    softcap: float = 0.0, label_smoothing: float = 0.0, z_loss: float = 0.0, reduction: str = "mean",
) -> torch.Tensor:
    """Megatron-LM's vocab-parallel cross-entropy (see the module) of h (N, d_model) against
    `weight` (V, d_model), whole or split over the vocabulary; `ce_chunk` rows at a time,
    each chunk checkpointed, one or many (None: all N rows at once, nothing recomputed). The semantics are
    `dense`'s: the softcap in the input dtype before the fp32 upcast, label smoothing over the
    whole vocabulary, z × log-sum-exp² per real target."""
    vocab = weight.shape[0]
    local_h, local_w, start, group = _shards(h, weight)
    rows = functools.partial(_chunk_rows, start=start, vocab=vocab, group=group, softcap=softcap,
                             label_smoothing=label_smoothing, z_loss=z_loss)
    if ce_chunk is None or not len(targets):  # no rows: no chunk to run
        out = rows(local_h, local_w, targets)
    else:
        out = torch.cat([checkpoint(rows, local_h[i:i + ce_chunk], local_w, targets[i:i + ce_chunk],
                                    use_reentrant=False)
                         for i in range(0, local_h.shape[0], ce_chunk)])
    return reduce(out, targets != IGNORE_INDEX, reduction)


def stand_in(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None) -> torch.Tensor:
    """The body step's loss (`cebench.losses.builtin.stand_in`) on this rank's rows of the
    weight: each row's h · weight[target] where this rank holds the target, summed (a
    partial loss, whose buffers are a whole one's: N × d_model)."""
    local_h, local_w, start, _ = _shards(h, weight)
    column, inside = _local_targets(targets, start, local_w.shape[0])
    picked = F.embedding(column, local_w) * inside[:, None]
    return (local_h * picked).sum() / local_h.shape[0]


def form(fn: Fn, native: bool) -> Fn:
    """Loss `fn` as it runs on a vocabulary-split head: `native`, on the shards themselves
    (`vocab-parallel`; `dense` inside `loss_parallel()`); else on the weight all-gathered
    whole and this rank's h. Its loss may come back a DTensor (`plain`)."""

    @functools.wraps(fn)
    def run(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None = None,
            **semantics: Any) -> torch.Tensor:
        from torch.distributed.tensor import DTensor

        if native or not isinstance(h, DTensor) or not isinstance(weight, DTensor):
            return fn(h, weight, targets, ce_chunk, **semantics)
        return fn(h.to_local(), weight.full_tensor(), targets, ce_chunk, **semantics)

    return run


def plain(loss: torch.Tensor) -> torch.Tensor:
    """A loss as a plain tensor: a DTensor's (Replicate: every rank's is the whole) local value,
    through which the backward runs."""
    from torch.distributed.tensor import DTensor

    return loss.to_local() if isinstance(loss, DTensor) else loss
