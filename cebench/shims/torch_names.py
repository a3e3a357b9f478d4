"""The private torch names cebench reads (what it replaces is declared in
`cebench.shims`), each resolved here once, with the releases it was checked in where
its home or name differs between those cebench supports (`cebench.core.version.TORCH_RANGE`).
Every other module reads them through here (tests/test_shims.py holds that), so a release
that moves one fails here, naming it, and is fixed here.

A trace works at the dispatcher, whose vocabulary is private by nature: an op overload's
schema and packet, a storage's identity and use count, the autograd node running, the
dispatch modes, fake tensors, pytree. ATen ops whose names begin with an underscore
(`aten._to_copy`) are the dispatcher's names for ops, read as ops anywhere.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, cast

import torch
import torch._functorch.config
import torch.utils._pytree as pytree  # re-exported (`__all__`), as those below
from torch._C import _profiler
from torch._ops import OpOverload  # an ATen op overload, as the dispatcher passes it
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode  # the dispatch-mode base class

__all__ = ["LOWERS_BACKWARD_AHEAD", "RELEASE", "after_backward", "AllocationFields", "current_autograd_node",
           "custom_op_kernel", "dynamo_frames", "dynamo_reset", "dynamo_supported", "EventType", "fake_collectives",
           "FakeTensorMode", "foreach_devices", "fused_sdp_choice", "import_dynamo", "is_fake",
           "is_non_overlapping_and_dense",
           "is_zero_tensor", "linear_cross_entropy_chunk", "modes_off", "no_dispatch", "node_call", "OpOverload",
           "packet", "ProfilerEvent", "pytree", "schema", "storage_key", "storage_uses", "tensor_uses",
           "TensorMetadata", "TorchDispatchMode", "TorchOpFields", "unset_fake_temporarily"]
# The profiler's event tree (`cebench.measure.allocations`).
EventType = _profiler._EventType
AllocationFields = _profiler._ExtraFields_Allocation
TorchOpFields = _profiler._ExtraFields_TorchOp
ProfilerEvent = _profiler._ProfilerEvent
TensorMetadata = _profiler._TensorMetadata
RELEASE: str = torch.__version__.split("+")[0]  # '2.13.0': the release, without its build tag


def _dense_check() -> Callable[[torch.Tensor], bool]:
    """Whether a tensor's elements fill its storage span without overlap (no gaps, any order).
    torch 2.9 on: `is_non_overlapping_and_dense_or_false` (False where symbolic shapes cannot
    tell); 2.8: `is_non_overlapping_and_dense` (concrete shapes only, which are all a trace
    holds)."""
    import torch._prims_common as prims

    found = getattr(prims, "is_non_overlapping_and_dense_or_false", None) or \
        getattr(prims, "is_non_overlapping_and_dense", None)
    if found is None:
        raise ImportError(f"torch {torch.__version__}: torch._prims_common has neither "
                          "is_non_overlapping_and_dense_or_false (2.9 on) nor is_non_overlapping_and_dense (2.8)")
    return found


is_non_overlapping_and_dense = _dense_check()
# Whether AOTAutograd can be told to lower a compiled backward with its forward
# (`torch._functorch.config.force_non_lazy_backward_lowering`, 2.9 on); torch 2.8 lowers it
# lazily, when the backward first runs (`cebench.engine.compiled` lowers it there then).
LOWERS_BACKWARD_AHEAD: bool = hasattr(torch._functorch.config, "force_non_lazy_backward_lowering")


def import_dynamo() -> None:
    """Import Dynamo (`torch._dynamo`: seconds), which torch imports the first time a step
    calls what it wraps (an optimizer's step, checkpointing, torch.compile)."""
    import torch._dynamo  # noqa: F401


def dynamo_frames() -> int:
    """How many frames Dynamo has begun to convert in this process (its `frames` counter)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["total"])


@functools.cache
def fake_collectives() -> bool:
    """Whether torch's c10d collectives have meta kernels, which a fake world of ranks under
    `FakeTensorMode` runs (torch 2.9 on; 2.8 has none: an FSDP step cannot be followed)."""
    import torch.distributed  # registers the c10d ops

    return bool(torch.distributed.is_available()) and torch._C._dispatch_has_kernel_for_dispatch_key(
        "c10d::_allgather_base_", "Meta")


def schema(op: OpOverload) -> torch.FunctionSchema:
    """`op`'s schema: its arguments and returns, with their aliasing."""
    return op._schema


def packet(op: OpOverload) -> object:
    """`op`'s overload packet (`aten.addmm` for `aten.addmm.default`)."""
    return op._overloadpacket


def storage_key(storage: torch.UntypedStorage) -> int:
    """The identity of the storage `storage` wraps (equal for every Python wrapper of it)."""
    return int(storage._cdata)


def storage_uses(storage: torch.UntypedStorage) -> int:
    """How many references the storage `storage` wraps has (C++ and Python)."""
    return int(torch._C._storage_Use_Count(storage._cdata))


def current_autograd_node() -> Any:
    """The autograd node whose backward is running on this thread (None: none is)."""
    return torch._C._current_autograd_node()


def node_call(node: Any) -> int:
    """The sequence number of autograd node `node`: which call of its forward made it."""
    return int(node._sequence_nr())


def is_zero_tensor(t: torch.Tensor) -> bool:
    """Whether `t` is a ZeroTensor (an efficient zero with no storage of its own)."""
    return bool(t._is_zerotensor())


def tensor_uses(t: torch.Tensor) -> int:
    """How many references `t`'s TensorImpl has (C++ and Python)."""
    return int(t._use_count())  # type: ignore[attr-defined]


def custom_op_kernel(op: OpOverload, device_type: str | None) -> Callable[..., object] | None:
    """The Python kernel of a `torch.library.custom_op` for tensors on `device_type` (its
    kernel registered for that device, else its default one), or None when `op` is no such
    op (a C++ op, or one defined with `torch.library.Library`)."""
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS.get(op._schema.name)
    if opdef is None:
        return None
    return opdef._backend_fns.get(device_type) or opdef._init_fn


def no_dispatch() -> contextlib.AbstractContextManager[None]:
    """Within: ops reach no Python dispatch mode (their results are made here, not by the step)."""
    return cast("contextlib.AbstractContextManager[None]", torch._C._DisableTorchDispatch())


def after_backward(callback: Callable[[], None]) -> None:
    """Run `callback` once the backward pass now running is done (autograd's engine queue)."""
    torch.autograd.Variable._execution_engine.queue_callback(callback)


def foreach_devices() -> list[str]:
    """The device kinds torch.optim's foreach kernels run on."""
    from torch.optim.optimizer import _get_foreach_kernels_supported_devices

    return list(_get_foreach_kernels_supported_devices())


def linear_cross_entropy_chunk(tokens: int, d_model: int, vocab: int, dtype: torch.dtype,
                               device: torch.device) -> int:
    """The batch chunk size `F.linear_cross_entropy` picks for `LinearCrossEntropyOptions()` at
    `tokens` rows of `d_model` over `vocab` classes (its own `_adjust`)."""
    picked = torch.nn.LinearCrossEntropyOptions()._adjust(num_batches=tokens, in_features=d_model,
                                                           num_classes=vocab, dtype=dtype, device=device)
    return int(picked.batch_chunk_size)


def dynamo_reset() -> None:
    """Forget every graph Dynamo compiled in this process."""
    torch._dynamo.reset()


def dynamo_supported() -> bool:
    """Whether Dynamo runs on this Python and platform."""
    return bool(torch._dynamo.is_dynamo_supported())


def fused_sdp_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: Any) -> int:
    """The fused attention backend `F.scaled_dot_product_attention` would pick for these
    tensors (an `SDPBackend` value)."""
    return int(torch._fused_sdp_choice(q, k, v, **kwargs))


def modes_off() -> contextlib.AbstractContextManager[object]:
    """Within: no Python dispatch mode is on (they are taken off their stack, and put back)."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()
