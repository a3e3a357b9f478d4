"""A dispatcher-level storage tracker: the bytes of the tensors a step holds, op by op.

Every output of every ATen op that reaches the dispatcher is inspected: a storage seen for
the first time is registered with its size, a storage whose size changed (`resize_`,
`out=` ops) is re-counted, and a weak-reference finaliser on the storage releases its
bytes when the storage dies. The running total and its peak are therefore the live bytes
of tensors created during the step. Storages passed in as `ignore` (the inputs) are never
counted, nor any view of them.

It works on `meta`, CPU and CUDA tensors alike. On `meta` nothing is allocated or
computed, so a step of any size is tracked in milliseconds. It cannot see allocations that
bypass the dispatcher (a kernel's internal workspace, `torch.get_rng_state()`), nor inside
`torch.compile`d code, where Dynamo skips frames while a dispatch mode is active, nor inside
a custom op (`torch.library.custom_op`, e.g. `F.linear_cross_entropy`'s chunked op), whose
fake kernel allocates only its outputs: those ops are listed in `opaque`.
"""
from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from cebench.measure.memory import round_up

CUDA_BLOCK_BYTES = 512  # the CUDA caching allocator rounds every block up to 512 bytes


class StorageTracker(TorchDispatchMode):
    """Running total (`current`) and high-water mark (`peak`) of new storages, in bytes,
    each rounded up to `granularity` (512 to model the CUDA caching allocator)."""

    def __init__(self, ignore: Iterable[torch.Tensor] = (), granularity: int = 1) -> None:
        super().__init__()
        self.granularity = granularity
        self.current = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}
        self._ignored = {t.untyped_storage()._cdata for t in ignore}
        self.opaque: set[str] = set()  # custom ops seen: their internal buffers are invisible here

    def _release(self, key: int) -> None:
        self.current -= self._sizes.pop(key, 0)

    def track(self, tensor: torch.Tensor) -> None:
        """Count `tensor`'s storage (once; again if it was resized)."""
        storage = tensor.untyped_storage()
        key = storage._cdata  # the StorageImpl's address: the same for every view
        if key in self._ignored:
            return
        nbytes = round_up(storage.nbytes(), self.granularity)
        old = self._sizes.get(key)
        if old == nbytes:
            return
        if old is None:
            weakref.finalize(storage, self._release, key)
        self._sizes[key] = nbytes
        self.current += nbytes - (old or 0)
        self.peak = max(self.peak, self.current)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace not in ("aten", "prims"):
            self.opaque.add(str(func))
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self.track(value)
        return out
