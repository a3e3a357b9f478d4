"""Outputs that a device's kernel makes in another dtype than the `meta` kernel of its op.

A CPU's `native_layer_norm` returns the mean and 1/std it saves for backward in the
input's dtype (bf16, fp16); meta's, like CUDA's, returns them in fp32: 2 bytes a row more
per statistic. While a step for such a device runs on `meta`, `as_on(device)` makes those
outputs what the device makes. Entered below the storage tracker, so that the tracker
charges the outputs as the device holds them and never sees the fp32 ones.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from cebench.core.devices import Device
from cebench.shims.torch_names import TorchDispatchMode

_HALF = (torch.bfloat16, torch.float16)


class _InputDtypeStats(TorchDispatchMode):
    """`native_layer_norm`'s mean and 1/std in its input's dtype."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.native_layer_norm.default and args[0].dtype in _HALF:
            normed, mean, rstd = out
            return normed, mean.to(args[0].dtype), rstd.to(args[0].dtype)
        return out


def as_on(device: Device, dtype: torch.dtype) -> contextlib.AbstractContextManager[object]:
    """Within: the ops above return what `device`'s kernels return for a step in `dtype`
    (a dispatch mode only where they differ: it costs every op a call)."""
    if device.norm_stats_in_input_dtype and dtype in _HALF:
        return _InputDtypeStats()
    return contextlib.nullcontext()
