"""One step on `meta` tensors: what it allocates (under the storage tracker) and how many
FLOPs it does, without allocating or computing anything.

`config.device` is the *target*: every storage is charged what its allocator charges
(`Device.block_bytes`: CUDA's caching allocator's 512-byte blocks and its block-split rule;
CPU: exact bytes), and a named GPU target's cuBLAS workspaces count in the base. With
`grads` keep, one step runs first (untracked) so that the measured one starts with its
gradients. Real sweeps count their rows' FLOPs here too.
"""
from __future__ import annotations

import contextlib
from typing import TypeVar

from torch.utils.flop_counter import FlopCounterMode

from cebench.core import devices
from cebench.core.config import Config
from cebench.losses import inputs as inputs_mod
from cebench.losses import variants
from cebench.losses.workloads import make_step
from cebench.measure.memory import MemoryReading, storage_bytes
from cebench.measure.tracker import StorageTracker, watch_rng_states
from cebench.store.schema import PREDICTED

Tracker = TypeVar("Tracker", bound=StorageTracker)


class OpaqueOp(Exception):
    """The step ran an op whose allocations a dispatch-mode tracker cannot see."""


def trace(config: Config, tracker_type: type[Tracker] = StorageTracker,
          counter: FlopCounterMode | None = None) -> tuple[Tracker, int]:
    """One step of `config` on `meta` inputs under a new `tracker_type` (and `counter`, which
    counts that step alone): the tracker after it, and the bytes of the storages the step
    starts with (inputs, and kept gradients) on the target device. Nothing is allocated or
    computed. The RNG states saved by checkpointing count too where they live in the
    target's memory (`Device.host_rng_states_count`: on CPU, not on CUDA). `OpaqueOp`
    when the step ran a custom op."""
    target = devices.get(config.device)
    x = inputs_mod.make(config, device="meta")
    fn = variants.get(config.variant).load()
    if config.grads == "keep":  # the previous step, which leaves its gradients behind
        warm = make_step(fn, x, config)
        warm.prepare()
        warm.run()
    before = x.tensors()
    tracker = tracker_type(ignore=before, granularity=target.block_bytes)
    step = make_step(tracker.wrap(fn), x, config)
    step.prepare()
    rng = watch_rng_states(tracker.rng_state) if target.host_rng_states_count else contextlib.nullcontext()
    with tracker, rng, counter if counter is not None else contextlib.nullcontext():
        step.run()
    if tracker.opaque:
        raise OpaqueOp(f"{', '.join(sorted(tracker.opaque))} is a custom op: on meta tensors it allocates only "
                       "its outputs, not its internal buffers, so its peak cannot be predicted; measure it with "
                       "cebench sweep")
    return tracker, storage_bytes(before, target.block_bytes)


def predict_peak(config: Config, counter: FlopCounterMode | None = None) -> MemoryReading:
    """Predicted base and peak bytes of one step of `config` on its target device, from a
    run on `meta` tensors (`trace`, counting its FLOPs on `counter`). The base is what a
    sweep's measured step starts with: the inputs' storages (and kept gradients), and on a
    named GPU one cuBLAS workspace per thread that ran a matmul (the forward's, the autograd
    engine's), which the sweep's warm-up creates; the peak adds what the step holds at its
    highest point."""
    tracker, base = trace(config, counter=counter)
    base += devices.get(config.device).workspace_bytes * len(tracker.blas)
    return MemoryReading(base, base + tracker.peak, PREDICTED)


INT64_MAX = 2**63 - 1


def counted(counter: FlopCounterMode) -> int | None:
    """The FLOPs `counter` counted, or None when a row cannot carry them: none at all (the
    counter saw no matmul, so it could not see the step's) or more than int64 holds."""
    total = counter.get_total_flops()
    return total if 0 < total <= INT64_MAX else None


def count_flops(config: Config) -> int | None:
    """FLOPs of one step of `config` (matmuls: 2 per multiply-add) as `FlopCounterMode`
    counts them on `meta` inputs (`trace`: nothing allocated or computed); a compiled
    variant is counted on its eager twin. None when the count cannot be trusted or kept:
    the step runs a custom op (which hides its matmuls from the counter), fails on `meta`
    (a Triton kernel, say), or `counted` says so."""
    counter = FlopCounterMode(display=False)
    try:
        trace(config, counter=counter)
    except Exception:  # whatever a variant does on meta tensors, the row is not failed for it
        return None
    return counted(counter)
