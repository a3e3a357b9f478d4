"""The built-in implementations: dense references and the vendored system under test.

A loss is ``fn(h, weight, targets, ce_chunk, **semantics) -> loss``; a sampler is
``fn(h, weight, temperature, ce_chunk) -> (N,) int64 token ids`` (see `cebench.losses.contract`).
The loss semantics a function takes as keywords (`softcap`, `label_smoothing`, `z_loss`,
`reduction`) are passed only when they are not off; targets equal to `IGNORE_INDEX` are
padding, which every loss is given.
"""
from __future__ import annotations

import importlib.metadata
import inspect
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from cebench.core import devices, interpreter
from cebench.core.config import Config
from cebench.losses.inputs import IGNORE_INDEX
from cebench.shims.torch_names import linear_cross_entropy_chunk
from cebench.vendor.fractus_ce import chunked_cross_entropy, sample_tokens_chunked


def reduce(rows: torch.Tensor, kept: torch.Tensor, reduction: str) -> torch.Tensor:
    """Per-row losses (N,) → the `reduction` torch defines: `mean` over the `kept` rows
    (real targets), `sum`, or `none` (the rows)."""
    if reduction == "none":
        return rows
    return rows.sum() / kept.sum() if reduction == "mean" else rows.sum()


def dense_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None = None, *,
    softcap: float = 0.0, label_smoothing: float = 0.0, z_loss: float = 0.0, reduction: str = "mean",
) -> torch.Tensor:
    """Full (N, vocab) logits, upcast to fp32, cross-entropy. `softcap` c makes the logits
    c·tanh(logits / c) in the input dtype before the upcast (the Cut Cross-Entropy paper's
    baseline, op for op); `label_smoothing` and `reduction` are torch's; `z_loss` adds
    z × log-sum-exp² per real target. `ce_chunk` is ignored."""
    return logits_cross_entropy(F.linear(h, weight), targets, softcap=softcap, label_smoothing=label_smoothing,
                                z_loss=z_loss, reduction=reduction)


def logits_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, softcap: float = 0.0,
                         label_smoothing: float = 0.0, z_loss: float = 0.0, reduction: str = "mean") -> torch.Tensor:
    """`dense` on the logits workload: cross-entropy of given (N, vocab) logits, upcast to fp32
    (softcapped first, in their dtype), with the semantics `dense_cross_entropy` gives."""
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    logits = logits.float()
    if not z_loss:
        return F.cross_entropy(logits, targets, reduction=reduction, label_smoothing=label_smoothing)
    kept = targets != IGNORE_INDEX
    rows = F.cross_entropy(logits, targets, reduction="none", label_smoothing=label_smoothing)
    return reduce(rows + z_loss * torch.logsumexp(logits, dim=-1).square() * kept, kept, reduction)


def vendored_chunked_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None = None
) -> torch.Tensor:
    """The system under test: `ce_chunk` rows at a time, each chunk checkpointed."""
    assert ce_chunk is not None, "chunked variants are always given a ce_chunk"
    return chunked_cross_entropy(h, weight, targets, ce_chunk=ce_chunk)


def stand_in(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None) -> torch.Tensor:
    """The body step's loss (the hidden variant `(body)`): each row's h · weight[target],
    summed, over the rows. Its gradients reach h and the weight (a (vocab, d_model) gradient, as
    any loss's) with work and buffers of N × d_model, none vocabulary-sized. The rows are looked
    up as an embedding: indexing's backward runs out of place under a dispatch mode (a tracker),
    which would add a (vocab, d_model) buffer to a prediction that the real step lacks."""
    return (h * F.embedding(targets.clamp(min=0), weight)).sum() / h.shape[0]


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
                               ce_chunk: int | None = None, *, label_smoothing: float = 0.0,
                               reduction: str = "mean") -> torch.Tensor:
    """torch's own `F.linear_cross_entropy` (torch >= 2.13), chunked `ce_chunk` rows at a
    time; its custom op computes the gradients inside the forward. With label smoothing it
    warns and computes the full logits instead."""
    options = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=ce_chunk)
    return F.linear_cross_entropy(h, weight, targets, reduction=reduction, label_smoothing=label_smoothing,
                                  options=options)


def torch_linear_cross_entropy_auto(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                    ce_chunk: int | None = None, *, label_smoothing: float = 0.0,
                                    reduction: str = "mean") -> torch.Tensor:
    """`F.linear_cross_entropy` with `LinearCrossEntropyOptions()`: torch picks the chunking."""
    return F.linear_cross_entropy(h, weight, targets, reduction=reduction, label_smoothing=label_smoothing,
                                  options=torch.nn.LinearCrossEntropyOptions())


def torch_lce_auto_steps(config: Config) -> Config:
    """torch-lce-auto's point as torch-lce's, whose step is the same op for op:
    `F.linear_cross_entropy` resolves `LinearCrossEntropyOptions()` to the batch_chunk_size
    torch picks for N rows, vocab and d_model on the device and dtype it runs on (its own
    `_adjust`), then runs exactly as when that size is given."""
    picked = linear_cross_entropy_chunk(config.tokens, config.d_model, config.vocab, config.torch_dtype,
                                        torch.device(config.device.kind))
    from cebench.losses.variants import resolve

    return replace(config, variant=resolve("torch-lce"), ce_chunk=picked)


# cebench's loss semantics → (the parameter of Liger's fused linear cross-entropy that takes it, its value when off).
LIGER_PARAMETERS: dict[str, tuple[str, object]] = {"softcap": ("softcap", None),
                                                   "label_smoothing": ("label_smoothing", 0.0),
                                                   "z_loss": ("lse_square_scale", 0.0),
                                                   "reduction": ("reduction", "mean")}


def transformers_causal_lm_loss(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                ce_chunk: int | None = None, *, softcap: float = 0.0) -> torch.Tensor:
    """A transformers causal LM's own loss, as its forward computes it from hidden states:
    the head's logits in the model's dtype (`softcap` c: c·tanh(logits / c), Gemma 2's),
    then transformers' `ForCausalLMLoss` (an fp32 upcast, cross-entropy averaged over the
    real targets) on targets already shifted (`shift_labels`), as a training loop that
    shifts its labels itself passes them. `ce_chunk` is ignored."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    logits = F.linear(h, weight)
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    return ForCausalLMLoss(logits, None, weight.shape[0], ignore_index=IGNORE_INDEX, shift_labels=targets)


def liger_fused_linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                                     ce_chunk: int | None = None, *, softcap: float = 0.0,
                                     label_smoothing: float = 0.0, z_loss: float = 0.0,
                                     reduction: str = "mean") -> torch.Tensor:
    """Liger-Kernel's fused linear cross-entropy (Triton): it picks its own chunk size and
    computes the gradients inside the forward; `z_loss` is its `lse_square_scale`. On a CPU
    its kernels run under Triton's interpreter (`cebench.core.interpreter`). Called as Liger's
    own loss module calls it: through its autograd Function, which every release since 0.2.1
    has (0.2.1 has no functional form; 0.4.2's is the Function's `apply`, which takes no
    keywords), taken from where the release's functional form takes it, each argument bound
    by name to that release's `forward` (their order changed), the others at their defaults.
    A semantics the installed release has no parameter for is a ValueError unless it is off
    (0.2.1 takes none of them)."""
    if devices.on_host(h.device):
        interpreter.enable()
    from liger_kernel import ops
    from liger_kernel.ops import fused_linear_cross_entropy

    # 0.6.5 on: the implementation `liger_kernel.ops` selected for the device; before, the module's own
    Function = getattr(ops, "LigerFusedLinearCrossEntropyFunction",
                       fused_linear_cross_entropy.LigerFusedLinearCrossEntropyFunction)

    return _liger_apply(Function, (h, weight, targets), "fused linear cross-entropy", softcap=softcap,
                        label_smoothing=label_smoothing, z_loss=z_loss, reduction=reduction)


def _liger_apply(Function: Any, tensors: tuple[torch.Tensor, ...], what: str, *, softcap: float,
                 label_smoothing: float, z_loss: float, reduction: str) -> torch.Tensor:
    """The loss of Liger's autograd `Function` (its `what`) on `tensors`, each semantics bound
    by name to that release's `forward` (their order changed between releases), the other
    parameters at their defaults (None where it has none: an optional class weight). A
    semantics the installed release has no parameter for is a ValueError unless it is off."""
    asked = {"softcap": softcap or None, "label_smoothing": label_smoothing, "z_loss": z_loss, "reduction": reduction}
    parameters = dict(list(inspect.signature(Function.forward).parameters.items())[1 + len(tensors):])
    lacking = {name: value for name, value in asked.items()
               if LIGER_PARAMETERS[name][0] not in parameters and value != LIGER_PARAMETERS[name][1]}
    if lacking:
        raise ValueError(f"liger-kernel {importlib.metadata.version('liger-kernel')} cannot do "
                         f"{', '.join(f'{name} {value}' for name, value in lacking.items())}: its {what} has no "
                         f"{', '.join(LIGER_PARAMETERS[name][0] for name in lacking)}")
    given = {"ignore_index": IGNORE_INDEX, **{LIGER_PARAMETERS[name][0]: value for name, value in asked.items()}}
    empty = inspect.Parameter.empty
    loss = Function.apply(*tensors, *(given.get(name, None if p.default is empty else p.default)
                                      for name, p in parameters.items()))
    return loss[0] if isinstance(loss, tuple) else loss  # from 0.6.0 on: (loss, z_loss, ...)


def liger_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, *, softcap: float = 0.0,
                        label_smoothing: float = 0.0, z_loss: float = 0.0, reduction: str = "mean") -> torch.Tensor:
    """`liger-kernel` on the logits workload: Liger-Kernel's cross-entropy kernel (Triton) on
    given logits, through its autograd Function as `LigerCrossEntropyLoss` calls it (bound
    as `liger_fused_linear_cross_entropy` binds its own; `z_loss` is its `lse_square_scale`).
    It writes the logits' gradient into them in its forward. On a CPU its kernels run under
    Triton's interpreter."""
    if devices.on_host(logits.device):
        interpreter.enable()
    from liger_kernel import ops
    from liger_kernel.ops import cross_entropy

    Function = getattr(ops, "LigerCrossEntropyFunction", cross_entropy.LigerCrossEntropyFunction)
    return _liger_apply(Function, (logits, targets), "cross-entropy", softcap=softcap,
                        label_smoothing=label_smoothing, z_loss=z_loss, reduction=reduction)


def cut_cross_entropy(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                      ce_chunk: int | None = None, *, softcap: float = 0.0, reduction: str = "mean") -> torch.Tensor:
    """Apple's Cut Cross-Entropy, `impl="cce"` (Triton, CUDA), with its default gradient
    filtering. Its backward needs bf16 or fp16 embeddings."""
    if h.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"cut-cross-entropy (impl='cce') needs bf16 or fp16 inputs for its backward, not "
                         f"{h.dtype}: give --dtype bf16 or fp16")
    from cut_cross_entropy import linear_cross_entropy

    return linear_cross_entropy(h, weight, targets, ignore_index=IGNORE_INDEX, softcap=softcap or None,
                                reduction=reduction, impl="cce")
