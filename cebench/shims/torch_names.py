"""The private torch names cebench reads, each declared (`cebench.core.patched.Read`: where it
is, why, the releases that have it) and read through its declaration; what cebench replaces
is declared in the other shims. Every other module reads them through here
(tests/test_shims.py holds that). The canary (`cebench.shims.moved`) looks for each, and a
read of one a release moved raises `MovedError` naming it and the releases it was checked
with, not a bare AttributeError: it is fixed here.

Each is resolved once, on first use; an object's attribute (an op's schema, a storage's
identity) is read off the object. What other modules import from here (a class they
subclass, the profiler's event types, pytree) is read on first import of it (`__getattr__`),
so that this module imports, and the canary names every moved read, on any release.

A trace works at the dispatcher, whose vocabulary is private by nature: an op overload's
schema and packet, a storage's identity and use count, the autograd node running, the
dispatch modes, fake tensors, pytree. ATen ops whose names begin with an underscore
(`aten._to_copy`) are the dispatcher's names for ops, read as ops anywhere.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch

from cebench.core.patched import Read
from cebench.core.version import TORCH_CHECKED

if TYPE_CHECKING:  # what each exported name is; at run time `__getattr__` reads it through its declaration
    import torch.utils._pytree as pytree
    from torch._C._profiler import _EventType as EventType
    from torch._C._profiler import _ExtraFields_Allocation as AllocationFields
    from torch._C._profiler import _ExtraFields_TorchOp as TorchOpFields
    from torch._C._profiler import _ProfilerEvent as ProfilerEvent
    from torch._C._profiler import _TensorMetadata as TensorMetadata
    from torch._ops import OpOverload
    from torch._subclasses.fake_tensor import FakeTensorMode, is_fake, unset_fake_temporarily
    from torch.utils._python_dispatch import TorchDispatchMode

    is_non_overlapping_and_dense: Callable[[torch.Tensor], bool]

__all__ = ["LOWERS_BACKWARD_AHEAD", "RELEASE", "after_backward", "AllocationFields", "current_autograd_node",
           "custom_op_kernel", "dynamo_frames", "dynamo_reset", "dynamo_supported", "EventType", "fake_collectives",
           "FakeTensorMode", "foreach_devices", "fused_sdp_choice", "import_dynamo", "is_fake",
           "is_non_overlapping_and_dense",
           "is_zero_tensor", "linear_cross_entropy_chunk", "modes_off", "no_dispatch", "node_call", "OpOverload",
           "packet", "ProfilerEvent", "pytree", "schema", "storage_key", "storage_uses", "tensor_uses",
           "TensorMetadata", "TorchDispatchMode", "TorchOpFields", "unset_fake_temporarily"]
CHECKED = {"torch": TORCH_CHECKED}

PROFILER = Read("torch._C._profiler", ("_EventType", "_ExtraFields_Allocation", "_ExtraFields_TorchOp",
                                       "_ProfilerEvent", "_TensorMetadata"),
                "the profiler's event tree: each allocation and the op it happened in (`cebench.measure.allocations`)")
OPS = Read("torch._ops", ("OpOverload",), "an ATen op overload, as the dispatcher passes it")
OVERLOAD = Read("torch._ops.OpOverload", ("_schema", "_overloadpacket"), "an op's schema (its arguments and "
                "returns, with their aliasing) and its overload packet", instance=True)
FAKE = Read("torch._subclasses.fake_tensor", ("FakeTensorMode", "is_fake", "unset_fake_temporarily"),
            "fake tensors: a fake world of ranks, a compile's inputs, data a step reads")
DISPATCH = Read("torch.utils._python_dispatch", ("TorchDispatchMode", "_disable_current_modes"),
                "the dispatch-mode base class of every tracker; the modes taken off their stack")
PYTREE = Read("torch.utils", ("_pytree",), "an op's arguments and outputs, flattened")
C = Read("torch._C", ("_storage_Use_Count", "_current_autograd_node", "_DisableTorchDispatch",
                      "_dispatch_has_kernel_for_dispatch_key"),
         "a storage's use count, the autograd node running, ops made without the dispatch modes, whether the c10d "
         "collectives have meta kernels")
STORAGE = Read("torch.UntypedStorage", ("_cdata",), "the identity of the storage a Python wrapper wraps")
TENSOR = Read("torch.Tensor", ("_use_count", "_is_zerotensor"), "a TensorImpl's use count; whether it is a "
              "ZeroTensor")
NODE = Read("torch._C._functions.AccumulateGrad", ("_sequence_nr",), "which call of its forward made an autograd "
            "node (every C++ node has it; the Python class torch.autograd.graph.Node only from 2.9 on)")
ENGINE = Read("torch.autograd.Variable", ("_execution_engine",), "autograd's engine, which runs a callback once the "
              "backward is done")
TORCH = Read("torch", ("_dynamo", "_fused_sdp_choice"), "Dynamo, imported ahead of a step; the fused attention "
             "backend SDPA picks")
DYNAMO = Read("torch._dynamo", ("reset", "is_dynamo_supported"), "Dynamo's compiled graphs forgotten; whether it "
              "runs here")
DYNAMO_UTILS = Read("torch._dynamo.utils", ("counters",), "how many frames Dynamo began to convert")
CUSTOM_OPS = Read("torch._library.custom_ops", ("OPDEFS",), "the ops defined with `torch.library.custom_op`")
CUSTOM_OP = Read("torch._library.custom_ops.CustomOpDef", ("_backend_fns", "_init_fn"),
                 "a custom op's Python kernels, by device and default", instance=True)
OPTIMIZER = Read("torch.optim.optimizer", ("_get_foreach_kernels_supported_devices",),
                 "the device kinds torch.optim's foreach kernels run on")
LCE_OPTIONS = Read("torch.nn.LinearCrossEntropyOptions", ("_adjust",), "the chunk size `F.linear_cross_entropy` "
                   "picks", since=(2, 13))
# Whether a tensor's elements fill its storage span without overlap (no gaps, any order): 2.9 on, False where
# symbolic shapes cannot tell; 2.8 has concrete shapes only, which are all a trace holds.
DENSE = Read("torch._prims_common", ("is_non_overlapping_and_dense_or_false",),
             "whether a tensor's elements fill its storage span", since=(2, 9))
DENSE_2_8 = Read("torch._prims_common", ("is_non_overlapping_and_dense",),
                 "whether a tensor's elements fill its storage span", before=(2, 9))
LOWERING = Read("torch._functorch.config", ("force_non_lazy_backward_lowering",),
                "AOTAutograd told to lower a compiled backward with its forward", since=(2, 9))

RELEASE: str = torch.__version__.split("+")[0]  # '2.13.0': the release, without its build tag
# Whether AOTAutograd can be told to lower a compiled backward with its forward (2.9 on); torch 2.8 lowers it
# lazily, when the backward first runs (`cebench.engine.compiled` lowers it there then).
LOWERS_BACKWARD_AHEAD: bool = LOWERING.applies()
# What other modules import from here that is torch's: the declaration and name it is read through.
_EXPORTED: dict[str, tuple[Read, str]] = {
    "EventType": (PROFILER, "_EventType"), "AllocationFields": (PROFILER, "_ExtraFields_Allocation"),
    "TorchOpFields": (PROFILER, "_ExtraFields_TorchOp"), "ProfilerEvent": (PROFILER, "_ProfilerEvent"),
    "TensorMetadata": (PROFILER, "_TensorMetadata"), "OpOverload": (OPS, "OpOverload"),
    "FakeTensorMode": (FAKE, "FakeTensorMode"), "is_fake": (FAKE, "is_fake"),
    "unset_fake_temporarily": (FAKE, "unset_fake_temporarily"), "TorchDispatchMode": (DISPATCH, "TorchDispatchMode"),
    "pytree": (PYTREE, "_pytree"),
    "is_non_overlapping_and_dense": (DENSE, "is_non_overlapping_and_dense_or_false") if DENSE.applies() else
    (DENSE_2_8, "is_non_overlapping_and_dense")}


def __getattr__(name: str) -> Any:
    """An exported name of torch's, read through its declaration (`MovedError` where this
    release lacks it)."""
    if name not in _EXPORTED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    read, attr = _EXPORTED[name]
    return read.get(attr)


def import_dynamo() -> None:
    """Import Dynamo (`torch._dynamo`: seconds), which torch imports the first time a step
    calls what it wraps (an optimizer's step, checkpointing, torch.compile)."""
    TORCH.get("_dynamo")


def dynamo_frames() -> int:
    """How many frames Dynamo has begun to convert in this process (its `frames` counter)."""
    return int(DYNAMO_UTILS.get("counters")["frames"]["total"])


@functools.cache
def fake_collectives() -> bool:
    """Whether torch's c10d collectives have meta kernels, which a fake world of ranks under
    `FakeTensorMode` runs (torch 2.9 on; 2.8 has none: an FSDP step cannot be followed)."""
    import torch.distributed  # registers the c10d ops

    return bool(torch.distributed.is_available()) and C.get("_dispatch_has_kernel_for_dispatch_key")(
        "c10d::_allgather_base_", "Meta")


def schema(op: OpOverload) -> torch.FunctionSchema:
    """`op`'s schema: its arguments and returns, with their aliasing."""
    return OVERLOAD.of(op, "_schema")


def packet(op: OpOverload) -> object:
    """`op`'s overload packet (`aten.addmm` for `aten.addmm.default`)."""
    return OVERLOAD.of(op, "_overloadpacket")


def storage_key(storage: torch.UntypedStorage) -> int:
    """The identity of the storage `storage` wraps (equal for every Python wrapper of it)."""
    return int(STORAGE.of(storage, "_cdata"))


def storage_uses(storage: torch.UntypedStorage) -> int:
    """How many references the storage `storage` wraps has (C++ and Python)."""
    return int(C.get("_storage_Use_Count")(STORAGE.of(storage, "_cdata")))


def current_autograd_node() -> Any:
    """The autograd node whose backward is running on this thread (None: none is)."""
    return C.get("_current_autograd_node")()


def node_call(node: Any) -> int:
    """The sequence number of autograd node `node`: which call of its forward made it."""
    return int(NODE.of(node, "_sequence_nr")())


def is_zero_tensor(t: torch.Tensor) -> bool:
    """Whether `t` is a ZeroTensor (an efficient zero with no storage of its own)."""
    return bool(TENSOR.of(t, "_is_zerotensor")())


def tensor_uses(t: torch.Tensor) -> int:
    """How many references `t`'s TensorImpl has (C++ and Python)."""
    return int(TENSOR.of(t, "_use_count")())


def custom_op_kernel(op: OpOverload, device_type: str | None) -> Callable[..., object] | None:
    """The Python kernel of a `torch.library.custom_op` for tensors on `device_type` (its
    kernel registered for that device, else its default one), or None when `op` is no such
    op (a C++ op, or one defined with `torch.library.Library`)."""
    opdef = CUSTOM_OPS.get("OPDEFS").get(schema(op).name)
    if opdef is None:
        return None
    return CUSTOM_OP.of(opdef, "_backend_fns").get(device_type) or CUSTOM_OP.of(opdef, "_init_fn")


def no_dispatch() -> contextlib.AbstractContextManager[None]:
    """Within: ops reach no Python dispatch mode (their results are made here, not by the step)."""
    return cast("contextlib.AbstractContextManager[None]", C.get("_DisableTorchDispatch")())


def after_backward(callback: Callable[[], None]) -> None:
    """Run `callback` once the backward pass now running is done (autograd's engine queue)."""
    ENGINE.get("_execution_engine").queue_callback(callback)


def foreach_devices() -> list[str]:
    """The device kinds torch.optim's foreach kernels run on."""
    return list(OPTIMIZER.get("_get_foreach_kernels_supported_devices")())


def linear_cross_entropy_chunk(tokens: int, d_model: int, vocab: int, dtype: torch.dtype,
                               device: torch.device) -> int:
    """The batch chunk size `F.linear_cross_entropy` picks for `LinearCrossEntropyOptions()` at
    `tokens` rows of `d_model` over `vocab` classes (its own `_adjust`)."""
    adjust = LCE_OPTIONS.of(torch.nn.LinearCrossEntropyOptions(), "_adjust")
    picked = adjust(num_batches=tokens, in_features=d_model, num_classes=vocab, dtype=dtype, device=device)
    return int(picked.batch_chunk_size)


def dynamo_reset() -> None:
    """Forget every graph Dynamo compiled in this process."""
    DYNAMO.get("reset")()


def dynamo_supported() -> bool:
    """Whether Dynamo runs on this Python and platform."""
    return bool(DYNAMO.get("is_dynamo_supported")())


def fused_sdp_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> int:
    """The fused attention backend `F.scaled_dot_product_attention` would pick for these
    tensors (an `SDPBackend` value)."""
    return int(TORCH.get("_fused_sdp_choice")(q, k, v, **kwargs))


def modes_off() -> contextlib.AbstractContextManager[object]:
    """Within: no Python dispatch mode is on (they are taken off their stack, and put back)."""
    return cast("contextlib.AbstractContextManager[object]", DISPATCH.get("_disable_current_modes")())
