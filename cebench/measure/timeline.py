"""One step's allocations in order, each with what made it: the data both recorders return.

A `Block` is one allocation (bytes as the allocator or tracker counts them) with the op
that created it, its shape and dtype where known, the phase of the step it was made in and
the autograd node running then. `Timeline.events` are the allocations and frees in time
order; their running sum is the live byte count, and its maximum is the step's peak Δ.

Phases: `forward` (the loss function's call), `backward` (`loss.backward()`: the autograd
engine's nodes and the seed gradient), and `recompute`: forward ops run again inside a
backward node, as `torch.utils.checkpoint` does.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

FORWARD = "forward"
BACKWARD = "backward"
RECOMPUTE = "recompute"
NO_OP = "(no op)"  # an allocation made outside every recorded operator
RNG_STATE = "get_rng_state"  # a CPU RNG state (checkpointing saves one per chunk), made outside the dispatcher
_SHORT_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def dtype_name(dtype: torch.dtype) -> str:
    """'fp32', 'bf16', 'fp16' for the input dtypes, else torch's name ('int64', 'uint8')."""
    name = str(dtype).removeprefix("torch.")
    return _SHORT_DTYPES.get(name, name)


def op_name(qualified: str) -> str:
    """An operator's name as shown, without its namespace: 'aten::mm' → 'mm',
    'torch_nn::_linear_cross_entropy_batch_chunked' → '_linear_cross_entropy_batch_chunked';
    '_to_copy' (what `.to()` and `.float()` dispatch to) → 'to', as the profiler names it."""
    name = qualified.rpartition("::")[2]
    return "to" if name == "_to_copy" else name


def marking(fn: Callable[..., torch.Tensor], mark: Callable[[torch.Tensor], None]) -> Callable[..., torch.Tensor]:
    """`fn`, calling `mark` with its result when it returns (where a step's forward ends)."""
    def forward(*args: object, **kwargs: object) -> torch.Tensor:
        out = fn(*args, **kwargs)
        mark(out)
        return out

    return forward


@dataclass
class Block:
    """One allocation of the step. `node`: the autograd node running when it was made
    (backward, recompute) or the custom op it was made inside (forward); `region` and
    `freed_region` tell apart the calls of backward nodes (None outside them); `created`
    and `freed` index `Timeline.events` (`freed` None: still alive when the step ended)."""

    nbytes: int
    op: str
    phase: str
    node: str | None
    shape: tuple[int, ...] | None
    dtype: str | None
    created: int
    region: int | None = None
    freed: int | None = None
    freed_region: int | None = None

    def alive_at(self, event: int) -> bool:
        """Allocated at or before `event` and not freed by then."""
        return self.created <= event and (self.freed is None or self.freed > event)


@dataclass(frozen=True)
class Timeline:
    """A step's allocations and frees in order. `events`: (block index, signed bytes), the
    block None for a free of memory allocated before the step. `backward_start`: the first
    event after the forward returned (None: no backward was marked). `output`: the block
    holding the forward's result (the loss), when known."""

    blocks: tuple[Block, ...]
    events: tuple[tuple[int | None, int], ...]
    backward_start: int | None
    output: int | None

    def live_bytes(self) -> list[int]:
        """Bytes live after each event (the running sum)."""
        live, out = 0, []
        for _, size in self.events:
            live += size
            out.append(live)
        return out

    def peak(self) -> tuple[int | None, int]:
        """(first event at the highest live count, that count); (None, 0) when the count never
        rises above 0. The count is what `running_peak` measures from the same events."""
        live = self.live_bytes()
        top = max(live, default=0)
        return (live.index(top), top) if top > 0 else (None, 0)


class TimelineBuilder:
    """Collects blocks and events as a recorder sees them; `key` is whatever identifies a
    live allocation to that recorder (a storage, an allocation id)."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.events: list[tuple[int | None, int]] = []
        self.live: dict[Hashable, int] = {}
        self.backward_start: int | None = None
        self.output: int | None = None

    def alloc(self, key: Hashable, nbytes: int, op: str, phase: str, node: str | None = None,
              shape: tuple[int, ...] | None = None, dtype: str | None = None, region: int | None = None) -> Block:
        """A new allocation of `nbytes` under `key`."""
        block = Block(nbytes, op, phase, node, shape, dtype, len(self.events), region)
        self.live[key] = len(self.blocks)
        self.blocks.append(block)
        self.events.append((len(self.blocks) - 1, nbytes))
        return block

    def free(self, key: Hashable, nbytes: int, region: int | None = None) -> None:
        """The allocation under `key` is freed; one the builder never saw allocated (made
        before the step) is an event of −`nbytes` without a block."""
        index = self.live.pop(key, None)
        if index is None:
            self.events.append((None, -nbytes))
            return
        block = self.blocks[index]
        block.freed, block.freed_region = len(self.events), region
        self.events.append((index, -block.nbytes))

    def mark_backward(self, output_key: Hashable | None) -> None:
        """The forward returned: later events belong to the backward; `output_key` holds its result."""
        self.backward_start = len(self.events)
        self.output = self.live.get(output_key)

    def build(self) -> Timeline:
        """The timeline so far (a copy: later events do not change it)."""
        return Timeline(tuple(replace(b) for b in self.blocks), tuple(self.events), self.backward_start, self.output)
