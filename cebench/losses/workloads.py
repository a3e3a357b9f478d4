"""What one step of a workload does, as a `Step` to time and probe.

loss: forward loss (with the point's semantics) + `loss.backward()` with respect to `h`
and `weight` (upstream gradient 1.0; with reduction none, the inputs' fixed non-uniform
vector), whose `.grad` are reset to None before every step (untimed, uncounted), or with
grads keep left as the previous step made them (the new ones accumulate into them); with
retain_graph yes, `backward(..., retain_graph=True)`.
sample: one no-grad call drawing a token per row from softmax(logits / temperature).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from cebench.core.config import SAMPLE, Config, Grads, YesNo
from cebench.losses.inputs import Inputs


@dataclass(frozen=True)
class Step:
    """`prepare()` runs before each step outside any probe; `run()` is the step;
    `check()` runs it too and says what was wrong with its result ('' when nothing was; a
    loss that is not finite is wrong): a first, unmeasured step's."""

    prepare: Callable[[], None]
    run: Callable[[], None]
    check: Callable[[], str]


def make_step(fn: Callable[..., torch.Tensor], inputs: Inputs, config: Config) -> Step:
    """The step of `config.workload` calling `fn` on `inputs`."""
    if config.workload == SAMPLE:
        def sample() -> None:
            with torch.no_grad():
                fn(inputs.h, inputs.weight, config.temperature, config.ce_chunk)

        def check_sample() -> str:
            sample()
            return ""

        return Step(lambda: None, sample, check_sample)

    keep, retain = config.grads == Grads.KEEP, config.retain_graph == YesNo.YES  # steady-state semantics (see `Config`)

    def prepare() -> None:
        if not keep:  # --grads keep: the previous step's gradients stay, and the next accumulate into them
            inputs.h.grad = None
            inputs.weight.grad = None

    features = config.features

    def forward() -> torch.Tensor:
        return fn(inputs.h, inputs.weight, inputs.targets, config.ce_chunk, **features)

    def run() -> None:
        forward().backward(inputs.upstream, retain_graph=retain)  # the graph lives until the step returns

    def check() -> str:
        loss = forward()
        problem = not_finite(loss)
        loss.backward(inputs.upstream, retain_graph=retain)
        return problem

    return Step(prepare, run, check)


def not_finite(loss: torch.Tensor) -> str:
    """What is wrong with `loss` when some of its values are NaN or infinite, else ''."""
    bad = loss.numel() - int(torch.isfinite(loss.detach()).sum())
    return f"the loss is not finite ({bad} of {loss.numel()} values nan or inf)" if bad else ""
