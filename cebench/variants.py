"""The variant registry: name → implementation and its metadata.

A variant's function is given either as a callable or as an import path
``'package.module:function'`` that is imported on first use, so listing, parsing and
`--help` never import torch. Adding a variant is one `register` call; its compiled twin
is `compiled(base)`.
"""
from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace

from cebench.config import LOSS, SAMPLE

Fn = Callable[..., object]


@dataclass(frozen=True)
class Variant:
    """One implementation under test.

    `fn` is the callable or its ``'module:attr'`` path. `chunked` variants take
    `ce_chunk` and are measured once per chunk size; the others once per shape.
    `compiled` variants are wrapped in `torch.compile` afresh per point. `baseline`
    marks the variant every other one of its workload is compared with ("vs dense").
    """

    name: str
    workload: str
    fn: Fn | str
    chunked: bool
    compiled: bool
    summary: str
    baseline: bool = False

    def load(self) -> Fn:
        """The eager function (its module imported now, when `fn` is a path)."""
        if not isinstance(self.fn, str):
            return self.fn
        module, _, attr = self.fn.partition(":")
        return getattr(importlib.import_module(module), attr)

    def build(self) -> Fn:
        """The callable to measure. A compiled variant starts from an empty Dynamo cache,
        so each point compiles once for its own shapes (no silent fallback to eager after
        the recompile limit) and `compile_s` means the same thing on every row."""
        fn = self.load()
        if not self.compiled:
            return fn
        import torch

        torch._dynamo.reset()
        return torch.compile(fn, dynamic=False)

    def unsupported_reason(self, device: str) -> str | None:
        """Why this variant cannot run on `device` here, or None when it can."""
        if not self.compiled:
            return None
        import torch

        if not torch._dynamo.is_dynamo_supported():
            return "torch.compile (Dynamo) is not supported on this Python/platform"
        if device == "cpu":
            from torch._inductor.cpp_builder import get_cpp_compiler

            compiler = get_cpp_compiler()
            if shutil.which(compiler) is None:
                return f"torch.compile on CPU needs a C++ compiler ('{compiler}' not found)"
        if device == "cuda":
            try:
                import triton  # noqa: F401
            except ImportError:
                return "torch.compile on CUDA needs triton, which is not installed"
        return None


REGISTRY: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add `variant` to the registry (names are unique) and return it."""
    if variant.name in REGISTRY:
        raise ValueError(f"variant {variant.name!r} is already registered")
    REGISTRY[variant.name] = variant
    return variant


def compiled(base: Variant) -> Variant:
    """The `torch.compile`-wrapped twin of `base`, named '<base>-compiled'."""
    return replace(base, name=f"{base.name}-compiled", compiled=True, baseline=False,
                   summary=f"torch.compile({base.name})")


def get(name: str) -> Variant:
    """The registered variant called `name` (KeyError if there is none)."""
    return REGISTRY[name]


def names(workload: str | None = None) -> list[str]:
    """Registered variant names, in registration order, optionally of one workload."""
    return [v.name for v in REGISTRY.values() if workload is None or v.workload == workload]


def baseline(workload: str) -> str | None:
    """The name of the variant `workload`'s others are compared with, if registered."""
    return next((v.name for v in REGISTRY.values() if v.workload == workload and v.baseline), None)


_IMPL = "cebench.implementations"
_dense = register(Variant("dense", LOSS, f"{_IMPL}:dense_cross_entropy", chunked=False, compiled=False,
                          summary="F.linear + F.cross_entropy on fp32-upcast full logits", baseline=True))
_chunked = register(Variant("chunked", LOSS, f"{_IMPL}:vendored_chunked_cross_entropy", chunked=True,
                            compiled=False, summary="vendored chunked_cross_entropy (checkpointed chunks)"))
register(compiled(_dense))
register(compiled(_chunked))
register(Variant("dense-sample", SAMPLE, f"{_IMPL}:dense_sample", chunked=False, compiled=False,
                 summary="full fp32 logits, softmax(logits / T), one torch.multinomial", baseline=True))
register(Variant("chunked-sample", SAMPLE, f"{_IMPL}:vendored_chunked_sample", chunked=True, compiled=False,
                 summary="vendored sample_tokens_chunked"))
