"""What a storage tracker must know to follow an FSDP2 step, and the fake world it is
predicted in.

A rank's step is predicted in one process through FSDP2's own code: a fake process group
of the world's size (torch's `fake` backend: collectives do nothing), a CPU device mesh made
before fake mode, and `FakeTensorMode` (FSDP2 refuses parameters on `meta`), whose CPU
tensors stand in for the target's memory as `meta` tensors do in an unsharded step. The
rank predicted is rank 0, which holds the most rows of every unevenly divided parameter.

What the tracker adds (`StorageTracker` applies it):
- a `DTensor` counts as its local shard (`cebench.models.fsdp.local`);
- FSDP2 resizes the storages of the unsharded parameters with `UntypedStorage.resize_`
  (`alloc_storage`, `free_storage`), which never reaches the dispatcher: `follow` reports
  them, and names what FSDP's gathers, copy-outs and reductions make (`scope`);
- FSDP2's own ops and c10d's collectives write into outputs they are given (`WRITES_INTO`):
  they allocate nothing unseen;
- measured on CPU, ProcessGroupGloo allocates temporaries inside two collectives
  (`gloo_temporaries`); NCCL's buffers are outside a GPU's caching allocator.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from cebench.core.patched import resolve
from cebench.models import tensor_parallel
from cebench.shims import dtensor
from cebench.shims.fsdp import PARAM, PARAM_GROUP, SCOPES
from cebench.shims.process import excepthook_kept, without_gc
from cebench.shims.torch_names import FakeTensorMode, OpOverload, schema

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from cebench.core.world import World

# Ranks of a fake world beyond which building it earns a word before it starts (`InputWarning`, said by the command
# that asks for it): its process group and device mesh, and each sharded model in it, grow with the ranks (10,000
# took about a minute).
NOTICE_RANKS = 1_024

# DTensor's functional collectives (--tp): out of place, each allocates its output, which its wait returns (on a
# real process group the wait returns its input: `WAIT`).
FUNCTIONAL = frozenset({"_c10d_functional::all_reduce", "_c10d_functional::all_gather_into_tensor",
                        "_c10d_functional::reduce_scatter_tensor", "_c10d_functional::wait_tensor"})
WAIT = "_c10d_functional::wait_tensor"
# Ops that write into the outputs they are given and allocate nothing else (FSDP2's are defined with
# torch.library.Library, so the tracker would otherwise call them opaque).
WRITES_INTO = frozenset({
    "fsdp::all_gather_copy_in", "fsdp::split_with_sizes_copy", "fsdp::chunk_cat",
    "c10d::_allgather_base_", "c10d::_reduce_scatter_base_", "c10d::allgather_into_tensor_coalesced_",
    "c10d::reduce_scatter_tensor_coalesced_", "c10d::allreduce_", "c10d::broadcast_", "c10d::barrier",
    "prim::device",  # a tensor's device: no tensor out
})


def gloo_temporaries(func: OpOverload, args: tuple) -> tuple[list[int], list[int]]:
    """The bytes of each buffer ProcessGroupGloo holds inside collective `func` on CPU, all at
    once at its highest, all freed before it returns (read from the profiler's events of a
    two-rank step): (those held before its output is made, those after). FSDP2's collectives,
    which write into outputs given: an all-gather, one buffer of its output's size; a
    reduce-scatter, a clone of its input, and while it averages a double scalar and its cast
    to the input's dtype. DTensor's functional ones, after their output: an all-gather, a
    buffer of the output's size; a reduce-scatter, a clone of its input. Other ops: none."""
    name = schema(func).name
    if name == "c10d::_allgather_base_":
        return [args[0].untyped_storage().nbytes()], []
    if name == "c10d::_reduce_scatter_base_":
        return [args[1].untyped_storage().nbytes(), 8, args[1].element_size()], []
    if name == "_c10d_functional::all_gather_into_tensor":
        return [], [args[0].untyped_storage().nbytes() * args[1]]
    if name == "_c10d_functional::reduce_scatter_tensor":
        return [], [args[0].untyped_storage().nbytes()]
    return [], []


# What a CPU target's sharded prediction has not matched: gloo ranks measured more than predicted in worlds whose
# size is not a power of two (3, 5 and 6 ranks of two small Llamas: 0.2-7 % above; 2, 4 and 8 equal to the byte).
UNMATCHED_WORLD_NOTE = ("gloo ranks measured above this prediction in worlds that are not a power of two (0.2-7 % at "
                        "3, 5 and 6 ranks; 2, 4 and 8 equal to the byte): results/README.md")


def matched_world(world: int) -> bool:
    """Whether a CPU target's prediction for `world` ranks was matched by gloo's measurement:
    a power of two."""
    return world & (world - 1) == 0


IN_FLIGHT = "fsdp "  # what the op of a storage FSDP made while gathering or reducing begins with (`follow`)


class Follower(Protocol):
    """What `follow` reports to: a tracker that counts a storage (again) and names its maker,
    and counts nothing while `paused` > 0."""

    scope: str
    paused: int

    def track(self, tensor: torch.Tensor) -> None: ...


@contextlib.contextmanager
def follow(tracker: Follower) -> Iterator[None]:
    """Report each storage FSDP2 resizes (its unsharded parameters', gathered and freed) to
    `tracker.track`, and set `tracker.scope` to `IN_FLIGHT` + what FSDP is doing while it
    gathers, copies out, reduces or resizes; pause `tracker` while DTensor propagates an op's
    sharding (its fake tensors have the op's global shapes, not this rank's). FSDP2's
    functions are private: `_fsdp_param`'s, and the names `_fsdp_param_group` imported."""
    param, param_group = resolve(PARAM.owner), resolve(PARAM_GROUP.owner)

    def scoped(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            outer, tracker.scope = tracker.scope, IN_FLIGHT + name
            try:
                return fn(*args, **kwargs)
            finally:
                tracker.scope = outer
        return run

    def resized(fn: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], None]:
        def run(tensor: torch.Tensor) -> None:
            fn(tensor)
            scoped(tracker.track, "unsharded parameter")(tensor)
        return run

    def pause() -> None:
        tracker.paused += 1

    def resume() -> None:
        tracker.paused -= 1

    storage = {"alloc_storage": resized(param.alloc_storage), "free_storage": resized(param.free_storage)}
    collectives = {name: scoped(getattr(param_group, name), what) for name, what in SCOPES.items()}
    with PARAM(storage), PARAM_GROUP({"alloc_storage": storage["alloc_storage"], **collectives}), \
            dtensor.propagating(pause, resume):
        yield


@dataclass
class FakeWorld:
    """Rank 0 of a fake process group of `world`'s ranks: the CPU device `mesh` to shard and
    split over (`tensor_parallel.world_mesh`), the fake `mode` its tensors live in, and what
    callers keep in it (`models`: a model built and settled there, by their key), which lives
    as long as it does."""

    world: World
    mesh: DeviceMesh
    mode: FakeTensorMode
    models: dict[Hashable, Any] = field(default_factory=dict)


@dataclass
class _Session:
    world: FakeWorld | None = None


_session: list[_Session] = []  # the open session (`session`), if any


@contextlib.contextmanager
def session() -> Iterator[None]:
    """Keep the last fake world `fake_world` opened until the end of the block (and what was
    kept in it), for the next sharded step of the same size: a command's predictions share
    it, the models built in it too (building and settling a sharded model costs as much as
    the traced step). Closed on exit, or when a step of another size needs its own; nested
    blocks are one session."""
    if _session:
        yield
        return
    _session.append(_Session())
    try:
        yield
    finally:
        kept = _session.pop().world
        if kept is not None:
            _close(kept)


@contextlib.contextmanager
def fake_world(world: World) -> Iterator[FakeWorld]:
    """Rank 0 of a fake process group of `world`'s ranks in this process,
    under its `FakeTensorMode` (a device mesh's concatenation outside it, DTensor's sharding
    propagation cached in it: `shims.dtensor`): a new one, closed on exit, or inside a
    `session` the one it keeps. The cyclic garbage collector waits meanwhile, so that its
    timing cannot reorder the frees of two traces that a `cebench.engine.series` aligns (no
    peak was seen to change).
    `RuntimeError` inside a process group: a measured rank predicts nothing."""
    current = _session[-1] if _session else None
    if current is None:
        opened = _open(world)
    else:
        if current.world is not None and current.world.world != world:
            _close(current.world)
            current.world = None
        opened = current.world = current.world or _open(world)
    try:
        with without_gc(), dtensor.real_mesh_concatenation(), dtensor.cached_propagation(), \
                opened.mode:
            yield opened
    finally:
        if current is None:
            _close(opened)


def _open(world: World) -> FakeWorld:
    """A new fake world of `world`'s ranks (`fake_world`; one beyond `NOTICE_RANKS` ranks is
    announced by the command that asks for it, `cebench.commands.predict.warn_worlds`)."""
    import torch.distributed as dist

    if dist.is_initialized():
        raise RuntimeError("a sharded step is predicted in a process outside any process group")
    with excepthook_kept():  # an in-process store: torch 2.8's fake backend still rendezvouses (env://) without one
        dist.init_process_group("fake", store=dist.HashStore(), rank=0, world_size=world.size)
    try:
        mesh = tensor_parallel.world_mesh("cpu", world)  # before fake mode (its setup reads real tensors)
    except BaseException:
        dist.destroy_process_group()
        raise
    return FakeWorld(world, mesh, FakeTensorMode(allow_non_fake_inputs=True))


def _close(world: FakeWorld) -> None:
    """Destroy `world`'s process group (what was kept in it goes with it)."""
    import torch.distributed as dist

    dist.destroy_process_group()
