"""Private torch names cebench imports whose home or name differs between the releases it
supports (`cebench.core.version.TORCH_RANGE`), each resolved here once with the releases it
was checked in. Every other module imports them from here, so a release that moves one
more fails here, naming it, and is fixed here.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence

import torch
import torch._functorch.config

from cebench.core.patched import patched

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
# lazily, when the backward first runs (`cebench.predict.compiled` lowers it there then).
LOWERS_BACKWARD_AHEAD: bool = hasattr(torch._functorch.config, "force_non_lazy_backward_lowering")


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


def _heads_as_query(query: Sequence[int], *others: Sequence[int]) -> list[tuple[int, ...]]:
    """Key, value (and gradient) shapes (b, h, s, d) with the query's heads: grouped-query
    attention runs each query head against its group's key and value, the FLOPs of as many
    heads as the query has."""
    return [(s[0], query[1], *s[2:]) for s in others]


@functools.cache
def _grouped_query_formulas() -> dict[str, Callable[..., int]]:
    """Replacements for the attention FLOP formulas of `torch.utils.flop_counter` that assert
    the key has the query's heads (torch 2.8: grouped-query attention, Llama's, fails them;
    2.9 on count it); {} where torch's own count it. Probed once per process (each trace
    enters `grouped_query_flops`), before any replaces them."""
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
    """Within: torch's FLOP formulas count grouped-query attention on every supported release
    (`_grouped_query_formulas`)."""
    from torch.utils import flop_counter

    replacements = _grouped_query_formulas()
    with patched(flop_counter, replacements) if replacements else contextlib.nullcontext():
        yield


@contextlib.contextmanager
def outside_dispatch_modes() -> Iterator[None]:
    """Within: no Python dispatch mode is on, as Dynamo asks it too. `_disable_current_modes`
    takes the modes off their stack; torch 2.8's Dynamo reads a module flag instead
    (`_is_in_non_infra_torch_dispatch_mode`, which only entering and leaving a mode sets) and
    would skip every frame compiled under a tracker: the flags are cleared too, and set back."""
    from torch.utils import _python_dispatch

    flags = {"_is_in_torch_dispatch_mode": False, "_is_in_non_infra_torch_dispatch_mode": False}
    with _python_dispatch._disable_current_modes(), patched(_python_dispatch, flags):
        yield
