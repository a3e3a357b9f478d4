"""The variant registry: name → implementation and its metadata.

A loss variant is ``fn(h, weight, targets, ce_chunk) -> scalar mean loss``; a sample
variant is ``fn(h, weight, temperature, ce_chunk) -> (N,) int64 token ids``. Adding a
variant is one `register` call; a compiled twin is `compiled(base)`.
"""
from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from cebench.vendor.fractus_ce import chunked_cross_entropy, sample_tokens_chunked
from cebench.workloads import LOSS, SAMPLE


@dataclass(frozen=True)
class Variant:
    """One implementation under test.

    `chunked` variants take `ce_chunk` and are measured once per chunk size; the others
    once per config. `compiled` variants are wrapped in `torch.compile` afresh per config.
    """

    name: str
    workload: str
    fn: Callable[..., torch.Tensor]
    chunked: bool
    compiled: bool
    summary: str

    def build(self) -> Callable[..., torch.Tensor]:
        """The callable to measure. A compiled variant starts from an empty Dynamo cache,
        so each config compiles once for its own shapes (no silent fallback to eager after
        the recompile limit) and `compile_s` means the same thing on every row."""
        if not self.compiled:
            return self.fn
        torch._dynamo.reset()
        return torch.compile(self.fn, dynamic=False)

    def unsupported_reason(self, device: str) -> str | None:
        """Why this variant cannot run on `device` here, or None when it can."""
        if not self.compiled:
            return None
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


def dense_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None = None
) -> torch.Tensor:
    """Full (N, vocab) logits, upcast to fp32, mean cross-entropy. `ce_chunk` is ignored."""
    return F.cross_entropy(F.linear(h, weight).float(), targets)


def vendored_chunked_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, ce_chunk: int | None = None
) -> torch.Tensor:
    """The system under test: `ce_chunk` rows at a time, each chunk checkpointed."""
    assert ce_chunk is not None, "chunked variants are always given a ce_chunk"
    return chunked_cross_entropy(h, weight, targets, ce_chunk=ce_chunk)


def dense_sample(h: torch.Tensor, weight: torch.Tensor, temperature: float, ce_chunk: int | None = None) -> torch.Tensor:
    """Full (N, vocab) fp32 logits, softmax at `temperature`, one multinomial draw per row."""
    probs = torch.softmax(F.linear(h.to(weight.dtype), weight).float() / temperature, dim=-1)
    return torch.multinomial(probs, 1).view(-1)


def vendored_chunked_sample(h: torch.Tensor, weight: torch.Tensor, temperature: float,
                            ce_chunk: int | None = None) -> torch.Tensor:
    """The system under test: `sample_tokens_chunked`, `ce_chunk` rows at a time."""
    assert ce_chunk is not None, "chunked variants are always given a ce_chunk"
    return sample_tokens_chunked(h, weight, temperature=temperature, ce_chunk=ce_chunk)


REGISTRY: dict[str, Variant] = {}


def register(variant: Variant) -> Variant:
    """Add `variant` to the registry (names are unique) and return it."""
    if variant.name in REGISTRY:
        raise ValueError(f"variant {variant.name!r} is already registered")
    REGISTRY[variant.name] = variant
    return variant


def compiled(base: Variant) -> Variant:
    """The `torch.compile`-wrapped twin of `base`, named '<base>-compiled'."""
    return Variant(
        name=f"{base.name}-compiled",
        workload=base.workload,
        fn=base.fn,
        chunked=base.chunked,
        compiled=True,
        summary=f"torch.compile({base.name})",
    )


def get(name: str) -> Variant:
    """The registered variant called `name` (KeyError if there is none)."""
    return REGISTRY[name]


def names(workload: str | None = None) -> list[str]:
    """Registered variant names, in registration order, optionally of one workload."""
    return [v.name for v in REGISTRY.values() if workload is None or v.workload == workload]


_dense = register(Variant("dense", LOSS, dense_cross_entropy, chunked=False, compiled=False,
                          summary="F.linear + F.cross_entropy on fp32-upcast full logits"))
_chunked = register(Variant("chunked", LOSS, vendored_chunked_cross_entropy, chunked=True, compiled=False,
                            summary="vendored chunked_cross_entropy (checkpointed chunks)"))
register(compiled(_dense))
register(compiled(_chunked))
register(Variant("dense-sample", SAMPLE, dense_sample, chunked=False, compiled=False,
                 summary="full fp32 logits, softmax(logits / T), one torch.multinomial"))
register(Variant("chunked-sample", SAMPLE, vendored_chunked_sample, chunked=True, compiled=False,
                 summary="vendored sample_tokens_chunked"))
