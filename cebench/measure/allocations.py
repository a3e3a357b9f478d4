"""One step's allocator events with the operator that made each, from `torch.profiler`.

With `profile_memory` and `record_shapes`, the profiler's event tree holds each allocation
and free of the allocator as a child of the operator event it happened in, and each
operator's input tensors with the allocation they live in. For each allocation:

- op: the innermost operator around it, past the helpers that only allocate for an outer
  operator (`empty`, `zeros`, `_to_copy`, ...). Inside a compiled graph, where no operator
  is around it: "compiled graph → <the first operator of the graph that takes the buffer
  whole>" (an extern kernel such as `mm` writing into it, typically). A CPU
  RNG state (`torch.utils.checkpoint` saves one per chunk): "get_rng_state". Else "(no op)".
- phase: backward inside an `autograd::engine::evaluate_function: <node>` event, and
  anything after the forward returned (the seed gradient); recompute when an operator
  between the node and the allocation has an autograd sequence number (it ran with grad
  mode on: forward work redone in backward); forward otherwise.
- shape and dtype: those of the first operator input that spans the whole allocation;
  unknown when no operator takes it whole.

Frees are matched to allocations by the profiler's allocation id. The events are put in
time order as `cebench.core.memory.allocation_events` orders them, so their running
peak is the number `sweep` measures.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import cast

import torch

from cebench.core.memory import profiled, round_up
from cebench.measure.timeline import (
    BACKWARD,
    FORWARD,
    NO_OP,
    RECOMPUTE,
    RNG_STATE,
    Block,
    Timeline,
    TimelineBuilder,
    dtype_name,
    marking,
    op_name,
)
from cebench.shims.tensor import watch_rng_states
from cebench.shims.torch_names import AllocationFields, EventType, ProfilerEvent, TensorMetadata, TorchOpFields

MARK = "cebench::forward-returned"
COMPILED = "compiled graph"
_EVALUATE = "autograd::engine::evaluate_function: "
_COMPILED_CALL = "## Call CompiledFxGraph"
_NOT_OPS = ("autograd::", "torch::autograd::", "cebench::", "profiler::")
# Operators that allocate on behalf of the operator around them.
_HELPERS = frozenset(f"aten::{n}" for n in ("empty", "empty_like", "empty_strided", "zeros", "zeros_like",
                                            "new_zeros", "new_empty", "new_empty_strided", "_to_copy"))

Event = ProfilerEvent
Use = tuple[tuple[int, ...], torch.dtype, str | None]  # an input: shape, dtype, the operator if in compiled code


def _is_op(name: str) -> bool:
    return "::" in name and not name.startswith(_NOT_OPS)


def _walk(roots: list[Event], device: str, uses: dict[int, list[Use]]) -> Iterator[tuple[Event, tuple[Event, ...]]]:
    """(allocator event on `device` or `MARK` event, its enclosing operator events outermost
    first), depth first; fills `uses` (allocation id → every operator input that lives in
    it) on the way."""
    stack: list[tuple[Event, tuple[Event, ...]]] = [(e, ()) for e in reversed(roots)]
    while stack:
        event, above = stack.pop()
        if event.tag == EventType.Allocation:
            if cast(AllocationFields, event.extra_fields).device.type == device:
                yield event, above
            continue
        if event.name == MARK:
            yield event, above
        if event.tag == EventType.TorchOp:
            compiled = any(e.name.startswith(_COMPILED_CALL) for e in above)
            for value in cast(TorchOpFields, event.extra_fields).inputs:
                for t in value if isinstance(value, list) else (value,):
                    if isinstance(t, TensorMetadata) and t.allocation_id is not None:
                        uses[t.allocation_id].append((tuple(t.sizes), t.dtype, event.name if compiled else None))
            above = above + (event,)
        stack.extend((child, above) for child in reversed(event.children))


def _op(above: tuple[Event, ...]) -> str:
    """The operator an allocation is attributed to (see the module's docstring)."""
    ops = [e.name for e in above if _is_op(e.name)]
    if ops:
        inner = [n for n in ops if n not in _HELPERS]
        return op_name(inner[-1] if inner else ops[-1])
    return COMPILED if any(e.name.startswith(_COMPILED_CALL) for e in above) else NO_OP


def _context(above: tuple[Event, ...], after_forward: bool) -> tuple[str, str | None, int | None]:
    """(phase, autograd node or enclosing custom op, region: the node call's identity)."""
    calls = [i for i, e in enumerate(above) if e.name.startswith(_EVALUATE)]
    if not calls:
        custom = next((e.name for e in above if _is_op(e.name) and not e.name.startswith("aten::")), None)
        return (BACKWARD if after_forward else FORWARD), custom and op_name(custom), None
    call = above[calls[-1]]
    node = call.name.removeprefix(_EVALUATE)
    inside = [e for e in above[calls[-1] + 1:] if e.name != node]
    phase = (RECOMPUTE if any(cast(TorchOpFields, e.extra_fields).sequence_number >= 0 for e in inside)
             else BACKWARD)  # `above` holds operator events only
    return phase, op_name(node), id(call)


def _infer_shapes(blocks: dict[int, Block], uses: dict[int, list[Use]], granularity: int) -> None:
    """Give each block the shape and dtype of the first operator input that spans it whole."""
    for aid, block in blocks.items():
        for shape, dtype, user in uses.get(aid, ()):
            if block.shape is None and round_up(math.prod(shape) * dtype.itemsize, granularity) == block.nbytes:
                block.shape, block.dtype = shape, dtype_name(dtype)
                if block.op == COMPILED and user is not None:
                    block.op = f"{COMPILED} → {op_name(user)}"
                break


class ProfiledStep:
    """Records one step on `device` ('cpu', or 'cuda': the caching allocator's events,
    blocks of `granularity` bytes). Run the loss function `wrap` returns: it marks where the
    forward returns."""

    def __init__(self, device: str, granularity: int = 1) -> None:
        self.device = device
        self.granularity = granularity
        self._output_ptr: int | None = None

    def mark(self, output: torch.Tensor) -> None:
        """The forward returned `output` (the loss): a marker event in the recording."""
        with torch.autograd.profiler.record_function(MARK):
            self._output_ptr = output.untyped_storage().data_ptr()

    def wrap(self, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        """`fn`, marking where it returns."""
        return marking(fn, self.mark)

    def record(self, run: Callable[[], object]) -> Timeline:
        """Run `run()` once under the profiler and return its timeline."""
        states: dict[int, tuple[tuple[int, ...], torch.dtype]] = {}  # address → shape and dtype

        def remember(tensor: torch.Tensor) -> None:
            states[tensor.data_ptr()] = tuple(tensor.shape), tensor.dtype

        with watch_rng_states(remember):
            roots = profiled(run, record_shapes=True).experimental_event_tree()
        uses: dict[int, list[Use]] = defaultdict(list)
        found = sorted(_walk(roots, self.device, uses), key=lambda item: item[0].start_time_ns)  # stable
        blocks: dict[int, Block]
        ptrs: dict[int, int]  # address → allocation id
        builder, blocks, ptrs = TimelineBuilder(), {}, {}
        forward = True
        for event, above in found:
            if event.name == MARK:
                assert self._output_ptr is not None  # mark() set it in the MARK event
                builder.mark_backward(ptrs.get(self._output_ptr))
                forward = False
                continue
            fields = cast(AllocationFields, event.extra_fields)  # every event but MARK is an allocator's
            assert fields.allocation_id is not None  # the profiler gives every allocator event one
            phase, node, region = _context(above, not forward)
            if fields.alloc_size < 0:
                builder.free(fields.allocation_id, -fields.alloc_size, region)
                continue
            op = _op(above)
            state = states.get(fields.ptr) if op == NO_OP else None
            block = builder.alloc(fields.allocation_id, fields.alloc_size, op if state is None else RNG_STATE,
                                  phase, None if node == op else node, region=region)
            if state is not None:
                block.shape, block.dtype = state[0], dtype_name(state[1])
            blocks[fields.allocation_id], ptrs[fields.ptr] = block, fields.allocation_id
        _infer_shapes(blocks, uses, self.granularity)
        return builder.build()
