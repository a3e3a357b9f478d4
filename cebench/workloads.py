"""Workloads: what one step of a variant does, and the least memory it must allocate.

loss: forward mean loss + `loss.backward()` (upstream gradient 1.0) with respect to `h`
and `weight`, whose `.grad` are reset to None before every step (untimed, uncounted).
sample: one no-grad call drawing a token per row from softmax(logits / temperature).
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
SAMPLE = "sample"
WORKLOADS = (LOSS, SAMPLE)
# The variant every other one of a workload is compared with (the "vs dense" ratios).
BASELINE = {LOSS: "dense", SAMPLE: "dense-sample"}


@dataclass(frozen=True)
class Step:
    """`prepare()` runs before each step outside any probe; `run()` is the step."""

    prepare: Callable[[], None]
    run: Callable[[], None]


def make_step(fn: Callable[..., torch.Tensor], inputs: Inputs, config: Config) -> Step:
    """The step of `config.workload` calling `fn` on `inputs`."""
    if config.workload == SAMPLE:
        def sample() -> None:
            with torch.no_grad():
                fn(inputs.h, inputs.weight, config.temperature, config.ce_chunk)

        return Step(lambda: None, sample)

    def prepare() -> None:
        inputs.h.grad = None
        inputs.weight.grad = None

    def run() -> None:
        fn(inputs.h, inputs.weight, inputs.targets, config.ce_chunk).backward()

    return Step(prepare, run)


def lower_bound_bytes(config: Config) -> int:
    """Bytes any exact implementation must allocate in one step. Loss: the gradients of
    h (N × d_model) and weight (vocab × d_model) in the input dtype plus the fp32 scalar
    loss. Sample: the N int64 token ids it returns."""
    if config.workload == SAMPLE:
        return config.tokens * 8
    itemsize = torch.empty((), dtype=config.torch_dtype).element_size()
    return (config.tokens + config.vocab) * config.d_model * itemsize + 4


def logits_fp32_bytes(config: Config) -> int:
    """N × vocab × 4: the full logits in fp32, the reference every peak is judged against."""
    return config.tokens * config.vocab * 4
