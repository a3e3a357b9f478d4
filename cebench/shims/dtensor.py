"""DTensor and its functional collectives as a tensor-parallel step (`--tp`) is traced and
measured: the functional collectives' wait (settled in a measured gloo rank's memory pass,
`cebench.run.ranks`), the sharding propagation whose global-shape fake tensors are not this
rank's (`cebench.engine.fake_world.follow`), and a device mesh's concatenation, which
FSDP2 over a TP mesh computes from real tensors (under fake mode it cannot)."""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from cebench.core.patched import Replaced, resolve
from cebench.core.version import checked_releases

SINCE = (2, 9)  # as FSDP2's own shims: a split step is predicted where a sharded one is
CHECKED = {"torch": checked_releases(SINCE)}

FUNCTIONAL = Replaced("torch.distributed._functional_collectives", ("wait_tensor",),
                      "each functional collective's wait settled (a measured gloo rank's memory pass)", since=SINCE)
PROPAGATION = Replaced("torch.distributed.tensor._sharding_prop.ShardingPropagator",
                       ("_propagate_tensor_meta_non_cached",),
                       "DTensor's sharding propagation, during which a trace counts nothing: its fake tensors have "
                       "an op's global shapes, not what this rank allocates", since=SINCE)
CACHE = Replaced("torch.distributed.tensor._sharding_prop", ("_are_we_tracing",),
                 "DTensor's sharding propagation cached under fake mode too, as outside it (it skips its cache "
                 "under any fake mode, taking it for a compiler's trace)", since=SINCE)
DISPATCH_CACHE = Replaced("torch.distributed.tensor._dispatch", ("_are_we_tracing",),
                          "the same, where DTensor's dispatch chooses the cached propagation", since=SINCE)
MESH = Replaced("torch.distributed.device_mesh.DeviceMesh", ("_concatenate",),
                "a mesh's concatenation (FSDP2 over a TP mesh) outside fake mode: it computes coordinates from "
                "real tensors", since=SINCE)


@contextlib.contextmanager
def settled_waits(settle_s: float) -> Iterator[None]:
    """Within: each functional collective's wait sleeps `settle_s` before and after, so that
    gloo's worker thread has let go of the collective's work and what it holds is freed on
    the calling (profiled) thread."""
    import time

    wait = resolve(FUNCTIONAL.owner).wait_tensor

    @functools.wraps(wait)
    def settled(tensor: Any) -> Any:
        time.sleep(settle_s)
        out = wait(tensor)
        time.sleep(settle_s)
        return out

    with FUNCTIONAL({"wait_tensor": settled}):
        yield


@contextlib.contextmanager
def propagating(enter: Callable[[], None], leave: Callable[[], None]) -> Iterator[None]:
    """Within: DTensor's uncached sharding propagation calls `enter()` before and `leave()`
    after it runs."""
    owner = resolve(PROPAGATION.owner)
    original = owner._propagate_tensor_meta_non_cached

    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        enter()
        try:
            return original(self, *args, **kwargs)
        finally:
            leave()

    with PROPAGATION({"_propagate_tensor_meta_non_cached": run}):
        yield


@contextlib.contextmanager
def cached_propagation() -> Iterator[None]:
    """Within: DTensor's sharding propagation keeps its cache under fake mode (what an op's
    sharding and output shapes are depends on its inputs' shapes, dtypes and placements only,
    the cache's key), unless Dynamo is compiling."""
    from torch._dynamo import is_compiling

    with CACHE({"_are_we_tracing": is_compiling}), DISPATCH_CACHE({"_are_we_tracing": is_compiling}):
        yield


@contextlib.contextmanager
def real_mesh_concatenation() -> Iterator[None]:
    """Within: a device mesh's concatenation runs outside fake mode."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    owner = resolve(MESH.owner)
    concatenate = owner._concatenate

    @functools.wraps(concatenate)
    def real(*args: Any, **kwargs: Any) -> Any:
        with unset_fake_temporarily():
            return concatenate(*args, **kwargs)

    with MESH({"_concatenate": staticmethod(real) if isinstance(vars(owner)["_concatenate"], staticmethod)
               else real}):
        yield
