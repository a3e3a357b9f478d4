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
import types
import warnings
from collections.abc import Callable, Iterator
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from cebench.core import pins, targets
from cebench.core.devices import Device
from cebench.engine.costs import INDUCTOR_KERNEL
from cebench.engine.device_view import cuda_answers, unseen
from cebench.shims import inductor
from cebench.shims.cuda import CUDA, RAW_STREAM
from cebench.shims.dispatch import outside_dispatch_modes
from cebench.shims.inductor import outside_saved_tensors_hooks
from cebench.shims.tensor import TENSOR
from cebench.shims.torch_names import LOWERS_BACKWARD_AHEAD, dynamo_supported, pytree

# Chunks of a compiled loss predicted at most: Dynamo unrolls its loop, each chunk compiled (92 s for 256 chunks,
# about 0.35 s a chunk, on the 2-core development CPU)
MAX_CHUNKS = 64
GPU_NOTE = ("inductor's Triton code for this card, from a graph partitioned on the host; "
            "not yet checked on a GPU")


class NotCompiled(RuntimeError):
    """The function could not be compiled as one graph whose inputs are its tensor arguments."""


def unsupported_reason(device: Device, sharded: bool = False, chunks: int = 1) -> str | None:
    """Why a compiled step for `device` (a kind of device, or a named GPU target), `sharded` or
    not, whose loss runs `chunks` chunks, cannot be predicted here (None: it can)."""
    if chunks > MAX_CHUNKS:
        return (f"torch.compile unrolls the chunk loop: {chunks:,} chunks would compile {chunks:,} copies of it; "
                f"a compiled step is predicted up to {MAX_CHUNKS} chunks: a larger --ce-chunk, or measure it with "
                "cebench sweep")
    if sharded:
        where = "--device cpu" if device.is_host else "on a machine with a GPU per rank"
        return f"a compiled step is predicted unsharded only (--fsdp 1); measure it with cebench sweep {where}"
    if not dynamo_supported():
        return "torch.compile (Dynamo) is not supported on this Python/platform"
    if not (device.is_host or device.is_gpu):
        return (f"a compiled step is predicted for a CPU or CUDA target, not {device.kind}; measure it with "
                "cebench sweep")
    if device.is_gpu and importlib.util.find_spec("triton") is None:
        return ("a GPU target's compiled step is written in Triton by inductor (no GPU needed): "
                f"{pins.install('triton')}")
    if device.card is not None and device.card.vendor != "nvidia":
        return f"{device.card.name}: inductor's code for ROCm is not modelled (its CUDA code is)"
    return None


def on_meta(fn: Callable[..., torch.Tensor], device: Device) -> Callable[..., torch.Tensor]:
    """`fn` as `torch.compile(fn, dynamic=False)` runs it on `device` (a GPU: for its card,
    `Device.card`), called with `meta` tensors: compiled on its first call with each
    signature (outside any dispatch mode), then inductor's wrapper run on meta."""
    return _compiled_on_meta(fn, device)


def module_on_meta(module: nn.Module, device: Device) -> Callable[..., Any]:
    """`module` as `module.compile()` runs it (its parameters and buffers graph inputs, as
    Dynamo lifts them), called with `meta` tensors: `on_meta` for a module, whose graph is
    captured once per signature and lowered once per distinct graph (the blocks of a
    decoder share one)."""
    return _compiled_on_meta(module, device)


def _compiled_on_meta(target: Callable[..., Any], device: Device) -> Callable[..., Any]:
    card = device.card

    def run(*args: Any, **kwargs: Any) -> Any:
        leaves, spec = pytree.tree_flatten((args, kwargs))
        signature = tuple(_Tensor(tuple(v.shape), v.stride(), v.dtype, v.requires_grad)
                          if isinstance(v, torch.Tensor) else v for v in leaves)
        captured = _captured(target, spec, signature)
        if captured is None:  # Dynamo compiles nothing of it: it runs eagerly
            return inductor.module_call(target)(*args, **kwargs) if isinstance(target, nn.Module) else \
                target(*args, **kwargs)
        lowered = _lowered(captured.graph, card)
        state = dict(target.named_parameters()) | dict(target.named_buffers()) if isinstance(target, nn.Module) else {}
        out = lowered(*(leaves[where] if isinstance(where, int) else state[where] for where in captured.inputs))
        return pytree.tree_unflatten(list(out), captured.out)

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


@dataclass(frozen=True)
class _Graph:
    """A captured graph as inductor is given it: its code, the host fake inputs it was
    captured with (what it is specialised on) and the fake mode they belong to."""

    module: torch.fx.GraphModule
    example_inputs: tuple[Any, ...]
    key: tuple[Any, ...]

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Graph) and self.key == other.key


@dataclass(frozen=True)
class _Captured:
    """Dynamo's graph of a call: `inputs`, where each graph input comes from (an int: that
    leaf of the call's arguments; a str: that parameter or buffer of the module), and `out`,
    the structure of what the call returns, the graph's outputs its leaves."""

    graph: _Graph
    inputs: tuple[int | str, ...]
    out: pytree.TreeSpec


@functools.lru_cache(maxsize=256)
def _captured(target: Callable[..., Any], spec: pytree.TreeSpec, signature: tuple) -> _Captured | None:
    """Dynamo's one graph of `target` (a function, or a module with its parameters and
    buffers) called with arguments of `spec` whose leaves are `signature`, captured on fake
    host tensors outside any dispatch mode (a tracker above would see the compile's fake
    tensors, and Dynamo would skip the frame); None when Dynamo captures no graph (it runs
    the call eagerly: torch's chunked loss, a custom op). `NotCompiled` when it is more than
    one graph, or one whose outputs are not the call's tensors."""
    name = getattr(target, "__name__", type(target).__name__)
    with outside_dispatch_modes(), outside_saved_tensors_hooks(), unseen(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = inductor.fake_mode()
        fn = _copy_of(target)
        with mode:  # captured and differentiated on the host: autograd needs a device's guard a CPU build lacks
            leaves = [v.fake() if isinstance(v, _Tensor) else v for v in signature]
            if isinstance(fn, nn.Module):
                _made_fake(fn)
        state = dict(fn.named_parameters()) | dict(fn.named_buffers()) if isinstance(fn, nn.Module) else {}
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        graphs: list[tuple[torch.fx.GraphModule, list[Any]]] = []

        def capture(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
            graphs.append((gm, example_inputs))
            return gm.forward

        with mode:  # a module as `nn.Module.compile()` compiles it: its call, not its class's __call__
            call = inductor.module_call(fn) if isinstance(fn, nn.Module) else fn
            out, traced = inductor.capture(call, args, kwargs, backend=capture)
    if not graphs and not traced:  # Dynamo never looked at the call: not what a GPU run does
        raise NotCompiled(f"torch.compile captured nothing of {name} on this torch ({torch.__version__}): Dynamo "
                          "traced no frame, so it cannot be predicted compiled (nor as eager: it would not be)")
    if not graphs:
        return None
    if len(graphs) != 1:
        raise NotCompiled(f"torch.compile breaks {name} into {len(graphs)} graphs (Python runs between them); it is "
                          "predicted compiled as one graph: measure it with cebench sweep")
    gm, example_inputs = graphs[0]
    where: dict[int, int | str] = {id(v): i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)}
    where |= {id(v): n for n, v in state.items()}
    if any(id(x) not in where for x in example_inputs):
        raise NotCompiled(f"the compiled graph of {name} takes a tensor that is none of its arguments, parameters "
                          "or buffers")
    out_leaves, out_spec = pytree.tree_flatten(out)
    outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    if not all(isinstance(v, torch.Tensor) for v in out_leaves):
        raise NotCompiled(f"{name} returns more than the tensors its compiled graph computes")
    if len(outputs) != len(out_leaves):  # the others are stored into Python objects, which a prediction cannot do
        raise NotCompiled(f"{name}'s compiled graph also stores tensors into Python objects (a KV cache, say: "
                          "hf:...:no-cache turns transformers' off)")
    key = (gm.code, tuple(_Tensor(tuple(x.shape), x.stride(), x.dtype, x.requires_grad) for x in example_inputs))
    return _Captured(_Graph(gm, tuple(example_inputs), key), tuple(where[id(x)] for x in example_inputs), out_spec)


def _copy_of(target: Callable[..., Any]) -> Callable[..., Any]:
    """`target` to compile on fake host tensors: a module's copy (its compiled call dropped),
    whose parameters and buffers are then made fake; a function as it is."""
    if not isinstance(target, nn.Module):
        return target
    with inductor.COMPILED_CALL({"_compiled_call_impl": None}, on=target):
        return deepcopy(target)


def _made_fake(module: nn.Module) -> None:
    """`module`'s parameters and buffers replaced by host tensors like them (under a
    FakeTensorMode: fake ones; a parameter stays a parameter)."""
    def like(t: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)

    for m in module.modules():
        for name, p in list(m.named_parameters(recurse=False, remove_duplicate=False)):
            setattr(m, name, nn.Parameter(like(p), requires_grad=p.requires_grad))
        for name, b in list(m.named_buffers(recurse=False, remove_duplicate=False)):
            setattr(m, name, like(b))


@functools.lru_cache(maxsize=64)
def _lowered(graph: _Graph, gpu: targets.Target | None) -> Callable[..., Any]:
    """The compiled forward-and-backward of `graph` for a CPU (`gpu` None) or for the card
    `gpu`: AOTAutograd's partition and inductor's code, its kernels never built."""
    def inner(compile_fx_inner: Callable[..., Any]) -> Callable[..., Any]:
        lowered = compile_fx_inner if gpu is None else _on_gpu(compile_fx_inner)
        # torch 2.8 lowers the backward when it first runs, inside the step
        return lowered if LOWERS_BACKWARD_AHEAD else _in_lowering(lowered, gpu)

    with _lowering(gpu):
        return inductor.compile_fx(graph.module, list(graph.example_inputs), inner)


@contextlib.contextmanager
def _lowering(gpu: targets.Target | None) -> Iterator[None]:
    """Within: inductor lowers a graph for `gpu` (None: the CPU) without building a kernel,
    unseen by the step's tracker and its saved-tensors hooks."""
    with outside_dispatch_modes(), outside_saved_tensors_hooks(), unseen(), warnings.catch_warnings(), \
            _no_kernels(), _as_card(gpu):
        warnings.simplefilter("ignore")
        yield


def _in_lowering(inner: Callable[..., Any], gpu: targets.Target | None) -> Callable[..., Any]:
    """`inner` (inductor's compiler of one partitioned graph) run inside `_lowering`, wherever it
    is called: torch 2.8's AOTAutograd calls it for the backward lazily, during the step's first
    backward, outside the forward's lowering."""

    def lowered(*args: Any, **kwargs: Any) -> Any:
        with _lowering(gpu):
            return inner(*args, **kwargs)

    return lowered


def _on_gpu(inner: Callable[..., Any]) -> Callable[..., Any]:
    """`inner` (inductor's compiler of one partitioned graph, forward or backward) given the
    graph traced again on fake CUDA tensors: AOTAutograd partitioned it on the host's, and
    inductor lowers each graph for the device its inputs are on."""
    from torch.fx.experimental.proxy_tensor import make_fx

    host, gpu = torch.device("cpu"), torch.device("cuda", 0)

    def compile_on_gpu(gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
        for node in gm.graph.nodes:  # the tensors it makes (a full, an arange) on the GPU too
            if node.kwargs.get("device") == host:
                node.kwargs = {**node.kwargs, "device": gpu}
        gm.recompile()
        # without autograd (its device guard is what a CPU build lacks): each graph is functional already
        mode = inductor.fake_mode_of(example_inputs)
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
    answers = cuda_answers(gpu)
    with contextlib.ExitStack() as stack:
        for replaced in (CUDA(answers), TENSOR({"copy_": _copy}), *inductor.card_interface(answers, gpu.capability)):
            stack.enter_context(replaced)
        yield


def _copy(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """`Tensor.copy_` through the dispatcher: its Python binding guards the device first, and
    a CPU build has no CUDA guard (inductor's passes copy between fake CUDA tensors)."""
    return torch.ops.aten.copy_.default(self, src, non_blocking)


@contextlib.contextmanager
def _no_kernels() -> Iterator[None]:
    """Within: inductor compiles forward and backward at once, from nothing cached, and loads
    the modules it writes fresh (never into its caches) with every kernel a no-op and every
    buffer made on `meta`."""
    def load(cls: type, key: str, path: str, linemap: Any = None, attrs: dict[str, Any] | None = None,
             **_: Any) -> types.ModuleType:
        module = types.ModuleType(f"cebench_meta_{key}")
        module.__file__ = path
        with open(path, encoding="utf-8") as f, _gpu_imports():
            exec(compile(f.read(), path, "exec"), module.__dict__)  # noqa: S102 - inductor's own generated wrapper
        for name, value in (attrs or {}).items():  # inductor's own, set as its load sets them
            setattr(module, name, value)
        inductor.WRAPPER.set_on(module, {**{f"empty_strided_{device}": _on_meta for device in ("cpu", "cuda", "xpu")},
                                         "torch": _NO_GPU_GUARD})
        return module

    def kernel(self: object, *args: Any, **kwargs: Any) -> _Nothing:
        return _NOTHING

    with inductor.fresh_lowering(), inductor.CODECACHE({"load_by_key_path": classmethod(load)}), \
            inductor.ASYNC_COMPILE({"cpp_pybinding": kernel, "cpp": kernel, "triton": kernel,
                                    "wait": lambda self, scope: None}):
        yield


def _on_meta(size: Any, stride: Any, dtype: torch.dtype) -> torch.Tensor:
    """A buffer of inductor's wrapper, made on meta."""
    return torch.empty_strided(size, stride, dtype=dtype, device="meta")


class _Nothing:
    """A kernel that computes nothing (its buffers are the wrapper's), called as inductor's
    wrapper calls a C++ kernel (`k(...)`) or a Triton one (`k.run(...)`): it only shows its
    tensor arguments to whoever counts launches (`counting`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Nothing, but the launch shown (`counting`)."""
        if _LAUNCHED:
            _LAUNCHED[-1]([a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)], INDUCTOR_KERNEL)

    run = __call__


_LAUNCHED: list[Callable[[list[torch.Tensor], str], None]] = []  # who is shown each generated kernel's launch


@contextlib.contextmanager
def counting(launched: Callable[[list[torch.Tensor], str], None] | None) -> Iterator[None]:
    """Within: each launch of a kernel inductor generated (a no-op on meta) is shown to
    `launched` with its tensor arguments and `INDUCTOR_KERNEL` (`cebench.engine.costs.Costs.launch`:
    a kernel that reads and writes its buffers once); nothing where it is None."""
    if launched is None:
        yield
        return
    _LAUNCHED.append(launched)
    try:
        yield
    finally:
        _LAUNCHED.pop()


_NOTHING = _Nothing()


class _TorchWithoutGpuGuard(types.ModuleType):
    """`torch` as a GPU wrapper's module reads it, its device guard and `set_device` doing
    nothing (there is no GPU to guard): every other name is torch's."""

    @property
    def cuda(self) -> types.ModuleType:
        """`torch.cuda` without its device guard (`_CudaWithoutGuard`)."""
        return _CUDA_NO_GUARD

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


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
    """Within: the current stream a GPU wrapper asks for before each launch is 0, on every build
    of torch: a CPU build has no such function, and a CUDA build's real one initialises CUDA,
    which fails on a machine without a GPU (a laptop, a login node) and is not needed where
    the launches are skipped anyway."""
    with RAW_STREAM({"_cuda_getCurrentRawStream": lambda index: 0}):
        yield
