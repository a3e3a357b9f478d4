"""The contract a variant keeps, per workload, and how a user declares one.

A **loss** is ``fn(h, weight, targets, ce_chunk, **semantics) -> loss`` (a floating
tensor that backpropagates to `h` and `weight`: the mean loss, 0-dim); a **sampler** is
``fn(h, weight, temperature, ce_chunk) -> (N,) integer token ids``. `h` is (N, d_model),
`weight` (vocab, d_model), `targets` (N,) int64, where -100 marks padding (ignored: the
mean is over the other targets). A function without a `ce_chunk` parameter is a variant
that does not chunk: it is called without it.

The loss semantics (`cebench.core.axes.FEATURES`) are keyword arguments, passed only when
a point asks for them (not off): ``softcap: float`` (logits → c·tanh(logits / c)),
``label_smoothing: float`` (torch's), ``z_loss: float`` (coefficient × the mean of
log-sum-exp² over real targets, added to the loss) and ``reduction: str`` (``sum``, or
``none``: the (N,) per-row losses, backpropagated with a non-uniform upstream gradient).
A variant supports those it names as parameters, or those it declares; a point asking
for another is an `unsupported` row, never a run without it.

    import cebench

    @cebench.variant(name="my-ce", summary="my fused loss")   # every argument optional
    def my_ce(h, weight, targets, ce_chunk, *, softcap=0.0): ...

Undeclared functions get sensible defaults: the name they were given by, the first line
of their docstring as summary, the sample workload when they take a `temperature`
parameter (else loss), chunking when they take a `ce_chunk` parameter, and the semantics
they name as parameters.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from cebench.core.axes import FEATURES
from cebench.core.config import LOSS, SAMPLE, WORKLOADS
from cebench.core.errors import UsageError, describe

if TYPE_CHECKING:
    import torch

ATTRIBUTE = "__cebench_variant__"
F = TypeVar("F", bound=Callable[..., object])


class LossFn(Protocol):
    """A loss variant: the mean cross-entropy of `h @ weight.T` against `targets` (and,
    as keywords, whichever of the loss semantics it supports)."""

    def __call__(self, h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                 ce_chunk: int | None, **semantics: object) -> torch.Tensor: ...


class SampleFn(Protocol):
    """A sample variant: one token per row of `h` from softmax(h @ weight.T / temperature)."""

    def __call__(self, h: torch.Tensor, weight: torch.Tensor, temperature: float,
                 ce_chunk: int | None) -> torch.Tensor: ...


@dataclass(frozen=True)
class Declaration:
    """What a variant says about itself; None fields take the defaults above."""

    name: str | None = None
    summary: str | None = None
    chunked: bool | None = None
    workload: str | None = None
    supports: tuple[str, ...] | None = None


FEATURE_NAMES: tuple[str, ...] = tuple(a.name for a in FEATURES)


def variant(name: str | None = None, *, summary: str | None = None, chunked: bool | None = None,
            workload: str | None = None, supports: tuple[str, ...] | None = None) -> Callable[[F], F]:
    """Declare a function a cebench variant (its name, summary, whether it chunks, its
    workload, and the loss semantics it `supports`, from `FEATURE_NAMES`: by default those
    it names as parameters); the function itself is returned unchanged."""
    if workload is not None and workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}")
    unknown = sorted(set(supports or ()) - set(FEATURE_NAMES))
    if unknown:
        raise ValueError(f"supports: {', '.join(unknown)} is not one of {', '.join(FEATURE_NAMES)}")

    def mark(fn: F) -> F:
        setattr(fn, ATTRIBUTE, Declaration(name, summary, chunked, workload, supports))
        return fn

    return mark


@dataclass(frozen=True)
class Adapted:
    """A user function made to keep the contract, with what is known about it."""

    fn: Callable[..., object]
    name: str
    summary: str
    chunked: bool
    workload: str
    supports: frozenset[str] = frozenset()


def adapt(obj: object, default_name: str, where: str) -> Adapted:
    """Check that `obj` can be called as a variant and fill in its declaration.

    `where` names it in errors (the --variant value, an entry point). A function without
    a `ce_chunk` parameter is wrapped to be called without it. `UsageError` for anything
    that is not callable or cannot take the contract's arguments."""
    if not callable(obj):
        raise UsageError(f"{where}: {type(obj).__name__} object is not callable")
    declared: Declaration = getattr(obj, ATTRIBUTE, None) or Declaration()
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        signature = None
    params = signature.parameters if signature else {}
    workload = declared.workload or (SAMPLE if "temperature" in params else LOSS)
    third = "temperature" if workload == SAMPLE else "targets"
    contract = f"fn(h, weight, {third}, ce_chunk)"

    def accepts(n: int) -> bool:
        if signature is None:
            return True
        try:
            signature.bind(*range(n))
            return True
        except TypeError:
            return False

    fn: Callable[..., object] = obj
    if not accepts(4):
        if not accepts(3):
            raise UsageError(f"{where}: takes {signature} but a {workload} variant is called as {contract}")
        fn = functools.wraps(obj)(lambda h, weight, third_arg, ce_chunk, **semantics: obj(h, weight, third_arg,
                                                                                        **semantics))
    chunked = declared.chunked if declared.chunked is not None else "ce_chunk" in params
    doc = inspect.getdoc(obj) or ""
    summary = declared.summary or (doc.splitlines()[0] if doc
                                   else cast(str, getattr(obj, "__qualname__", default_name)))
    named = declared.supports if declared.supports is not None else [n for n in FEATURE_NAMES if n in params]
    supports = frozenset(named) if workload == LOSS else frozenset()
    return Adapted(fn, declared.name or default_name, summary, chunked, workload, supports)


def smoke_test(fn: Callable[..., object], workload: str, chunked: bool, device: str, where: str) -> None:
    """Call `fn` once on a tiny problem (N 12, vocab 16, d_model 8, fp32, ce_chunk 5 on
    `device`) and check what it returns keeps the contract; `UsageError` otherwise."""
    import torch

    gen = torch.Generator().manual_seed(0)
    n, vocab, d = 12, 16, 8
    h = (torch.randn(n, d, generator=gen) / 3).to(device).requires_grad_(workload == LOSS)
    weight = (torch.randn(vocab, d, generator=gen) / 3).to(device).requires_grad_(workload == LOSS)
    chunk = 5 if chunked else None
    try:
        if workload == SAMPLE:
            with torch.no_grad():
                out = fn(h, weight, 0.9, chunk)
        else:
            out = fn(h, weight, torch.randint(0, vocab, (n,), generator=gen).to(device), chunk)
    except Exception as exc:  # a broken user variant: say so before any point is measured
        raise UsageError(f"{where}: raised {describe(exc, 200)} on a tiny {device} problem "
                         f"(N {n}, vocab {vocab}, d_model {d})") from None
    got = f"{type(out).__name__}" + (f" of shape {tuple(out.shape)} and dtype {out.dtype}"
                                     if isinstance(out, torch.Tensor) else "")
    if workload == SAMPLE:
        ok = (isinstance(out, torch.Tensor) and out.shape == (n,) and not out.is_floating_point()
              and bool(((out >= 0) & (out < vocab)).all()))
        if not ok:
            raise UsageError(f"{where}: returned {got}; a sampler returns ({n},) integer token ids in "
                             f"[0, {vocab})")
        return
    if not (isinstance(out, torch.Tensor) and out.dim() == 0 and out.is_floating_point()):
        raise UsageError(f"{where}: returned {got}; a loss returns a 0-dim floating tensor (the mean loss)")
    if not out.requires_grad:
        raise UsageError(f"{where}: its loss does not require grad, so backward cannot reach h and weight")
