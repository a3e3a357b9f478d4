"""A `torch.compile`d loss run on `meta` tensors as inductor's own generated code runs it.

A dispatch-mode tracker sees nothing inside compiled code, and on `meta` inductor compiles
no real step. So a compiled variant is compiled here for the target's kind of device from
fake tensors of the step's shapes, dtypes and strides (Dynamo captures the graph,
AOTAutograd partitions forward and backward as inductor's partitioner decides what is
saved, inductor fuses and schedules the kernels and writes the wrapper that allocates,
reuses and frees their buffers), without building a kernel: the wrapper's modules are
loaded with every kernel a no-op. That wrapper then runs on the step's `meta` tensors, its
buffers made on `meta`: the tracker sees each storage inductor's code allocates and frees,
in its order, in-place reuse included, as the real compiled step holds them.

On this CPU a compiled step predicted so equals the measured one to the byte in fp32 (the
tests); in bf16 a CPU's oneDNN matmul on a transposed operand allocates a buffer inside
itself, which no trace sees. A CUDA target would run inductor's Triton wrapper the same
way, its buffers `empty_strided_cuda`; it is not done: its fake CUDA tensors need a CUDA
build of torch, and its code generation asks the GPU for its properties. A compiled row
for a GPU target says so.

Each distinct signature (the function, shapes, strides, dtypes, `requires_grad` and the
other arguments, which Dynamo bakes in as constants, as `torch.compile(dynamic=False)`
does for a measured point) compiles once per process, in seconds: no C++ or Triton build.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch

from cebench.core.patched import patched

_KINDS = ("cpu",)  # the kinds of device whose generated code runs here on meta


class NotCompiled(RuntimeError):
    """The function could not be compiled as one graph whose inputs are its tensor arguments."""


def unsupported_reason(kind: str, fsdp: int = 1) -> str | None:
    """Why a compiled step for a device of `kind` sharded over `fsdp` ranks cannot be
    predicted here (None: it can)."""
    if fsdp > 1:
        return "a compiled step is predicted unsharded only (--fsdp 1); measure it with cebench sweep"
    if not torch._dynamo.is_dynamo_supported():
        return "torch.compile (Dynamo) is not supported on this Python/platform"
    if kind in _KINDS:
        return None
    return (f"a compiled step is predicted for a CPU target only: a {kind.upper()} target's inductor code is not run "
            "on meta yet; measure it with cebench sweep on the GPU")


def on_meta(fn: Callable[..., torch.Tensor], kind: str) -> Callable[..., torch.Tensor]:
    """`fn` as `torch.compile(fn, dynamic=False)` runs it on a device of `kind`, called with
    `meta` tensors: compiled on its first call with each signature (outside any dispatch
    mode), then inductor's wrapper run on meta."""

    def run(*args: Any, **kwargs: Any) -> torch.Tensor:
        bound = inspect.signature(fn).bind(*args, **kwargs)
        bound.apply_defaults()
        named = dict(bound.arguments)
        compiled, order = _compiled(fn, kind, _signature(named))
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

    def fake(self, kind: str) -> torch.Tensor:
        """A tensor like it on a device of `kind` (under a FakeTensorMode: a fake one)."""
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=kind,
                                   requires_grad=self.requires_grad)


def _signature(named: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What a compiled graph is specialised on: each tensor argument as a `_Tensor`, each
    other argument's value."""
    return tuple((name, _Tensor(tuple(v.shape), v.stride(), v.dtype, v.requires_grad))
                 if isinstance(v, torch.Tensor) else (name, v) for name, v in named.items())


@functools.lru_cache(maxsize=64)
def _compiled(fn: Callable[..., torch.Tensor], kind: str, signature: tuple) -> tuple[Callable[..., Any], list[str]]:
    """The compiled forward-and-backward of `fn` at `signature` for `kind`, and the names
    of its arguments in the order it takes them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _disable_current_modes

    # Outside any dispatch mode (a tracker above would see the compile's fake tensors, and Dynamo would skip the
    # frame); what torch warns while it compiles is not the step's
    with _disable_current_modes(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = FakeTensorMode()
        with mode:
            values = {name: v.fake(kind) if isinstance(v, _Tensor) else v for name, v in signature}
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
        with _no_kernels():
            from torch._inductor.compile_fx import compile_fx

            compiled = cast("Callable[..., Any]", compile_fx(gm, example_inputs))
    return compiled, order


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
        with open(path, encoding="utf-8") as f:
            exec(compile(f.read(), path, "exec"), module.__dict__)  # noqa: S102 - inductor's own generated wrapper
        for name, value in (attrs or {}).items():
            setattr(module, name, value)
        for device in ("cpu", "cuda", "xpu"):
            setattr(module, f"empty_strided_{device}", _on_meta)
        return module

    def kernel(self: object, *args: Any, **kwargs: Any) -> Callable[..., None]:
        return _nothing

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


def _nothing(*args: Any, **kwargs: Any) -> None:
    """A kernel that computes nothing (its buffers are the wrapper's)."""
