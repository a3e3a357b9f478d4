"""What a model's training step holds at its peak, part by part: the computation behind
`cebench explain --model`.

The step is traced on `meta` tensors for its target (`cebench.engine.trace.trace`, the
tracker `predict` uses, so the parts sum to the predicted peak), with its moments marked:
the loss is called, the gradient of h is ready (the loss's backward is done), the
backward is done. Each tensor alive at the peak belongs to one part by when it was made:

- parameters, optimizer state: there before the step (its base), as are the token ids and
  targets (`other`);
- gradients: made in the backward and still alive when it ends (the parameters' `.grad`),
  or of the head weight's shape (the loss's gradient of a tied head, waiting for the
  embedding's to be added to it);
- in flight: with `fsdp` over 1, what FSDP gathers and reduces for the blocks at work:
  all-gather buffers, unsharded parameters, reduce-scatter inputs (parameters, optimizer
  state and gradients are then this rank's shards);
- activations: made in the body's forward (saved for its backward), or recomputed from a
  checkpoint inside the body's backward;
- loss: made from the loss's call until the gradient of h is ready;
- optimizer step: made after the backward (the optimizer's temporaries);
- other: the rest (the body backward's temporaries, checkpointing's RNG states, the cuBLAS
  workspaces of a named GPU, the inputs).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from cebench.core.config import Config
from cebench.engine.costs import Costs
from cebench.engine.fake_world import IN_FLIGHT
from cebench.engine.trace import step_time, trace
from cebench.engine.tracker import OpTracker
from cebench.measure.timeline import RECOMPUTE
from cebench.shims.torch_names import after_backward

PARTS: tuple[str, ...] = ("parameters", "optimizer state", "gradients", "in flight", "activations", "loss",
                          "optimizer step", "other")
# The moments of a step, in order, and the part of the step each begins.
LOSS, LOSS_BACKWARD_DONE, BACKWARD_DONE = "loss", "body backward", "optimizer step"


@dataclass(frozen=True)
class Anatomy:
    """One predicted training step of `config` (which has a model): its absolute
    `peak_bytes` on the target and the bytes of each part (`PARTS`) at that peak, which sum
    to it, and `when`: the part of the step the peak falls in ('body forward', 'loss', 'body
    backward', 'optimizer step'); on a named GPU, the step's predicted time (`time_ms`, ms;
    None where it cannot be predicted, `Verdict.time`)."""

    config: Config
    peak_bytes: int
    parts: dict[str, int]
    when: str
    time_ms: float | None = None


class _Marking(OpTracker):
    """An `OpTracker` that notes the event count at the step's moments in `marks`."""

    def __init__(self, marks: dict[str, int], *args: Any, **kwargs: Any) -> None:  # then `OpTracker`'s
        super().__init__(*args, **kwargs)
        self._marks = marks

    def _mark(self, moment: str) -> None:
        self._marks.setdefault(moment, len(self._builder.events))

    def wrap(self, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        inner = super().wrap(fn)

        def loss(h: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
            self._mark(LOSS)

            def ready(grad: torch.Tensor) -> None:  # the loss's backward is done; the body's begins
                self._mark(LOSS_BACKWARD_DONE)
                after_backward(lambda: self._mark(BACKWARD_DONE))

            h.register_hook(ready)
            return inner(h, *args, **kwargs)

        return loss


def anatomy(config: Config) -> Anatomy:
    """The parts of `config`'s predicted training step at its peak (see the module)."""
    costs = Costs.of(config)
    marks: dict[str, int] = {}
    traced = trace(config, functools.partial(_Marking, marks), costs=costs)
    timeline = traced.record
    event, delta = timeline.peak()
    end = len(timeline.events)
    loss_at, body_at = marks.get(LOSS, end), marks.get(LOSS_BACKWARD_DONE, end)
    done_at = marks.get(BACKWARD_DONE, end)
    parts = dict.fromkeys(PARTS, 0)
    head = (config.vocab, config.d_model)  # the loss's gradient of the head weight, summed into .grad later when tied
    parts["parameters"] = traced.parameter_bytes
    parts["optimizer state"] = traced.optimizer_state_bytes
    base = traced.base_bytes + traced.workspace_bytes
    parts["other"] = base - parts["parameters"] - parts["optimizer state"]
    alive = [b for b in timeline.blocks if event is not None and b.alive_at(event)]
    start = timeline.backward_start
    for block in alive:
        backward_made = start is not None and block.created >= start
        if backward_made and block.created < done_at and (block.freed is None or block.freed > done_at
                                                          or block.shape == head):
            part = "gradients"
        elif block.op.startswith(IN_FLIGHT):
            part = "in flight"
        elif block.created < loss_at:
            part = "activations"
        elif block.created < body_at:
            part = "loss"
        elif block.created >= done_at:
            part = "optimizer step"
        elif block.phase == RECOMPUTE:
            part = "activations"
        else:
            part = "other"
        parts[part] += block.nbytes
    parts["other"] += delta - sum(b.nbytes for b in alive)  # frees of memory from before the step
    moments = [(loss_at, "body forward"), (body_at, "loss"), (done_at, "body backward"), (end + 1, "optimizer step")]
    when = next(name for at, name in moments if event is None or event < at)
    return Anatomy(config, base + delta, parts, when, step_time(config, costs))
