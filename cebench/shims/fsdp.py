"""FSDP2 as a trace and a measurement follow it: the private functions with which it resizes
its unsharded parameters' storage and runs its collectives (`cebench.engine.fake_world.follow`
scopes and reports them), and the `torch.distributed` collectives its step calls, made
asynchronous and settled in a measured memory pass (`cebench.run.ranks`)."""
from __future__ import annotations

from cebench.core.patched import Replaced
from cebench.core.version import checked_releases

# torch 2.8's FSDP2 keeps other storage helpers and calls other collectives (all_gather_into_tensor,
# reduce_scatter_tensor), and its c10d ops have no meta kernels: a sharded step is refused there.
SINCE = (2, 9)
CHECKED = {"torch": checked_releases(SINCE)}
SCOPES = {"foreach_all_gather": "all-gather", "foreach_all_gather_copy_out": "copy-out",
          "foreach_reduce": "reduce-scatter"}  # FSDP2's collectives, by what the trace calls them
# The torch.distributed functions a measured step calls: FSDP2's, and the vocab-parallel loss's all-reduce (--tp).
COLLECTIVES = ("all_gather_single", "reduce_scatter_single", "all_reduce")

PARAM = Replaced("torch.distributed.fsdp._fully_shard._fsdp_param", ("alloc_storage", "free_storage"),
                 "each resize of an unsharded parameter's storage, reported to the tracker", since=SINCE)
PARAM_GROUP = Replaced("torch.distributed.fsdp._fully_shard._fsdp_param_group", ("alloc_storage", *SCOPES),
                       "the collectives (and the resizes) as the parameter group imported them, scoped", since=SINCE)
DISTRIBUTED = Replaced("torch.distributed", COLLECTIVES, "each collective run asynchronously, waited for and "
                       "settled (a measured rank's memory pass)", since=SINCE)
