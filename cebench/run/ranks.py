"""The ranks of a sharded point (`fsdp` > 1): `world` processes that the sweep's own process
starts for the point and ends after it, joined in a process group of their own, each
measuring its part of the step (`launch`), and how a rank reads its peak (`peak`).

- Each rank is a fresh process from `isolate`'s forkserver (torch preloaded), set up as the
  sweep's `Child` with the sweep's intra-op threads divided among the ranks (`share`) and
  device index `rank`: on CUDA, GPU `rank` of those the sweep's process sees, one GPU per
  rank, talking through NCCL; on the CPU, processes on the host talking through gloo. Its
  RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE are its own in the point's world,
  whatever a launcher set for the sweep.
- They meet through a `FileStore` in a temporary folder (`init_method="file://…"`): no port.
  It is removed when the point ends, Ctrl-C or SIGTERM included; its name holds the sweep's
  process id (`FOLDER`), so that a later point removes those of sweeps that are gone (SIGKILL).
- The point ends when every rank has answered, or when the first fails (raises, dies) or the
  time runs out, and then every rank process is killed; Ctrl-C or SIGTERM of the sweep ends
  them too, and a sweep's process that dies without ending them (SIGKILL) takes them with it
  (`isolate`: a rank dies with the forkserver, which exits when the sweep's process is gone).

A sweep split into shards (`--shard`, torchrun's or SLURM's ranks) stays split by points: each
shard process runs its own points and starts the `world` ranks of each sharded one itself.
On CUDA that takes `world` free GPUs per shard process: give each shard process its own
(CUDA_VISIBLE_DEVICES, `srun --gpu-bind`); shard processes that see the same GPUs run their
ranks on the same GPUs 0 to `world` − 1, where memory is still each process's own but time is
shared. The sweep's own process is never a rank: an initialized process group there is refused
(`cebench.commands.sweep`).
"""
from __future__ import annotations

import contextlib
import functools
import math
import multiprocessing.connection
import multiprocessing.process
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cebench.core import devices
from cebench.core.errors import describe
from cebench.core.memory import MemoryReading
from cebench.models import tensor_parallel
from cebench.run import isolate
from cebench.run.isolate import Child, Outcome
from cebench.shims import dtensor
from cebench.shims.fsdp import COLLECTIVES, DISTRIBUTED
from cebench.store.schema import Status

if TYPE_CHECKING:
    import torch

    from cebench.core.world import World

SETTLE_S = 0.01  # how long a gloo rank's memory pass keeps a collective's work after it is done (s)
ATTEMPTS = 6  # profiled steps a gloo rank's memory pass takes at most
FOLDER = "cebench-ranks-"  # the ranks' temporary folder: FOLDER<the sweep's pid>-<random>

Started = list[tuple[multiprocessing.process.BaseProcess, multiprocessing.connection.Connection]]


def share(threads: int | None, world: int) -> int:
    """A rank's intra-op threads: the sweep's (`threads`; None: torch's count in this process)
    divided among `world` ranks, rounded down, at least 1."""
    if threads is None:
        import torch

        threads = torch.get_num_threads()
    return max(1, threads // world)


def launch(fn: Callable[..., Any], args: tuple[Any, ...], world: World, child: Child,
           timeout_s: float | None) -> Outcome:
    """`fn(mesh, *args)` in each of `world`'s ranks (see the module), `mesh` their device mesh
    (`tensor_parallel.world_mesh`), each set up as `child` but for its device index (its rank),
    waiting at most
    `timeout_s` seconds (None, or above `guard.NO_LIMIT_S`: no limit) for them all. An ok
    `Outcome`'s value is the list of the ranks' values, by rank; else it is the first rank's
    failure ('rank R: …'), or the timeout. Every rank process has ended when it returns.
    `fn`, `args` and the values must pickle."""
    timeout_s = isolate.wait_s(timeout_s)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    started: Started = []
    _remove_stale()
    with tempfile.TemporaryDirectory(prefix=f"{FOLDER}{os.getpid()}-") as folder:
        store = "file://" + os.path.join(folder, "store")
        try:
            for rank in range(world.size):
                joined = functools.partial(_joined, store, rank, world, child.device, fn)
                started.append(isolate.start(joined, args, replace(child, device_index=rank),
                                             _environ(rank, world.size)))
            outcome = _gather(started, deadline)
            if outcome.status == Status.TIMEOUT:
                outcome = replace(outcome, error=f"no result after {timeout_s:g} s (--point-timeout); its "
                                                 f"{world.size} rank processes were killed")
            return outcome
        finally:
            for proc, receive in started:
                receive.close()
                if proc.is_alive():
                    proc.kill()
                proc.join()


def _remove_stale() -> None:
    """Remove this user's rank folders (`FOLDER`<pid>-…) in the temporary directory whose
    sweep process is gone: killed (SIGKILL) before it could remove them."""
    with contextlib.suppress(OSError), os.scandir(tempfile.gettempdir()) as entries:
        for entry in entries:
            pid, _, rest = entry.name.removeprefix(FOLDER).partition("-")
            if (entry.name.startswith(FOLDER) and pid.isdigit() and rest and entry.is_dir(follow_symlinks=False)
                    and entry.stat(follow_symlinks=False).st_uid == os.getuid() and not _alive(int(pid))):
                shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        pass
    return True


def _environ(rank: int, world: int) -> dict[str, str]:
    """This process's environment, with the launcher's variables of rank `rank` of `world`
    (what torch's device mesh and a user's code read)."""
    return {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world)}


@dataclass(frozen=True)
class _Failed:
    """What a rank sends instead of a value when it raised: when (`time.monotonic()`, which
    every process on the machine reads alike), its `status` ('oom', 'error') and `error`."""

    at: float
    status: str
    error: str


def _joined(store: str, rank: int, world: World, kind: devices.Device, fn: Callable[..., Any], *args: Any) -> Any:
    """In rank `rank`: join the process group of `world`'s ranks at `store` through `device`'s
    backend, and return `fn(mesh, *args)` (`mesh`: `world`'s, `tensor_parallel.world_mesh`), or
    `_Failed` when anything raises."""
    import torch.distributed as dist

    try:
        dist.init_process_group(kind.backend(), init_method=store, rank=rank, world_size=world.size)
        value = fn(tensor_parallel.world_mesh(kind.kind, world), *args)
    except BaseException as exc:  # noqa: BLE001 - the point's row says what happened
        # The group is left as it is: this rank's exit, after it has answered, ends it, so that what its end
        # makes the others raise comes later.
        return _Failed(time.monotonic(), Status.OOM if kind.is_oom(exc) else Status.ERROR, describe(exc))
    dist.destroy_process_group()
    return value


def _gather(started: Started, deadline: float | None) -> Outcome:
    """The ranks' answers (`launch`). The first answers to hold a failure end the wait, and
    the first failure among them is the point's: a rank that died (it could not say when),
    else the one that raised first."""
    values: dict[int, Any] = {}
    pending = {rank: receive for rank, (_, receive) in enumerate(started)}
    while pending:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        ready = multiprocessing.connection.wait(list(pending.values()), left)
        if not ready:
            return Outcome(Status.TIMEOUT)
        failed: list[tuple[float, int, Outcome]] = []  # (when, rank, what): a death first
        for rank in [r for r, receive in pending.items() if receive in ready]:
            try:
                outcome: Outcome = pending.pop(rank).recv()
            except EOFError:
                proc = started[rank][0]
                proc.join()
                failed.append((-math.inf, rank, Outcome(Status.ERROR, error=isolate.death(
                    proc.exitcode, f"rank {rank}'s process"))))
                continue
            value = outcome.value
            if isinstance(value, _Failed):
                failed.append((value.at, rank, Outcome(value.status, error=f"rank {rank}: {value.error}")))
            elif outcome.status != Status.OK:  # its setup failed, before it could join (as every rank's does)
                failed.append((math.inf, rank, replace(outcome, error=f"rank {rank}: {outcome.error}")))
            else:
                values[rank] = value
        if failed:
            return min(failed, key=lambda f: f[:2])[2]
    for proc, _ in started:  # each has answered: it is leaving
        proc.join(isolate.JOIN_S)
    return Outcome(Status.OK, [values[rank] for rank in range(len(started))])


def peak(device: devices.Device, step: Callable[[], object], live: Sequence[torch.Tensor]) -> MemoryReading:
    """This rank's `device.peak` of one `step()` of a sharded model, `live` its tensors
    before the step.

    Over gloo, a collective's work (and what it holds: gloo's clone of a reduce-scatter's
    input, say) is let go of by a worker thread of the process group too, after the
    collective has returned. Should that thread drop the last reference, the free happens
    where the profiler records no allocator events: the running sum stays high for the rest
    of the step, and the step's events no longer net to 0 (`MemoryReading.net_bytes`).
    Hence, in this memory pass only (`_settled`): each collective FSDP2 or a loss calls (`COLLECTIVES`)
    keeps its work on the calling thread for `SETTLE_S` after it is done, by which time the
    worker has let go, so that the calling thread frees what it held; and the step is
    profiled again, up to `ATTEMPTS` times, until every rank has had a step whose events net
    to 0, every rank taking as many steps as the others (their collectives stay in step).
    The reading is this rank's lowest clean one (a lost free can only raise a peak); without
    one, its lowest, an upper bound, which its `note` says. A probe without events (a GPU's
    allocator statistics, which see every free) reads once."""
    import torch
    import torch.distributed as dist

    readings: list[MemoryReading] = []
    with _settled() if dist.get_backend() == dist.Backend.GLOO else contextlib.nullcontext():
        for _ in range(ATTEMPTS):
            reading = device.peak(step, live)
            if reading.net_bytes is None:  # the same probe on every rank: none of them steps again
                return reading
            readings.append(reading)
            lacking = torch.tensor([int(all(r.net_bytes != 0 for r in readings))])
            dist.all_reduce(lacking)  # how many ranks still lack a clean reading
            if not lacking.item():
                break
    clean = [r for r in readings if r.net_bytes == 0]
    if clean:
        return min(clean, key=lambda r: r.peak_bytes)
    lowest = min(readings, key=lambda r: r.peak_bytes)
    return replace(lowest, note=f"no step of {len(readings)} had every free recorded (a gloo worker's): peak "
                                "memory is an upper bound")


@contextlib.contextmanager
def _settled() -> Iterator[None]:
    """Within: each of the collectives FSDP2 and a loss call (`COLLECTIVES`, synchronously)
    runs asynchronously, is waited for, and its work is dropped `SETTLE_S` after it is done;
    each of DTensor's functional collectives (--tp) is waited for `SETTLE_S` after it is done
    and its work dropped `SETTLE_S` later (`dtensor.settled_waits`)."""
    import torch.distributed as dist

    def settled(collective: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(collective)
        def call(*args: Any, async_op: bool = False, **kwargs: Any) -> Any:
            work = collective(*args, async_op=True, **kwargs)
            if async_op:
                return work
            work.wait()
            time.sleep(SETTLE_S)  # the worker thread lets go of the work: what it holds is freed here, on return
            return None

        return call

    with DISTRIBUTED({name: settled(getattr(dist, name)) for name in COLLECTIVES}), dtensor.settled_waits(SETTLE_S):
        yield


__all__ = ["launch", "peak", "share"]
