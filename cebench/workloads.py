"""Workloads: what one step of a variant does, and the least memory it must allocate.

loss: forward mean loss + `loss.backward()` (upstream gradient 1.0) with respect to `h`
and `weight`, whose `.grad` are reset to None before every step (untimed, uncounted).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # config imports the variant registry, which imports this module
    from cebench.config import Config
    from cebench.inputs import Inputs

LOSS = "loss"
WORKLOADS = (LOSS,)
# The variant every other one of a workload is compared with (the "×dense" ratios).
BASELINE = {LOSS: "dense"}


@dataclass(frozen=True)
class Step:
    """`prepare()` runs before each step outside any probe; `run()` is the step."""

    prepare: Callable[[], None]
    run: Callable[[], None]


def make_step(workload: str, fn: Callable[..., torch.Tensor], inputs: Inputs, ce_chunk: int | None) -> Step:
    """The step of `workload` calling `fn` on `inputs`."""
    if workload != LOSS:
        raise ValueError(f"unknown workload {workload!r}")

    def prepare() -> None:
        inputs.h.grad = None
        inputs.weight.grad = None

    def run() -> None:
        fn(inputs.h, inputs.weight, inputs.targets, ce_chunk).backward()

    return Step(prepare, run)


def lower_bound_bytes(config: Config) -> int:
    """Bytes any exact implementation must allocate in one step: for the loss, the
    gradients of h (N × d_model) and weight (vocab × d_model) in the input dtype plus the
    fp32 scalar loss."""
    itemsize = torch.empty((), dtype=config.torch_dtype).element_size()
    return (config.tokens + config.vocab) * config.d_model * itemsize + 4


def logits_fp32_bytes(config: Config) -> int:
    """N × vocab × 4: the full logits in fp32, the reference every peak is judged against."""
    return config.tokens * config.vocab * 4
