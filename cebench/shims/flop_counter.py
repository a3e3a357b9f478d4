"""`torch.utils.flop_counter` as a trace counts with it: its attention formulas made to count
grouped-query attention on every supported release (torch 2.8's assert equal heads), its
module tracker replaced by one that hooks nothing (the default keeps tensors alive through
checkpointed blocks), and one op counted by hand (`count_op`) where the storage tracker runs
the op itself."""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from cebench.core.patched import Replaced
from cebench.core.version import TORCH_CHECKED

if TYPE_CHECKING:
    from torch.utils.flop_counter import FlopCounterMode

CHECKED = {"torch": TORCH_CHECKED}
FORMULAS = Replaced("torch.utils.flop_counter", ("sdpa_flop_count", "sdpa_backward_flop_count"),
                    "grouped-query attention counted with the query's heads (torch 2.8's formulas assert equal heads)")
COUNTER = Replaced("torch.utils.flop_counter.FlopCounterMode", ("_count_flops", "mod_tracker"),
                   "one op's FLOPs counted by the storage tracker that runs it; a module tracker that hooks "
                   "nothing", instance=True)


def _heads_as_query(query: Sequence[int], *others: Sequence[int]) -> list[tuple[int, ...]]:
    """Key, value (and gradient) shapes (b, h, s, d) with the query's heads: grouped-query
    attention runs each query head against its group's key and value, the FLOPs of as many
    heads as the query has."""
    return [(s[0], query[1], *s[2:]) for s in others]


@functools.cache
def _grouped_query_formulas() -> dict[str, Callable[..., int]]:
    """Replacements for the attention formulas that assert the key has the query's heads
    (torch 2.8); {} where torch's own count grouped-query attention (2.9 on). Probed once per
    process, before any replaces them."""
    from torch.utils import flop_counter

    try:
        flop_counter.sdpa_flop_count((1, 2, 1, 1), (1, 1, 1, 1), (1, 1, 1, 1))
        return {}
    except AssertionError:
        pass
    forward, backward = flop_counter.sdpa_flop_count, flop_counter.sdpa_backward_flop_count

    def sdpa_flop_count(query_shape: Sequence[int], key_shape: Sequence[int], value_shape: Sequence[int]) -> int:
        return forward(query_shape, *_heads_as_query(query_shape, key_shape, value_shape))

    def sdpa_backward_flop_count(grad_out_shape: Sequence[int], query_shape: Sequence[int],
                                 key_shape: Sequence[int], value_shape: Sequence[int]) -> int:
        return backward(grad_out_shape, query_shape, *_heads_as_query(query_shape, key_shape, value_shape))

    return {"sdpa_flop_count": sdpa_flop_count, "sdpa_backward_flop_count": sdpa_backward_flop_count}


@contextlib.contextmanager
def grouped_query_flops() -> Iterator[None]:
    """Within: torch's FLOP formulas count grouped-query attention on every supported release."""
    replacements = _grouped_query_formulas()
    with FORMULAS(replacements) if replacements else contextlib.nullcontext():
        yield


class _Flat:
    """A module tracker that tracks nothing: entered and exited, and asked for parents,
    which are the global scope alone."""

    parents: frozenset[str] = frozenset({"Global"})

    def __enter__(self) -> _Flat:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def untracked_modules(counter: FlopCounterMode) -> FlopCounterMode:
    """`counter` with a module tracker that hooks nothing: the default attributes FLOPs to
    modules by hooking every module's outputs, which keeps tensors alive through checkpointed
    blocks (a traced step would hold more than the real one)."""
    COUNTER.set_on(counter, {"mod_tracker": _Flat()})  # duck-typed: entered and asked for parents
    return counter


def count_op(counter: FlopCounterMode, func: Any, args: tuple, kwargs: dict, out: object) -> None:
    """Add one op's FLOPs (`func`, an ATen overload, run on `args`/`kwargs` to `out`) to
    `counter`, as if it had seen the op itself."""
    counter._count_flops(func._overloadpacket, out, args, kwargs)
