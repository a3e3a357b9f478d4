"""Answers to a step's reads of tensor data, while it runs on `meta` tensors.

A `meta` tensor has a shape and no values, yet a peer's Python asks for some: Liger-Kernel
counts the rows whose target is not ignored (`(target != ignore_index).sum().item()`,
which sizes nothing but is passed to its kernel) and skips a multiplication when the
upstream gradient is 1 (`torch.equal(grad_output, torch.tensor(1.0))`, which decides
whether its backward launches two more kernels); Cut Cross-Entropy lists the rows whose
target is not ignored (`(targets != ignore_index).nonzero()`, whose size sizes its
buffers). On meta all three fail. The real run's
answers follow from the point itself: cebench makes the inputs (`cebench.losses.inputs`),
so it knows that exactly round(N × ignore_frac) targets are `IGNORE_INDEX` and the others
are token ids in [0, vocab), and that a scalar loss is backpropagated with
`torch.ones_like(loss)`.

`Answers` is a dispatch mode that keeps what is known of the values of some storages and
answers the ops that read data (`aten._local_scalar_dense`, which `.item()`, `int()` and
`float()` call; `aten.equal`; `aten.is_nonzero`, which `bool()` calls; `aten.nonzero` of
a `Mask`, whose output's shape is what it reads: its elements, indices, stay unknown) from
it. What is known, and how it travels:

- `Labels(ignored, ignore_index)`: a targets tensor (registered with `labels`): `ignored`
  of its elements are `ignore_index`, none of the others is. `ne`/`eq` with that scalar make
  a `Mask`. Older Liger releases count each chunk's targets too (a slice): known where no
  target is padding (or every one is), not where the padding's places decide.
- `Mask(true)`: a bool tensor with `true` elements set; `logical_not`/`bitwise_not` flip it,
  `sum`/`count_nonzero` count them.
- `Below(high)`: whole numbers in [0, high): the targets times their not-padding mask
  (Liger's bounds check, `(target * target_mask).max() < V`), their maximum and minimum;
  `< high` and `>= 0` of one are true.
- `Constant(value)`: every element is `value`: the `ones`/`zeros`/`full` factories and their
  `_like`/`new_` forms, `fill_`/`zero_` of a whole storage, a tensor made from Python data
  whose elements are all equal (`torch.tensor(1.0)`, which reaches no dispatch mode: the
  factory is wrapped for the block), a copy or a conversion of a constant, a sum of one, and
  the output of a pointwise op (`torch.Tag.pointwise`, not in place) whose tensor arguments
  are all constants: that op run on one element of each on the host (Liger 0.4.2's
  `n_non_ignore / total_n_non_ignore if total_n_non_ignore > 0`, 0.2.1's
  `torch.ne(grad_output, torch.tensor(1.0))`).

Views share their storage, so a constant storage's views are constants; a `Labels` or
`Mask` is known only through a tensor that spans its whole storage, but for targets none
(or all) of which are padding, whose every slice is alike. An op that writes
into a storage (in place, `out=`) makes it unknown unless a rule above says what it holds,
and so does a skipped Triton launch (`forget`, from `cebench.engine.triton_launches`),
which may have written into any tensor it was given; but the targets stay known: a loss
never writes its inputs (the next step reuses them), and Liger's kernels are given
slices of the targets to read (`Y_ptr`). A
read of a value that is not known raises `UnknownValue`: the prediction is an error row,
never a guess.
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from cebench.shims.tensor import DATA_FACTORIES, TORCH
from cebench.shims.torch_names import TorchDispatchMode, is_fake, schema, storage_key, unset_fake_temporarily

aten = torch.ops.aten


class UnknownValue(RuntimeError):
    """A step read the data of a meta tensor whose values cebench does not know."""


@dataclass(frozen=True)
class Constant:
    """Every element of the storage is `value`."""

    value: bool | int | float


@dataclass(frozen=True)
class Labels:
    """Targets: `ignored` elements are `ignore_index`, no other is; the others are token ids
    below `vocab` (0: not known)."""

    ignored: int
    ignore_index: int
    vocab: int = 0


@dataclass(frozen=True)
class Below:
    """Every element is a whole number in [0, `high`)."""

    high: int


@dataclass(frozen=True)
class Mask:
    """A bool tensor with `true` elements set."""

    true: int


Value = Constant | Labels | Mask | Below

FACTORY_CONSTANTS: dict[Any, Callable[[tuple, dict], bool | int | float]] = {
    **{op: (lambda args, kwargs: 1) for op in (aten.ones.default, aten.ones_like.default, aten.new_ones.default)},
    **{op: (lambda args, kwargs: 0) for op in (aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default)},
    aten.full.default: lambda args, kwargs: args[1],
    aten.full_like.default: lambda args, kwargs: args[1],
    aten.new_full.default: lambda args, kwargs: args[2],
    aten.scalar_tensor.default: lambda args, kwargs: args[0],
}
# Ops whose output holds its first argument's values (converted to the output's dtype).
COPIES = frozenset({aten.clone.default, aten._to_copy.default, aten.lift_fresh_copy.default, aten.lift_fresh.default,
                    aten.contiguous.default, aten.alias.default, aten.detach.default})

def _symbolic(t: object) -> bool:
    """Whether `t` is a tensor without data: on `meta`, or a fake tensor (a sharded step;
    one made from Python data keeps it as its `constant`)."""
    return isinstance(t, torch.Tensor) and (t.is_meta or is_fake(t))

# The ops that read a tensor's data, answered here for meta tensors.
READS = frozenset({aten._local_scalar_dense.default, aten.is_nonzero.default, aten.equal.default,
                   aten.nonzero.default})

# The ops a rule of `Answers._after` knows the output of.
_RULES = frozenset({*FACTORY_CONSTANTS, *COPIES, aten.fill_.Scalar, aten.zero_.default, aten.ne.Scalar,
                    aten.eq.Scalar, aten.logical_not.default, aten.bitwise_not.default, aten.sum.default,
                    aten.count_nonzero.default, aten.mul.Tensor, aten.max.default, aten.min.default,
                    aten.lt.Scalar, aten.ge.Scalar})


@functools.cache
def _pointwise(func: Any) -> bool:
    """Whether `func` computes each output element from the same element of its inputs."""
    return torch.Tag.pointwise in func.tags


@functools.cache
def _written(func: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of each argument `func` writes into (in place, `out=`): read from its
    schema once per op, not at every call (a trace runs thousands of ops)."""
    return tuple((i, a.name) for i, a in enumerate(schema(func).arguments)
                 if a.alias_info is not None and a.alias_info.is_write)


def _convert(value: bool | int | float, dtype: torch.dtype) -> bool | int | float:
    """`value` as an element of `dtype` holds it."""
    if dtype == torch.bool:
        return bool(value)
    if not dtype.is_floating_point and not dtype.is_complex:
        return int(value)
    return float(value)


def _whole(t: torch.Tensor) -> bool:
    """Whether `t` spans its storage (every element of it, once, from its start)."""
    return (t.storage_offset() == 0 and t.is_contiguous()
            and t.numel() * t.element_size() == t.untyped_storage().nbytes())


def _equal_elements(data: object) -> tuple[bool, object]:
    """(True, the element) when the Python data `data` (a number or nested sequences of
    numbers) holds one value only, else (False, None)."""
    if isinstance(data, bool | int | float):
        return True, data
    if isinstance(data, list | tuple) and data:
        firsts = [_equal_elements(d) for d in data]
        if all(ok for ok, _ in firsts) and len({v for _, v in firsts}) == 1:
            return True, firsts[0][1]
    return False, None


def _unknown(func: Any, t: torch.Tensor) -> UnknownValue:
    """The error of `func` reading the values of `t`, which are not known."""
    return UnknownValue(f"{func} reads the values of a meta tensor of shape {tuple(t.shape)} and dtype {t.dtype} "
                        "that cebench does not know (it knows the targets' padding and the constants a step "
                        "makes): the step cannot be predicted on meta; measure it with cebench sweep")


class Answers(TorchDispatchMode):
    """A dispatch mode that answers a step's data reads from what it knows of its storages
    (the module's docstring says what and how). Enter it below the storage tracker (before
    it): the tracker's ops reach it. `labels` registers a targets tensor."""

    def __init__(self) -> None:
        super().__init__()
        self._known: dict[int, Value] = {}
        self._finalized: set[int] = set()
        self._inputs: set[int] = set()  # the targets' storages: a kernel given them only reads them

    # what is known
    def _key(self, t: torch.Tensor) -> int:
        return storage_key(t.untyped_storage())

    def _set(self, t: torch.Tensor, value: Value | None) -> None:
        storage = t.untyped_storage()
        key = storage_key(storage)
        if value is None:
            self._known.pop(key, None)
            return
        if key not in self._finalized:
            self._finalized.add(key)
            weakref.finalize(storage, self._drop, key)
        self._known[key] = value

    def _drop(self, key: int) -> None:
        self._known.pop(key, None)
        self._finalized.discard(key)

    def value(self, t: object) -> Value | None:
        """What is known of tensor `t`'s values (None: nothing, or `t` is no tensor)."""
        if not isinstance(t, torch.Tensor):
            return None
        known = self._known.get(self._key(t))
        if isinstance(known, Constant) or (known is not None and _whole(t)):
            return known
        if isinstance(known, Labels) and known.ignored in (0, t.untyped_storage().nbytes() // t.element_size()):
            return Labels(0 if known.ignored == 0 else t.numel(), known.ignore_index, known.vocab)  # slices alike
        return None

    def labels(self, targets: torch.Tensor, ignored: int, ignore_index: int, vocab: int = 0) -> None:
        """`targets` holds `ignored` elements equal to `ignore_index` and no other; the others
        are below `vocab` (0: not known)."""
        self._set(targets, Labels(ignored, ignore_index, vocab))
        self._inputs.add(self._key(targets))

    def forget(self, tensors: Iterable[torch.Tensor]) -> None:
        """What `tensors`' storages hold is no longer known (a kernel may have written into
        them), the step's targets excepted (a loss only reads its inputs)."""
        for t in tensors:
            if self._key(t) not in self._inputs:
                self._set(t, None)

    # the answers
    def _read(self, func: Any, t: torch.Tensor) -> bool | int | float:
        known = self.value(t)
        if not isinstance(known, Constant):
            raise _unknown(func, t)
        return _convert(known.value, t.dtype)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in READS and not any(_symbolic(a) and getattr(a, "constant", None) is None for a in args):
            # a real tensor's data (an optimizer's step count on the host), or a fake tensor's constant
            return func(*args, **kwargs)
        if func is aten._local_scalar_dense.default:
            return self._read(func, args[0])
        if func is aten.is_nonzero.default:
            return bool(self._read(func, args[0]))
        if func is aten.equal.default:
            a, b = args
            return a.shape == b.shape and (a.numel() == 0 or self._read(func, a) == self._read(func, b))
        if func is aten.nonzero.default:
            return self._nonzero(args[0])
        out = func(*args, **kwargs)
        self._after(func, args, kwargs, out)
        return out

    def _nonzero(self, t: torch.Tensor) -> torch.Tensor:
        """`t.nonzero()` for a known `Mask`: the (true, t.dim()) int64 indices, on meta."""
        known = self.value(t)
        if not isinstance(known, Mask):
            raise _unknown(aten.nonzero.default, t)
        return torch.empty((known.true, t.dim()), dtype=torch.long, device=t.device)

    def _after(self, func: Any, args: tuple, kwargs: dict, out: object) -> None:
        """Record what `func`'s output (or the storage it wrote) holds, where a rule knows."""
        if self._known:  # what it wrote into is unknown now ...
            for i, name in _written(func):
                written = kwargs.get(name, args[i] if i < len(args) else None)
                for t in written if isinstance(written, list | tuple) else (written,):
                    if isinstance(t, torch.Tensor):
                        self._set(t, None)
        if not isinstance(out, torch.Tensor) or func not in _RULES and not _pointwise(func):
            return
        first = self.value(args[0]) if args else None
        value: Value | None = None  # ... unless a rule says what it holds
        if func in FACTORY_CONSTANTS:
            value = Constant(_convert(FACTORY_CONSTANTS[func](args, kwargs), out.dtype))
        elif func in (aten.fill_.Scalar, aten.zero_.default) and _whole(out):
            value = Constant(_convert(args[1] if func is aten.fill_.Scalar else 0, out.dtype))
        elif func in COPIES and isinstance(first, Constant):
            value = Constant(_convert(first.value, out.dtype))
        elif func in (aten.ne.Scalar, aten.eq.Scalar) and isinstance(first, Labels) and args[1] == first.ignore_index:
            ignored = first.ignored if func is aten.eq.Scalar else args[0].numel() - first.ignored
            value = Mask(ignored)
        elif func in (aten.logical_not.default, aten.bitwise_not.default) and isinstance(first, Mask):
            value = Mask(args[0].numel() - first.true)
        elif func in (aten.sum.default, aten.count_nonzero.default) and isinstance(first, Mask):
            value = Constant(_convert(first.true, out.dtype))
        elif func is aten.sum.default and isinstance(first, Constant):
            value = Constant(_convert(first.value * args[0].numel(), out.dtype))
        if value is None and func in (aten.mul.Tensor, aten.max.default, aten.min.default, aten.lt.Scalar,
                                      aten.ge.Scalar):
            value = self._bounded(func, args)
        if value is None and _pointwise(func) and not _written(func):
            value = self._element(func, args, kwargs)
        if value is not None:
            self._set(out, value)

    def _bounds(self, t: object) -> int | None:
        """`high` where every element of `t` is known to lie in [0, high): a `Below`, or targets
        none of which is padding."""
        known = self.value(t)
        if isinstance(known, Below):
            return known.high
        return known.vocab if isinstance(known, Labels) and known.ignored == 0 and known.vocab else None

    def _bounded(self, func: Any, args: tuple) -> Value | None:
        """Targets masked where they are padding (`target * (target != ignore_index)`: Liger
        0.6 on checks them) are below the vocabulary, and so are their maximum and minimum;
        comparing those with the vocabulary or 0 is known."""
        if func is aten.mul.Tensor:
            labels, mask = (self.value(a) for a in args)
            if isinstance(mask, Labels):
                labels, mask = mask, labels
            if isinstance(labels, Labels) and labels.vocab and isinstance(mask, Mask) \
                    and mask.true == args[0].numel() - labels.ignored:
                return Below(labels.vocab)
            return None
        high = self._bounds(args[0])
        if high is None:
            return None
        if func in (aten.max.default, aten.min.default):
            return Below(high)
        if func is aten.lt.Scalar:
            return Constant(True) if args[1] >= high else None
        return Constant(True) if args[1] <= 0 else None  # ge

    def _element(self, func: Any, args: tuple, kwargs: dict) -> Constant | None:
        """The output of pointwise `func` where each tensor argument is a constant: `func` run
        on one host element of each (None if any is not known)."""
        elements = []
        for a in (*args, *kwargs.values()):
            known = self.value(a)
            if isinstance(a, torch.Tensor) and not isinstance(known, Constant):
                return None
            elements.append(torch.tensor(known.value, dtype=a.dtype) if isinstance(known, Constant) else a)
        try:
            with unset_fake_temporarily():  # on the host, even under fake tensors (a sharded step)
                out = func(*elements[:len(args)], **dict(zip(kwargs, elements[len(args):], strict=True)))
        except (RuntimeError, TypeError):  # not computable on the host: unknown, as before
            return None
        return Constant(out.item()) if isinstance(out, torch.Tensor) and out.numel() == 1 else None

    @contextlib.contextmanager
    def data_factories(self) -> Iterator[None]:
        """Within: a meta tensor made from Python data (`torch.tensor(1.0, device=...)`,
        which reaches no dispatch mode) whose elements are all one value is known to hold it."""
        def recording(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
            @functools.wraps(fn)
            def made(data: object, *args: Any, **kwargs: Any) -> torch.Tensor:
                out = fn(data, *args, **kwargs)
                same, element = _equal_elements(data)
                if same and _symbolic(out):
                    self._set(out, Constant(_convert(element, out.dtype)))  # type: ignore[arg-type]
                return out

            return made

        with TORCH({name: recording(getattr(torch, name)) for name in DATA_FACTORIES}):
            yield
