"""What each traced op costs a GPU: its FLOPs, the bytes it must move and its class, for the
time model (`cebench.core.timemodel`).

`Costs` is an observer of the storage tracker (`Costs.op`, a `tracker.Observer`): it is shown every
ATen op the step dispatches (the ops of a custom op's Python kernel too) and every Triton launch
a trace skips (`launch`). An op that only makes a view or an empty buffer launches nothing and
costs nothing. Any other is one kernel that reads each tensor input once and writes each
tensor output once, in its dtype (`tensor_bytes`: a broadcast input counts its distinct
elements; not an argument it takes for its shape or overwrites, `UNREAD`, nor `out=`): an
in-place op reads and writes its tensor. Its FLOPs are those torch's
`FlopCounterMode` formulas give (matmuls and attention: 2 per multiply-add); an op with FLOPs
is a matmul, one of `REDUCTIONS` a reduction over a row (softmax, the NLL loss, norms), one
that reads a value to the host a sync, any other an elementwise op.

A skipped Triton launch (Liger-Kernel's loss kernels) is a `FUSED` kernel that reads every
tensor argument once and writes its largest one (the logits chunk it turns into its
gradient, in place). Cut Cross-Entropy's kernels hold its matmuls, which no formula here
counts: such a step's time is not predicted (`Variant.kernel_matmuls`). A kernel inductor
generated (compiled code, run on meta by `cebench.engine.compiled`) is counted as such a
fused kernel too, its buffers read or written once; the matmuls it leaves to cuBLAS are
ATen ops. A collective (`c10d`: FSDP's all-gathers and reduce-scatters, the vocab-parallel
loss's all-reduces; `_c10d_functional`: DTensor's, under --tp; on a fake process group) sends
what a ring sends from one rank (`_sent`).
"""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from cebench.core.config import Config
from cebench.core.timemodel import COLLECTIVE, ELEMENTWISE, FP8, FP32, FUSED, HALF, MATMUL, REDUCTION, SYNC, OpCost
from cebench.engine import support
from cebench.shims.torch_names import OpOverload, packet, schema

# Ops that allocate or re-describe a tensor without running a kernel on its data.
NO_KERNEL = frozenset({"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "_unsafe_view",
                       "lift_fresh", "resize_", "set_", "record_stream", "_reshape_alias", "sym_size", "sym_stride",
                       "sym_numel", "sym_storage_offset", "_assert_async", "_assert_scalar"})
# Ops that write their output without reading their tensor inputs' data.
WRITE_ONLY = frozenset({"fill_", "zero_", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
                        "new_zeros", "new_ones", "new_full", "fill", "scalar_tensor", "arange", "randn", "rand",
                        "randint", "normal_", "uniform_", "bernoulli_", "random_"})
# Ops that reduce along a row: a softmax, a loss, a norm.
REDUCTIONS = frozenset({"_log_softmax", "_log_softmax_backward_data", "_softmax", "_softmax_backward_data",
                        "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
                        "logsumexp", "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "norm",
                        "linalg_vector_norm", "var_mean", "std_mean", "native_layer_norm",
                        "native_layer_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward", "cumsum",
                        "sort", "topk", "multinomial", "embedding_dense_backward", "prod", "any", "all"})
# Arguments (by position) an op takes for their shape or as its destination, not reading their data: the NLL
# loss gathers one logit a row, its backward zero-fills its gradient and scatters one a row, copy_ overwrites.
UNREAD: dict[str, tuple[int, ...]] = {"nll_loss_forward": (0,), "nll_loss2d_forward": (0,),
                                      "nll_loss_backward": (1,), "nll_loss2d_backward": (1,), "copy_": (0,)}
SYNCS = frozenset({"_local_scalar_dense", "item", "nonzero", "is_nonzero", "equal"})
_HALF = (torch.bfloat16, torch.float16)


def _precision(tensors: Sequence[torch.Tensor]) -> str:
    """The precision whose rate applies to an op over `tensors` (the first's dtype): FP8 for
    float8 data, HALF for bf16/fp16, FP32 otherwise."""
    dtype = tensors[0].dtype if tensors else torch.float32
    return FP8 if dtype.itemsize == 1 and dtype.is_floating_point else HALF if dtype in _HALF else FP32
INDUCTOR_KERNEL = "inductor kernel"  # a kernel inductor generated: each buffer it is given read or written once


def tensor_bytes(t: torch.Tensor) -> int:
    """The bytes of `t`'s distinct elements: a dimension of stride 0 (an expanded one) counts once."""
    n = 1
    for size, stride in zip(t.shape, t.stride(), strict=True):
        if stride:
            n *= size
    return n * t.element_size() if t.numel() else 0


def _sent(name: str, tensors: list[torch.Tensor]) -> int:
    """The bytes one rank sends in collective `name` over its tensors (a ring): an all-gather
    or a reduce-scatter moves the whole less its own shard (the larger tensor less the
    smaller); an all-reduce, twice its tensors; a barrier, nothing."""
    sizes = sorted(map(tensor_bytes, tensors))
    if not sizes:
        return 0
    if "allreduce" in name or "all_reduce" in name:
        return 2 * sum(sizes)
    return sizes[-1] - sizes[0] if len(sizes) > 1 else sizes[0]


@functools.cache
def _formulas() -> dict[object, Callable[..., int]]:
    """torch's FLOP formulas by op packet, the in-place `addmm_` and `baddbmm_` as their
    out-of-place twins (as `trace.flop_counter` counts them); once per process (its module
    imports triton: the interpreter is chosen before any trace)."""
    from torch.utils.flop_counter import flop_registry

    aten = torch.ops.aten
    return {**flop_registry, aten.addmm_: flop_registry[aten.addmm], aten.baddbmm_: flop_registry[aten.baddbmm]}


def _tensors(values: Iterable[object]) -> list[torch.Tensor]:
    """The tensors among an ATen op's argument or output `values`: a tensor, or one inside a
    list or tuple (`Tensor[]`, `Tensor?[]`, an op's tuple of outputs), the only nesting an ATen
    schema has (no pytree walk: this runs for every traced op)."""
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


@dataclass(frozen=True)
class _Facts:
    """What `Costs.op` needs of an op that is not its arguments': its `name` (without the
    namespace), the arguments it does not read (`UNREAD`), whether it is a collective, its
    FLOP formula (None: none), whether it reads its inputs at all and its class when it does
    no FLOPs."""

    name: str
    unread: tuple[int, ...]
    collective: bool
    formula: Callable[..., int] | None
    write_only: bool
    kind: str


_FACTS: dict[OpOverload, _Facts | None] = {}


def _facts(func: OpOverload) -> _Facts | None:
    """`func`'s `_Facts`, found once per process (an op runs thousands of times a trace); None
    for an op that costs nothing (a view, `NO_KERNEL`, a profiler mark, a `prim::` query)."""
    if func in _FACTS:
        return _FACTS[func]
    name = schema(func).name.partition("::")[2]
    facts = None
    if not (func.is_view or name in NO_KERNEL or func.namespace in ("profiler", "prim")):  # prim::device: a query
        facts = _Facts(name, UNREAD.get(name, ()), func.namespace in ("c10d", "_c10d_functional"),
                       _formulas().get(packet(func)), name in WRITE_ONLY,
                       SYNC if name in SYNCS else REDUCTION if name in REDUCTIONS else ELEMENTWISE)
    _FACTS[func] = facts
    return facts


class Costs:
    """The ops of one traced step, counted by cost (`ops`: `OpCost` → how many times it ran)
    and, in order, in `sequence` (what `cebench.engine.series` aligns across traces)."""

    def __init__(self) -> None:
        self.ops: Counter[OpCost] = Counter()
        self.sequence: list[OpCost] = []

    @classmethod
    def of(cls, config: Config) -> Costs | None:
        """A new count for a step of `config` whose time is predicted (`Verdict.time`); None
        where it is not (nothing to count for)."""
        return cls() if support.verdict(config).time is None else None

    def op(self, func: OpOverload, args: tuple, kwargs: dict, out: object) -> None:
        """Count one dispatched op with its outputs `out`."""
        facts = _facts(func)
        if facts is None:
            return
        unread = facts.unread
        inputs = _tensors([*(a for i, a in enumerate(args) if i not in unread),
                           *(v for k, v in kwargs.items() if k != "out")])
        outputs = _tensors((out,))
        if not inputs and not outputs:
            return
        precision = _precision(inputs or outputs)
        if facts.collective:
            self._add(OpCost(COLLECTIVE, precision, 0, _sent(facts.name, inputs), facts.name))
            return
        flops = int(facts.formula(*args, **kwargs, out_val=out)) if facts.formula is not None else 0
        read = 0 if facts.write_only else sum(map(tensor_bytes, inputs))
        written = sum(map(tensor_bytes, outputs))
        self._add(OpCost(MATMUL if flops else facts.kind, precision, flops, read + written, facts.name))

    def _add(self, op: OpCost) -> None:
        self.ops[op] += 1
        self.sequence.append(op)

    def launch(self, tensors: Sequence[torch.Tensor], kernel: str = "") -> None:
        """Count one skipped launch of `kernel` with its tensor arguments: a peer's Triton
        kernel reads each once and writes its largest (in place); one inductor generated
        (`INDUCTOR_KERNEL`) reads or writes each once."""
        sizes = [tensor_bytes(t) for t in tensors]
        precision = HALF if any(t.dtype in _HALF for t in tensors) else FP32
        written = 0 if kernel == INDUCTOR_KERNEL else max(sizes, default=0)
        self._add(OpCost(FUSED, precision, 0, sum(sizes) + written, kernel))
