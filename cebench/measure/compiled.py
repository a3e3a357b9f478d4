"""A `torch.compile`d loss run on `meta` tensors as inductor's own generated code runs it.

A dispatch-mode tracker sees nothing inside compiled code, and on `meta` inductor compiles
no real step. So a compiled variant is compiled here from fake tensors of the step's
shapes, dtypes and strides (Dynamo captures the graph, AOTAutograd partitions forward and
backward as inductor's partitioner decides what is saved, inductor fuses and schedules the
kernels and writes the wrapper that allocates, reuses and frees their buffers), without
building a kernel: the wrapper's modules are loaded with every kernel a no-op. That wrapper
then runs on the step's `meta` tensors, its buffers made on `meta`: the tracker sees each
storage inductor's code allocates and frees, in its order, in-place reuse included, as the
real compiled step holds them.

For a CPU target that is inductor's C++ wrapper; on this CPU a compiled step predicted so
equals the measured one to the byte in fp32 (the tests); in bf16 a CPU's oneDNN matmul on
a transposed operand allocates a buffer inside itself, which no trace sees.

For a GPU target it is inductor's Triton wrapper for the named card (`targets.Target`: its
capability and SM count answer inductor's questions, `_as_card`), from a build of torch
without CUDA: autograd cannot differentiate fake CUDA tensors there (it needs the device's
guard), so Dynamo captures and AOTAutograd partitions the graph on fake *host* tensors,
and each partitioned graph, forward and backward, is traced again on fake CUDA tensors
before inductor lowers it (`_on_gpu`). Inductor writes Triton code, so `triton` must be
installed (no kernel is built). What this can miss is a decomposition or partition choice
that tests the device, and it is not yet checked against a GPU's measurement: a GPU row's
note (`GPU_NOTE`) says so.

Each distinct signature (the function, shapes, strides, dtypes, `requires_grad` and the
other arguments, which Dynamo bakes in as constants, as `torch.compile(dynamic=False)`
does for a measured point) compiles once per process, in seconds: no C++ or Triton build.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch

from cebench.core import targets
from cebench.core.patched import patched
from cebench.measure.device_view import cuda_answers, unseen

_KINDS = ("cpu", "cuda")  # the kinds of device whose generated code runs here on meta
# Chunks of a compiled loss predicted at most: Dynamo unrolls its loop, each chunk compiled (92 s for 256 chunks,
# about 0.35 s a chunk, on the 2-core development CPU)
MAX_CHUNKS = 64
GPU_NOTE = ("inductor's Triton code for this card, from a graph partitioned on the host; "
            "not yet checked on a GPU")


class NotCompiled(RuntimeError):
    """The function could not be compiled as one graph whose inputs are its tensor arguments."""


def unsupported_reason(kind: str, fsdp: int = 1, chunks: int = 1) -> str | None:
    """Why a compiled step for a device of `kind` sharded over `fsdp` ranks, whose loss runs
    `chunks` chunks, cannot be predicted here (None: it can)."""
    if chunks > MAX_CHUNKS:
        return (f"torch.compile unrolls the chunk loop: {chunks:,} chunks would compile {chunks:,} copies of it; "
                f"a compiled step is predicted up to {MAX_CHUNKS} chunks: a larger --ce-chunk, or measure it with "
                "cebench sweep")
    if fsdp > 1:
        return "a compiled step is predicted unsharded only (--fsdp 1); measure it with cebench sweep"
    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile (Dynamo) is not supported on this Python/platform"
    if kind == "cuda" and importlib.util.find_spec("triton") is None:
        return "a GPU target's compiled step is written in Triton by inductor: pip install triton (no GPU needed)"
    if kind in _KINDS:
        return None
    return f"a compiled step is predicted for a CPU or CUDA target, not {kind}; measure it with cebench sweep"


def on_meta(fn: Callable[..., torch.Tensor], kind: str,
            gpu: targets.Target | None = None) -> Callable[..., torch.Tensor]:
    """`fn` as `torch.compile(fn, dynamic=False)` runs it on a device of `kind` (for 'cuda':
    the card `gpu`, None: `targets.DEFAULT_GPU`), called with `meta` tensors: compiled on its
    first call with each signature (outside any dispatch mode), then inductor's wrapper run
    on meta."""
    card = (gpu or targets.DEFAULT_GPU) if kind == "cuda" else None

    def run(*args: Any, **kwargs: Any) -> torch.Tensor:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        compiled, order = _compiled(fn, card, _signature(named))
        tensors = {name: value for name, value in named.items() if isinstance(value, torch.Tensor)}
        out = compiled(*(tensors[name] for name in order))
        return out[0] if isinstance(out, (tuple, list)) else out

    return run


@dataclass(frozen=True)
class _Tensor:
    """What a compiled graph is specialised on of a tensor argument."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    requires_grad: bool

    def fake(self) -> torch.Tensor:
        """A host tensor like it (under a FakeTensorMode: a fake one)."""
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, requires_grad=self.requires_grad)


def _signature(named: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What a compiled graph is specialised on: each tensor argument as a `_Tensor`, each
    other argument's value."""
    return tuple((name, _Tensor(tuple(v.shape), v.stride(), v.dtype, v.requires_grad))
                 if isinstance(v, torch.Tensor) else (name, v) for name, v in named.items())


@functools.lru_cache(maxsize=64)
def _compiled(fn: Callable[..., torch.Tensor], gpu: targets.Target | None,
              signature: tuple) -> tuple[Callable[..., Any], list[str]]:
    """The compiled forward-and-backward of `fn` at `signature` for a CPU (`gpu` None) or for
    the card `gpu`, and the names of its arguments in the order it takes them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _disable_current_modes

    # Outside any dispatch mode (a tracker above would see the compile's fake tensors, and Dynamo would skip the
    # frame); what torch warns while it compiles is not the step's
    with _disable_current_modes(), unseen(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = FakeTensorMode()
        with mode:  # captured and differentiated on the host: autograd needs a device's guard a CPU build lacks
            values = {name: v.fake() if isinstance(v, _Tensor) else v for name, v in signature}
        captured: list[tuple[torch.fx.GraphModule, list[Any]]] = []

        def capture(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
            captured.append((gm, example_inputs))
            return gm.forward

        torch._dynamo.reset()
        with mode:
            torch.compile(fn, backend=capture, dynamic=False)(**values)
        if len(captured) != 1:
            raise NotCompiled(f"torch.compile split {getattr(fn, '__name__', fn)} into {len(captured)} graphs; "
                              "a compiled step is predicted for one graph")
        gm, example_inputs = captured[0]
        order = [_argument(node.name, values) for node in gm.graph.nodes if node.op == "placeholder"]
        with _no_kernels(), _as_card(gpu):
            from torch._inductor.compile_fx import compile_fx, compile_fx_inner

            inner = compile_fx_inner if gpu is None else _on_gpu(compile_fx_inner)
            compiled = cast("Callable[..., Any]", compile_fx(gm, example_inputs, inner_compile=inner))
    return compiled, order


def _on_gpu(inner: Callable[..., Any]) -> Callable[..., Any]:
    """`inner` (inductor's compiler of one partitioned graph, forward or backward) given the
    graph traced again on fake CUDA tensors: AOTAutograd partitioned it on the host's, and
    inductor lowers each graph for the device its inputs are on."""
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    host, gpu = torch.device("cpu"), torch.device("cuda", 0)

    def compile_on_gpu(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        for node in gm.graph.nodes:  # the tensors it makes (a full, an arange) on the GPU too
            if node.kwargs.get("device") == host:
                node.kwargs = {**node.kwargs, "device": gpu}
        gm.recompile()
        # without autograd (its device guard is what a CPU build lacks): each graph is functional already
        mode = detect_fake_mode(example_inputs)
        if mode is None:
            raise NotCompiled("inductor was given a graph without fake inputs to trace on the GPU")
        with torch.no_grad():
            with mode:
                inputs = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=gpu)
                          if isinstance(x, torch.Tensor) and x.device == host else x for x in example_inputs]
                retraced = make_fx(gm)(*inputs)
            return inner(retraced, inputs, **kwargs)

    return compile_on_gpu


@contextlib.contextmanager
def _as_card(gpu: targets.Target | None) -> Iterator[None]:
    """Within: inductor writes its Triton code for `gpu` (None: nothing changes) on a machine
    without it: `torch.cuda` and inductor's CUDA device interface answer from the card, and
    Triton counts as present (no kernel is built: `_no_kernels`)."""
    if gpu is None:
        yield
        return
    import torch._inductor.scheduler as scheduler
    import torch.utils._triton as triton_utils
    from torch._dynamo import device_interface

    answers = cuda_answers(gpu)
    interface = {name: staticmethod(answers[name]) for name in ("get_device_properties", "current_device",
                                                                "device_count", "is_bf16_supported")}
    capability = staticmethod(lambda device=None: gpu.capability[0] * 10 + gpu.capability[1])
    with patched(torch.cuda, answers), \
            patched(device_interface.CudaInterface, {**interface, "get_compute_capability": capability}), \
            patched(device_interface.CudaInterface.Worker, {"get_device_properties": interface["get_device_properties"],
                                                           "current_device": interface["current_device"]}), \
            patched(scheduler, {"has_triton": lambda: True}), \
            patched(torch.Tensor, {"copy_": _copy}), \
            patched(triton_utils, {"triton_hash_with_backend": lambda: "cebench", "triton_backend": lambda: None}):
        yield


def _copy(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """`Tensor.copy_` through the dispatcher: its Python binding guards the device first, and
    a CPU build has no CUDA guard (inductor's passes copy between fake CUDA tensors)."""
    return torch.ops.aten.copy_.default(self, src, non_blocking)


def _argument(placeholder: str, values: dict[str, Any]) -> str:
    """The argument a graph input is: Dynamo names the input of argument `x` `l_x_`."""
    for name, value in values.items():
        if isinstance(value, torch.Tensor) and placeholder == f"l_{name}_":
            return name
    raise NotCompiled(f"the compiled graph takes {placeholder}, which is none of the function's tensor arguments")


@contextlib.contextmanager
def _no_kernels() -> Iterator[None]:
    """Within: inductor compiles forward and backward at once, from nothing cached, and loads
    the modules it writes fresh (never into its caches) with every kernel a no-op and every
    buffer made on `meta`."""
    from torch._inductor import async_compile, codecache

    def load(cls: type, key: str, path: str, linemap: Any = None, attrs: dict[str, Any] | None = None,
             **_: Any) -> types.ModuleType:
        module = types.ModuleType(f"cebench_meta_{key}")
        module.__file__ = path
        with open(path, encoding="utf-8") as f, _gpu_imports():
            exec(compile(f.read(), path, "exec"), module.__dict__)  # noqa: S102 - inductor's own generated wrapper
        for name, value in (attrs or {}).items():
            setattr(module, name, value)
        for device in ("cpu", "cuda", "xpu"):
            setattr(module, f"empty_strided_{device}", _on_meta)
        module.torch = _NO_GPU_GUARD  # type: ignore[attr-defined]
        return module

    def kernel(self: object, *args: Any, **kwargs: Any) -> _Nothing:
        return _NOTHING

    compiler = async_compile.AsyncCompile
    with torch._inductor.config.patch(fx_graph_cache=False), \
            torch._functorch.config.patch(force_non_lazy_backward_lowering=True, enable_autograd_cache=False), \
            patched(codecache.PyCodeCache, {"load_by_key_path": classmethod(load)}), \
            patched(compiler, {"cpp_pybinding": kernel, "cpp": kernel, "triton": kernel,
                               "wait": lambda self, scope: None}):
        yield


def _on_meta(size: Any, stride: Any, dtype: torch.dtype) -> torch.Tensor:
    """A buffer of inductor's wrapper, made on meta."""
    return torch.empty_strided(size, stride, dtype=dtype, device="meta")


class _Nothing:
    """A kernel that computes nothing (its buffers are the wrapper's), called as inductor's
    wrapper calls a C++ kernel (`k(...)`) or a Triton one (`k.run(...)`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Nothing."""

    run = __call__


_NOTHING = _Nothing()


class _TorchWithoutGpuGuard(types.ModuleType):
    """`torch` as a GPU wrapper's module reads it, its device guard and `set_device` doing
    nothing (there is no GPU to guard): every other name is torch's."""

    def __getattr__(self, name: str) -> Any:
        return _CUDA_NO_GUARD if name == "cuda" else getattr(torch, name)


class _CudaWithoutGuard(types.ModuleType):
    """`torch.cuda` with its device guard and `set_device` doing nothing."""

    _DeviceGuard = staticmethod(lambda index: contextlib.nullcontext())
    set_device = staticmethod(lambda device: None)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)


_NO_GPU_GUARD = _TorchWithoutGpuGuard("torch")
_CUDA_NO_GUARD = _CudaWithoutGuard("torch.cuda")


@contextlib.contextmanager
def _gpu_imports() -> Iterator[None]:
    """Within: what a GPU wrapper imports from a build of torch without CUDA exists (its
    stream, asked for each launch, is 0)."""
    if hasattr(torch._C, "_cuda_getCurrentRawStream"):
        yield
        return
    with patched(torch._C, {"_cuda_getCurrentRawStream": lambda index: 0}):
        yield
