"""What one step of a workload does, as a `Step` to time and probe.

loss: forward mean loss + `loss.backward()` (upstream gradient 1.0) with respect to `h`
and `weight`, whose `.grad` are reset to None before every step (untimed, uncounted).
sample: one no-grad call drawing a token per row from softmax(logits / temperature).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from cebench.core.config import SAMPLE, Config
from cebench.losses.inputs import Inputs


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
