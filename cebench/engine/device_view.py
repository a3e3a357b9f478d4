"""The target device as a peer's Python sees it while its step runs on `meta` tensors.

Peers branch on where their tensors are: torch's `F.linear_cross_entropy` chooses its
buffers by `input.device.type == "cuda"`. On `meta` they would take their host branch and
allocate what a GPU never does. Inside `seen_as(target)`, the peers' code (the modules each
variant declares its code is in: `Variant.peer`) reads a meta tensor's `device` as the
target's (`cuda:0`), and a tensor asked for on a device of that kind (by a factory such as
`torch.empty`, `Tensor.new_zeros` or `.to`) is made on `meta`; torch's own kernels, and
every other module, still see `meta`. Both are patched on the `torch` module and
`torch.Tensor` for the duration, so that they hold in the autograd engine's calls of a
peer's backward too.

A peer's code also asks `torch.cuda` about the card (Liger-Kernel accumulates its weight
gradient in place with `addmm(out=)` where `get_device_capability()[0] >= 8`, else through
a parameter-sized temporary): for the peers' calls `get_device_capability`,
`get_device_properties` (name, major, minor, multi_processor_count, total_memory),
`is_bf16_supported`, `current_device`, `device_count` and `get_device_name` answer from the
target (`cebench.core.targets`; the generic `cuda` is shown `targets.DEFAULT_GPU`), on a
machine with or without a GPU. `torch.cuda.is_available` is left alone: Liger reads it
once, at import, to choose its autocast wrappers, which change nothing in a step without
autocast.
"""
from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from cebench.core import targets
from cebench.core.devices import Device
from cebench.losses import variants
from cebench.shims.cuda import CUDA
from cebench.shims.tensor import (  # what makes a tensor on a device
    FACTORIES,
    METHODS,
    REAL_DEVICE,
    TENSOR,
    TORCH,
)

_TORCH_FACTORIES = {name: getattr(torch, name) for name in FACTORIES}  # torch's own, as imported
_TENSOR_METHODS = {name: getattr(torch.Tensor, name) for name in METHODS}


def _from_peer(peers: tuple[str, ...], depth: int = 2) -> bool:
    """Whether the code `depth` frames up is in one of the modules `peers` (name prefixes)."""
    name = sys._getframe(depth).f_globals.get("__name__", "")
    return bool(name.startswith(peers))


def _on_meta(target: Device, fn: Callable[..., Any], positional: bool, stand_in: str) -> Callable[..., Any]:
    """`fn` with a `device=` of `target`'s kind (and, `positional`, a device argument) made
    `stand_in`."""
    def meta(value: object) -> object:
        if isinstance(value, torch.device) and value.type == target.kind:
            return torch.device(stand_in)
        if isinstance(value, str) and value.split(":")[0] == target.kind:
            return torch.device(stand_in)
        return value

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = meta(kwargs["device"])
        if positional:
            args = tuple(meta(a) for a in args)
        return fn(*args, **kwargs)

    return wrapped


# Resident threads per SM, by compute capability (CUDA C++ Programming Guide, "Technical Specifications
# per Compute Capability"): 1,536 on 8.6, 8.9 and 12.x, 2,048 on the others a target has.
_THREADS_PER_SM_1536 = ((8, 6), (8, 9), (12, 0))


@dataclass(frozen=True)
class Properties:
    """What `torch.cuda.get_device_properties` tells a peer of a GPU target, and inductor
    writing Triton code for it (`cebench.engine.compiled`): registers per SM (64 K on every
    capability since 5.0), resident threads per SM and per block, warp size; `gcnArchName`
    is the card's name (ROCm's architecture field, read by inductor for its lookup tables)."""

    name: str
    major: int
    minor: int
    multi_processor_count: int
    total_memory: int
    regs_per_multiprocessor: int = 65536
    max_threads_per_multi_processor: int = 2048
    max_threads_per_block: int = 1024
    warp_size: int = 32

    @property
    def gcnArchName(self) -> str:  # noqa: N802 - torch's name
        return self.name


def cuda_answers(gpu: targets.Target) -> dict[str, Callable[..., Any]]:
    """The `torch.cuda` functions a peer asks about its card, answered from `gpu`."""
    threads = 1536 if gpu.capability in _THREADS_PER_SM_1536 else 2048
    properties = Properties(gpu.model, *gpu.capability, gpu.sm_count, gpu.capacity_bytes,
                            max_threads_per_multi_processor=threads)
    return {"get_device_capability": lambda device=None: gpu.capability,
            "get_device_properties": lambda device=None: properties,
            "is_bf16_supported": lambda including_emulation=True: gpu.capability >= (8, 0),
            "current_device": lambda: 0,
            "device_count": lambda: 1,
            "get_device_name": lambda device=None: gpu.model}


def _for_peers(answer: Callable[..., Any], original: Callable[..., Any], peers: tuple[str, ...]) -> Callable[..., Any]:
    """`answer` to a call from the modules `peers`, `original` to anyone else's."""
    @functools.wraps(original)
    def asked(*args: Any, **kwargs: Any) -> Any:
        return answer(*args, **kwargs) if _from_peer(peers) else original(*args, **kwargs)

    return asked


@contextlib.contextmanager
def seen_as(target: Device, stand_in: str = "meta") -> Iterator[None]:
    """Within: a meta tensor's `device` is the first device of `target`'s kind to the peers'
    code (`Variant.peer`), a tensor made on a device of that kind is made on `meta`, and for a
    GPU the peers' questions to `torch.cuda` are answered from its card (`Device.card`: a named
    target's, `targets.DEFAULT_GPU` for 'cuda'). The host changes nothing (a meta tensor takes
    a peer's host branch already). `stand_in`: the device type that stands in for the target
    instead of meta ('cpu': fake tensors, a sharded step)."""
    if target.is_host:
        yield
        return
    seen = torch.device(target.kind, 0)
    answers = cuda_answers(target.card) if target.card is not None else {}
    cuda = {name: getattr(torch.cuda, name) for name in answers}
    peers = variants.peer_modules()

    def device(self: torch.Tensor) -> torch.device:
        real = REAL_DEVICE.__get__(self)
        return seen if real.type == stand_in and _from_peer(peers) else real

    methods = {name: _on_meta(target, getattr(torch.Tensor, name), name == "to", stand_in) for name in METHODS}
    factories = {name: _on_meta(target, getattr(torch, name), False, stand_in) for name in FACTORIES}
    with TENSOR({"device": property(device), **methods}), TORCH(factories), \
            CUDA({name: _for_peers(answers[name], fn, peers) for name, fn in cuda.items()}):
        yield


@contextlib.contextmanager
def unseen() -> Iterator[None]:
    """Within (inside `seen_as` or not): torch's own factories and tensor methods, for work
    that is not the step's (inductor compiling a graph for the target makes its fake tensors
    on the target's device)."""
    with TORCH(_TORCH_FACTORIES), TENSOR(_TENSOR_METHODS):
        yield
