"""What any exact implementation must spend on a step, to read each row against.

`matmul_floor_ms`: the measured time of the matmuls any exact implementation must do at
full size, on the row's device and dtype (the step's counted FLOPs are
`cebench.engine.trace.count_flops`).
"""
from __future__ import annotations

import torch

from cebench.core.config import LOSS, Config, Settings
from cebench.losses import inputs as inputs_mod
from cebench.measure.timing import time_steps

_FLOORS: dict[tuple[object, ...], float | None] = {}  # matmul_floor_ms's calibrations in this process


def floor_key(config: Config, settings: Settings) -> tuple[object, ...]:
    """What a matmul floor depends on: device, dtype, workload, shape, thread count and
    settings (not the variant), so points that share it share one calibration."""
    return (config.device, config.dtype, config.workload, config.tokens, config.vocab, config.d_model,
            torch.get_num_threads(), settings)


def matmul_floor_ms(config: Config, settings: Settings) -> float | None:
    """Median time (ms) of the matmuls any exact implementation of `config`'s step must do
    at full size, on its device and dtype, timed like a step (`settings.warmup` untimed,
    `settings.repeats` timed). Loss: logits = h @ weight.T (N × vocab), ∇h = g @ weight and
    ∇weight = g.T @ h, with the logits buffer (input dtype) standing in for g; sample: the
    logits alone. Outputs go into buffers allocated once, so allocation and page faults
    are not timed. Calibrated once per device, dtype, workload, shape, thread count and
    settings in a process; None when it fails (its N × vocab buffer does not fit, say)."""
    key = floor_key(config, settings)
    if key not in _FLOORS:
        try:
            _FLOORS[key] = _time_matmuls(config, settings)
        except Exception:  # out of memory on a big shape, say: no floor, never a failed row
            _FLOORS[key] = None
        config.device.free_cache()  # its buffers are freed by now; return any cached blocks too
    return _FLOORS[key]


def _time_matmuls(config: Config, settings: Settings) -> float:
    x = inputs_mod.make(config)
    h, weight = x.h.detach(), x.weight.detach()
    logits = h.new_empty(config.tokens, config.vocab)
    grad_h, grad_weight = torch.empty_like(h), torch.empty_like(weight)

    def matmuls() -> None:
        torch.mm(h, weight.t(), out=logits)
        if config.workload == LOSS:
            torch.mm(logits, weight, out=grad_h)
            torch.mm(logits.t(), h, out=grad_weight)

    device = config.device
    with torch.no_grad():
        for _ in range(settings.warmup):
            device.time_once(matmuls)
        return time_steps(matmuls, lambda: None, device, settings.repeats).median_ms
