"""torch.compile's internals as a trace on `meta` drives them (`cebench.engine.compiled`):
Dynamo's capture of one graph, AOTAutograd's partition and inductor's lowering without
building a kernel, for a named card on a machine without it, the modules inductor writes
loaded as cebench says (their buffers made on meta), a module's compiled call, and the
saved-tensors hooks a compile must not see."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

import torch

from cebench.core.patched import Replaced
from cebench.core.version import TORCH_CHECKED
from cebench.shims.torch_names import LOWERS_BACKWARD_AHEAD, dynamo_frames, dynamo_reset

if TYPE_CHECKING:
    from torch._subclasses.fake_tensor import FakeTensorMode

CHECKED = {"torch": TORCH_CHECKED}
CODECACHE = Replaced("torch._inductor.codecache.PyCodeCache", ("load_by_key_path",),
                     "the modules inductor writes, loaded fresh with cebench's kernels and buffers on meta")
ASYNC_COMPILE = Replaced("torch._inductor.async_compile.AsyncCompile", ("cpp_pybinding", "cpp", "triton", "wait"),
                         "every kernel inductor would build: a no-op that shows its launch")
SCHEDULER = Replaced("torch._inductor.scheduler", ("has_triton",), "Triton counts as present for a GPU target")
TRITON_UTILS = Replaced("torch.utils._triton", ("triton_hash_with_backend", "triton_backend"),
                        "no GPU backend asked for while inductor keys its Triton code")
CUDA_INTERFACE = Replaced("torch._dynamo.device_interface.CudaInterface",
                          ("get_device_properties", "current_device", "device_count", "is_bf16_supported",
                           "get_compute_capability"), "inductor's questions about the card, answered from the target")
CUDA_WORKER = Replaced("torch._dynamo.device_interface.CudaInterface.Worker",
                       ("get_device_properties", "current_device"),
                       "the same questions asked by inductor's compile workers")
COMPILED_CALL = Replaced("torch.nn.Module", ("_compiled_call_impl",),
                         "a block's compiled call (`nn.Module.compile()` installs one): inductor's code run on meta")
# Each module inductor writes, loaded by cebench, has the names its header binds set: `empty_strided_<device>` (bound
# to these allocators, which the canary checks) and `torch`.
WRAPPER = Replaced("torch._C._dynamo.guards", ("_empty_strided_cpu", "_empty_strided_cuda", "_empty_strided_xpu"),
                   "a module inductor wrote: its buffers made on meta, its `torch` without a GPU's device guard",
                   found=True)


def fake_mode() -> FakeTensorMode:
    """A new `FakeTensorMode` (tensors with shapes, dtypes and devices, and no data)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def fake_mode_of(inputs: list[Any]) -> FakeTensorMode | None:
    """The fake mode `inputs` belong to (None: they are not fake)."""
    from torch._guards import detect_fake_mode

    return detect_fake_mode(inputs)


def module_call(module: torch.nn.Module) -> Callable[..., Any]:
    """`module`'s call as `nn.Module.compile()` compiles it (its `_call_impl`, not its class's
    `__call__`)."""
    return module._call_impl


def capture(call: Callable[..., Any], args: tuple, kwargs: dict,
            backend: Callable[..., Any]) -> tuple[Any, bool]:
    """`call(*args, **kwargs)` under `torch.compile(backend=backend, dynamic=False)`, from a
    reset Dynamo: what it returned and whether Dynamo began to convert a frame at all."""
    dynamo_reset()
    frames = dynamo_frames()
    out = torch.compile(call, backend=backend, dynamic=False)(*args, **kwargs)
    return out, dynamo_frames() != frames


def compile_fx(graph: torch.fx.GraphModule, example_inputs: list[Any],
               inner: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[..., Any]:
    """inductor's `compile_fx` of `graph`, its inner compiler of each partitioned graph
    `inner(compile_fx_inner)`."""
    from torch._inductor.compile_fx import compile_fx as compile_graph
    from torch._inductor.compile_fx import compile_fx_inner

    return cast("Callable[..., Any]", compile_graph(graph, example_inputs, inner_compile=inner(compile_fx_inner)))


@contextlib.contextmanager
def fresh_lowering() -> Iterator[None]:
    """Within: inductor and AOTAutograd compile from nothing cached, forward and backward at
    once where the release can (2.9 on; torch 2.8 lowers the backward when it first runs)."""
    functorch: dict[str, Any] = {"enable_autograd_cache": False}
    if LOWERS_BACKWARD_AHEAD:
        functorch["force_non_lazy_backward_lowering"] = True
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(functorch):
        yield


@contextlib.contextmanager
def outside_saved_tensors_hooks() -> Iterator[None]:
    """Within: no saved-tensors hooks (a checkpointed block's, compiled on its first call
    inside `torch.utils.checkpoint`, would otherwise count the compile's own saved tensors
    as the block's); they are back after."""
    autograd = torch._C._autograd
    hooks = []
    while (top := autograd._top_saved_tensors_default_hooks(True)) is not None:
        hooks.append(top)
        autograd._pop_saved_tensors_default_hooks()
    try:
        yield
    finally:
        for pack, unpack in reversed(hooks):
            autograd._push_saved_tensors_default_hooks(pack, unpack)


def card_interface(answers: Mapping[str, Callable[..., Any]], capability: tuple[int, int]) -> list[
        contextlib.AbstractContextManager[None]]:
    """The replacements that make inductor's CUDA device interface (and its workers') answer
    from a card: `answers` as `cebench.engine.device_view.cuda_answers` gives them, and its
    compute `capability` (major, minor)."""
    interface = {name: staticmethod(answers[name]) for name in ("get_device_properties", "current_device",
                                                                "device_count", "is_bf16_supported")}
    computed = staticmethod(lambda device=None: capability[0] * 10 + capability[1])
    return [CUDA_INTERFACE({**interface, "get_compute_capability": computed}),
            CUDA_WORKER({"get_device_properties": interface["get_device_properties"],
                         "current_device": interface["current_device"]}),
            SCHEDULER({"has_triton": lambda: True}),
            TRITON_UTILS({"triton_hash_with_backend": lambda: "cebench", "triton_backend": lambda: None})]
