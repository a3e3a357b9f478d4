"""Inputs of one measured point: hidden states, tied output weight and targets."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cebench.core import devices
from cebench.core.config import LOGITS, LOSS, Config, Reduction

SEED = 0
IGNORE_INDEX = -100  # the target of a padding row: torch's default ignore_index, and every peer's


@dataclass
class Inputs:
    """`h` (N, d_model) and `weight` (vocab, d_model), both ~ Normal(0, 1/d_model) in the
    config's dtype; `targets` (N,) int64 uniform in [0, vocab), except round(N × ignore_frac)
    rows at random whose target is `IGNORE_INDEX` (padding); with reduction none, the
    upstream gradient of the (N,) per-row losses, fp32 uniform in [0.5, 1.5) (else None:
    a scalar loss is backpropagated with 1.0). On the logits workload `h` is the (N, vocab)
    logits, ~ Normal(0, 1), and `weight` an empty tensor (no projection)."""

    h: torch.Tensor
    weight: torch.Tensor
    targets: torch.Tensor
    upstream: torch.Tensor | None = None

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors a step starts with: h, weight, targets, the upstream gradient, and
        the gradients of h and weight where a previous step left them (`--grads keep`)."""
        extra = (self.upstream, self.h.grad, self.weight.grad)
        return (self.h, self.weight, self.targets) + tuple(t for t in extra if t is not None)


def make(config: Config, device: str | torch.device | None = None) -> Inputs:
    """Deterministic inputs for `config` (fixed seed), on `device` (default: the config's).
    `h` and `weight` require grad for the loss workload, whose step differentiates them; the
    logits do on the logits workload."""
    requires_grad = config.workload in (LOSS, LOGITS)
    device = torch.device(device if device is not None else config.device.name)
    gen = torch.Generator(device="cpu" if devices.is_meta(device) else device).manual_seed(SEED)
    std = 1.0 if config.workload == LOGITS else 1.0 / math.sqrt(config.d_model)

    def normal(*shape: int) -> torch.Tensor:
        if devices.is_meta(device):
            t = torch.empty(*shape, dtype=config.torch_dtype, device=device)
        else:
            t = (torch.randn(*shape, generator=gen, device=device) * std).to(config.torch_dtype)
        return t.requires_grad_(requires_grad)

    if config.workload == LOGITS:
        logits = normal(config.tokens, config.vocab)
        return Inputs(logits, torch.empty(0, dtype=config.torch_dtype, device=device), *labels(config, device, gen))
    h = normal(config.tokens, config.d_model)
    weight = normal(config.vocab, config.d_model)
    return Inputs(h, weight, *labels(config, device, gen))


def ignored_count(config: Config) -> int:
    """How many of `config`'s targets are `IGNORE_INDEX`: round(N × ignore_frac)."""
    return round(config.tokens * config.ignore_frac)


def labels(config: Config, device: torch.device, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The (N,) int64 targets of `config` (round(N × ignore_frac) of them `IGNORE_INDEX`, at
    random) and, for a loss (or logits) workload with reduction none, the upstream gradient of its
    per-row losses (else None), drawn from `gen` after whatever the caller drew; on `meta`
    their shapes alone."""
    n = config.tokens
    with_upstream = config.workload in (LOSS, LOGITS) and config.reduction == Reduction.NONE
    if devices.is_meta(device):
        return (torch.empty(n, dtype=torch.long, device=device),
                torch.empty(n, device=device) if with_upstream else None)
    targets = torch.randint(0, config.vocab, (n,), generator=gen, device=device)
    ignored = ignored_count(config)
    if ignored:  # padding: these rows' targets are ignore_index, placed at random with the same seed
        targets[torch.randperm(n, generator=gen, device=device)[:ignored]] = IGNORE_INDEX
    # drawn last: the other draws stay as they were
    upstream = torch.rand(n, generator=gen, device=device) + 0.5 if with_upstream else None
    return targets, upstream
