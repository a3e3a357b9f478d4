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
`torch.compile`d code, where Dynamo skips frames while a dispatch mode is active. A custom
op (`torch.library.custom_op`) whose kernel is Python, as `F.linear_cross_entropy`'s chunked
ops are, is run by that Python under the tracker, so that its internal buffers are seen
(`transparent`); one whose kernel is not (its fake kernel would allocate only its outputs)
is listed in `opaque`.

Where the autograd engine sums two gradients for one input in place on a device, it does so
under the tracker too (`accumulated_into`), though a dispatch mode makes the engine add out
of place.

`OpTracker` also records which op made each storage, its shape and dtype, and the phase
of the step (`cebench.measure.timeline`), for `cebench explain`.
"""
from __future__ import annotations

import functools
import sys
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar, cast

import torch

from cebench.core.memory import round_up
from cebench.engine.fake_world import FUNCTIONAL, WAIT, WRITES_INTO
from cebench.engine.op_cache import OpCache
from cebench.measure.timeline import (
    BACKWARD,
    FORWARD,
    NO_OP,
    RECOMPUTE,
    RNG_STATE,
    Timeline,
    TimelineBuilder,
    dtype_name,
    marking,
    op_name,
)
from cebench.models.fsdp import local
from cebench.shims.torch_names import (
    OpOverload,
    TorchDispatchMode,
    current_autograd_node,
    custom_op_kernel,
    is_non_overlapping_and_dense,
    is_zero_tensor,
    node_call,
    pytree,
    schema,
    storage_key,
    storage_uses,
    tensor_uses,
)

# What the tracker shows each op it runs (func, args, kwargs, outputs), a custom op's Python kernel's too: a FLOP
# count (`shims.flop_counter.count_op` on a counter), the ops' costs (`Costs.op`), a time model.
Observer = Callable[[OpOverload, tuple, dict, object], None]
# The bytes of the buffers a collective (func, args) holds inside itself, (before its output is made, after)
# (`fake_world.gloo_temporaries`).
Temporaries = Callable[[OpOverload, tuple], tuple[list[int], list[int]]]
Recorded = TypeVar("Recorded")  # what a tracker records besides the bytes (`StorageTracker.recorded`)

# ATen ops that run on cuBLAS on a GPU (each thread that runs one gets a cuBLAS handle and workspace).
BLAS_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "_scaled_mm",
                      "_int_mm", "_addmm_activation"})


class StorageTracker(TorchDispatchMode, Generic[Recorded]):
    """Running total (`current`) and high-water mark (`peak`) of new storages, in bytes,
    each rounded up to `granularity`, or charged as `granularity(nbytes)` says when it is a
    function (a target's `Device.block_bytes`). `blas` holds the phases ('forward',
    'backward': the autograd engine's thread) in which a cuBLAS op (a matmul) ran.
    `device_types`: count only storages on these kinds of device (None: every one; a step on
    `meta` for a GPU leaves out the host tensors an optimizer makes). `observers` are shown
    every op it runs; `cache` answers ops on meta seen before; `temporaries` says what a
    collective holds inside itself (None: nothing)."""

    def __init__(self, ignore: Iterable[torch.Tensor] = (), granularity: int | Callable[[int], int] = 1,
                 device_types: frozenset[str] | None = None, *, observers: Sequence[Observer] = (),
                 cache: OpCache | None = None, temporaries: Temporaries | None = None) -> None:
        super().__init__()
        _lone_holds()  # found once, before any step runs
        self.granularity = granularity
        self._types = device_types
        self._observers = tuple(observers)
        self._cache = cache
        self._temporaries = temporaries
        self._block = charge(granularity)
        self.blas: set[str] = set()
        self.current = 0
        self.peak = 0
        self._sizes: dict[int, int] = {}
        self._ignored = {storage_key(t.untyped_storage()) for t in ignore}
        self.opaque: set[str] = set()  # custom ops seen: their internal buffers are invisible here
        self.transparent: set[str] = set()  # custom ops run by their Python kernel: their buffers are seen
        self.scope = ""  # what FSDP is doing, when its storages are made (`fake_world.follow`): their op's name
        self.paused = 0  # > 0: no op is counted or shown (DTensor propagating an op's sharding: `fake_world.follow`)

    def _release(self, key: int) -> None:
        self.current -= self._sizes.pop(key, 0)
        self._changed(key, None)

    def _changed(self, key: int, tensor: torch.Tensor | None) -> None:
        """Storage `key` was registered or resized (`tensor`: the output that showed it) or
        released (None). Nothing to do here; `OpTracker` records it."""

    def recorded(self) -> Recorded:
        """What it recorded besides the bytes, once its `with` block is left (`trace.Trace.record`):
        nothing here (a `StorageTracker[None]`), a subclass's log."""
        return cast("Recorded", None)

    def rng_state(self, state: torch.Tensor) -> None:
        """Count a CPU RNG state, which `torch.get_rng_state()` makes outside the dispatcher."""
        self.track(state)

    def wrap(self, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """The loss function to run under this tracker: `fn` itself (`OpTracker` marks where
        the forward returns)."""
        return fn

    def track(self, tensor: torch.Tensor) -> None:
        """Count `tensor`'s storage (once; again if it was resized); a DTensor's local shard's."""
        storage = local(tensor).untyped_storage()
        key = storage_key(storage)  # the StorageImpl's address: the same for every view
        if key in self._ignored or (self._types is not None and storage.device.type not in self._types):
            return
        nbytes = self._block(storage.nbytes())
        old = self._sizes.get(key)
        if old == nbytes:
            return
        if old is None:
            weakref.finalize(storage, self._release, key)
        self._sizes[key] = nbytes
        self.current += nbytes - (old or 0)
        self.peak = max(self.peak, self.current)
        self._changed(key, tensor)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if _dtensor_in(types):  # DTensor runs its local ops (and collectives), which come back here
            return NotImplemented
        if self.paused:  # DTensor finding an op's output shapes on global-shape tensors: no work of this rank's
            return func(*args, **(kwargs or {}))
        if func is _ADD and not kwargs and (into := accumulated_into(args)) is not None:
            out = into.add_(args[1])  # below this mode: no new storage
            for observe in self._observers:
                observe(func, args, {}, out)
            return out
        kernel = None
        name = schema(func).name
        if name == WAIT:  # on a real process group it returns its input (a fake kernel makes a new tensor)
            return args[0]
        before, after = self._temporaries(func, args) if self._temporaries is not None else ([], [])
        self._hold(before, args)
        if func.namespace not in ("aten", "prims", "profiler") and name not in WRITES_INTO and name not in FUNCTIONAL:
            kernel = custom_op_kernel(func, _device_type(args))  # profiler: record_function marks (optimizers)
            (self.opaque if kernel is None else self.transparent).add(str(func))
        elif name.removeprefix("aten::") in BLAS_OPS:
            self.blas.add(FORWARD if current_autograd_node() is None else BACKWARD)
        if kernel is not None:
            with self:  # the kernel's own ops come through here (and through any mode below: a FLOP counter)
                out = kernel(*args, **(kwargs or {}))
        else:
            if self._cache is not None:
                out = self._cache.run(func, args, kwargs or {}, lambda: func(*args, **(kwargs or {})))
            else:
                out = func(*args, **(kwargs or {}))
            for observe in self._observers:  # here, not by modes of their own: one dispatch less per op
                observe(func, args, kwargs or {}, out)
        for value in pytree.tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self.track(value)
        self._hold(after, args)
        return out


    def _hold(self, sizes: list[int], args: tuple) -> None:
        """Count buffers of `sizes` bytes held at once for a moment (inside an op with `args`, on
        their device)."""
        if not sizes:  # most ops: no walk over their arguments
            return
        device = _device_type(args)
        held = [torch.empty(n, dtype=torch.uint8, device=device) for n in sizes]
        for buffer in held:
            self.track(buffer)
        del held


_ADD = torch.ops.aten.add.Tensor


def _dtensor_in(types: Sequence[type]) -> bool:
    """Whether a DTensor is among an op's argument `types` (none can be before DTensor's
    module is imported)."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and module.DTensor in types


def accumulated_into(args: tuple) -> torch.Tensor | None:
    """The gradient the autograd engine adds `args[1]` into in place, where this `add` is
    its sum of two gradients for one input (a tied weight's, a residual stream's); None: a
    new tensor, as the op says.

    Summing a gradient `var` into the one its input buffer holds, `old`, the engine writes
    into `old` when it holds the last reference to it and to its storage and `old` is dense
    (`torch/csrc/autograd/input_buffer.cpp`), but while a dispatch mode is on it counts every
    tensor a subclass and adds out of place: one buffer more than the device holds. This is
    its test, seen from the mode: `old + var` in a backward with grad mode off, of two
    tensors of one shape, dtype and device, `old` dense and held by the engine alone: its
    references (C++ and Python) what a lone gradient's are here (`_lone_holds`), and no other
    tensor on its storage."""
    if torch.is_grad_enabled() or current_autograd_node() is None or len(args) != 2:
        return None
    if _holds(args) != _lone_holds():  # first: a local name for `old` would be one reference more
        return None
    old, new = args
    if not isinstance(new, torch.Tensor) or old.shape != new.shape or old.dtype != new.dtype \
            or old.device != new.device:
        return None
    storage = old.untyped_storage()  # a reference to the storage itself: one use more
    alone = storage_uses(storage) == 2
    dense = is_non_overlapping_and_dense(old) and not old.is_nested and not is_zero_tensor(old)
    return old if alone and dense else None


def _holds(args: tuple) -> tuple[int, int] | None:
    """The references to `args[0]` seen from here: its TensorImpl's use count and its
    Python object's reference count (None: not a plain tensor)."""
    if not isinstance(args[0], torch.Tensor):
        return None
    return tensor_uses(args[0]), sys.getrefcount(args[0])


@functools.cache
def _lone_holds() -> tuple[int, int] | None:
    """`_holds` of a gradient only the engine's input buffer holds, seen from a dispatch mode:
    two products' gradients, each made once, summed for their common input."""
    seen: list[tuple[int, int] | None] = []

    class Probe(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is _ADD and current_autograd_node() is not None:
                seen.append(_holds(args))
            return func(*args, **(kwargs or {}))

    leaf = torch.empty(4, device="meta", requires_grad=True)
    with torch.enable_grad(), Probe():
        (leaf * 2 + leaf * 3).sum().backward()
    return seen[0]


def charge(granularity: int | Callable[[int], int]) -> Callable[[int], int]:
    """What an allocator charges a request of n bytes: `granularity(n)` when it is a function
    (a target's `Device.block_bytes`), else n rounded up to a multiple of it."""
    return granularity if callable(granularity) else (lambda n: round_up(n, granularity))


def _device_type(args: tuple) -> str | None:
    """The device type of the first tensor among `args`."""
    return next((a.device.type for a in pytree.tree_flatten(args)[0] if isinstance(a, torch.Tensor)), None)


class OpTracker(StorageTracker[Timeline]):
    """A `StorageTracker` that also records the step as a `Timeline`: each storage with the
    op that made it, that output's shape and dtype, the phase and the autograd node running
    (`current_autograd_node()`). An op run inside a backward node with grad mode
    on is forward work recomputed there (checkpointing). The step's function marks where its
    forward returns (`wrap`); the recording ends with the `with` block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # `StorageTracker`'s
        super().__init__(*args, **kwargs)
        self._builder = TimelineBuilder()
        self._recording = True
        self._entered = 0  # how deep inside its own `with` blocks: a Python kernel's ops enter it again
        self._backward = False
        self._op = NO_OP
        self._node: tuple[int, int] | None = None
        self._region = 0

    def mark(self, output: torch.Tensor) -> None:
        """The forward returned `output` (the loss): what follows is the backward."""
        self._backward = True
        self._builder.mark_backward(storage_key(output.untyped_storage()))

    def wrap(self, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        return marking(fn, self.mark)

    def rng_state(self, state: torch.Tensor) -> None:
        self._op = RNG_STATE
        self.track(state)

    def __enter__(self) -> OpTracker:
        self._entered += 1
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        self._entered -= 1
        if not self._entered:  # the step's block, not a custom op's kernel run inside it (`with self:`)
            self._recording = False  # the inputs' gradients, freed later, stay alive in the timeline
        return super().__exit__(*exc)

    def timeline(self) -> Timeline:
        """What was recorded inside the `with` block."""
        return self._builder.build()

    def recorded(self) -> Timeline:
        return self.timeline()

    def _context(self) -> tuple[str, str | None, int | None]:
        """(phase, autograd node, region: a number per node call) at this moment."""
        node = current_autograd_node()
        if node is None:
            return (BACKWARD if self._backward else FORWARD), None, None
        key = (id(node), node_call(node))
        if key != self._node:
            self._node, self._region = key, self._region + 1
        return (RECOMPUTE if torch.is_grad_enabled() else BACKWARD), node.name(), self._region

    def _changed(self, key: int, tensor: torch.Tensor | None) -> None:
        if not self._recording:
            return
        phase, node, region = self._context()
        if key in self._builder.live:  # released, or resized: the old size is freed first
            self._builder.free(key, 0, region)
        if tensor is not None:
            self._builder.alloc(key, self._sizes[key], self.scope or self._op, phase, node, tuple(tensor.shape),
                                dtype_name(tensor.dtype), region)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._op = op_name(schema(func).name)
        return super().__torch_dispatch__(func, types, args, kwargs)
