"""The device backend: one object per kind of device, owning everything that differs
between them (how a step is timed, how its peak memory is read, the allocator's rounding,
the sweep defaults). The rest of the package asks it and never compares device names.

A named target with its own figures (a GPU model, for predictions: `cebench.core.targets`)
is one more instance, `dataclasses.replace(get('cuda'), name=..., family='cuda', ...)`;
another vendor is one more `Device` subclass and its instance in `_KNOWN`. Nothing here imports torch until a
method runs (`cebench --help` must not import it).
"""
from __future__ import annotations

import gc
import os
import platform
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cebench.core import shard
from cebench.core import targets as targets_mod
from cebench.core.errors import UsageError
from cebench.core.memory import MemoryReading, allocation_events, round_up, running_peak, storage_bytes
from cebench.core.named import ByName
from cebench.core.patched import Read

if TYPE_CHECKING:
    import torch


RANKS_PER_CORE = 4  # ranks of a CPU sweep a core at most (`CPU.ranks_reason`)
CPP_BUILDER = Read("torch._inductor.cpp_builder", ("get_cpp_compiler",),
                   "the C++ compiler inductor builds a CPU step's kernels with (`CPU.compile_unsupported_reason`)")


def host_cores() -> int:
    """The CPU cores this process may run on: its affinity where the system says it (a
    container's or taskset's share), else every core of the machine."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def out_of_memory(exc: BaseException) -> bool:
    """True for out-of-memory: torch's `OutOfMemoryError`, or the CPU allocator's failure to
    allocate."""
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc))


def is_meta(device: torch.device) -> bool:
    """Whether torch `device` is `meta`: tensors with shapes and dtypes, no storage."""
    return device.type == "meta"


def on_host(device: torch.device) -> bool:
    """Whether torch `device` is the host's CPU."""
    return device.type == "cpu"


def capability_of(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of the GPU torch `device` is (None: the host's CPU); `meta`,
    which stands for no device of its own, has `targets.DEFAULT_GPU`'s."""
    if on_host(device):
        return None
    if is_meta(device):
        return targets_mod.DEFAULT_GPU.capability
    import torch

    return torch.cuda.get_device_capability(device)


_FROZEN = [0]  # how many `frozen_heap` blocks are open in this process
_FOR_GOOD = [False]  # whether this process froze its heap for good (`freeze_for_good`)


def freeze_for_good() -> None:
    """Collect garbage once, then leave every object alive now out of every later collection
    for the rest of this process (`gc.freeze`): for a process whose imports are done and live
    as long as it does (the forkserver the points' processes are forked from, a test suite).
    `frozen_heap` blocks then never thaw, and need not count what is frozen (a walk of every
    frozen object, 0.1 s with torch imported)."""
    gc.collect()
    gc.freeze()
    _FOR_GOOD[0] = True


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect garbage once, then leave every object alive now out of later collections
    until the block ends (`gc.freeze`): `Device.free_cache` between steps then walks only what
    was made since, not the whole heap of a large process (0.1-0.2 s a collection with torch,
    inductor and transformers imported; 2 to 4 per point). An object alive on entry that
    becomes garbage in a reference cycle waits for a collection after the block. Nested
    blocks are the outer one; a process that froze objects itself keeps them frozen, this
    block's too (a sweep's generator holds its block open while it is suspended)."""
    outer = not _FROZEN[0]
    thaw = outer and not _FOR_GOOD[0] and gc.get_freeze_count() == 0
    if outer:
        gc.collect()
        gc.freeze()
    _FROZEN[0] += 1
    try:
        yield
    finally:
        _FROZEN[0] -= 1
        if thaw:
            gc.unfreeze()


@dataclass(frozen=True, eq=False, repr=False)
class Device(ByName, ABC):
    """One kind of device. `name`: its torch device type and the CSV's `device` column.
    `repeats`, `warmup`: a sweep's default timed and untimed steps per point.
    `isolate_by_default`: a sweep measures each point in a fresh process unless told.
    `nominal_flops`: the matmul rate (FLOP/s) that balances shards, the same on every machine.
    `granularity`: the allocator's rounding of every storage (bytes).
    `mem_method`, `events_method`: the `mem_method` of a measured row, and of an
    allocator-events timeline (`explain`).
    `host_tensors_count`: tensors on the host (the RNG states checkpointing saves, an
    optimizer's step counts) are in this device's memory (`holds`).
    `norm_stats_in_input_dtype`: its `native_layer_norm` returns the mean and 1/std it saves
    for backward in the input's dtype (a CPU's, in bf16 and fp16), where meta's and CUDA's
    return fp32 (`cebench.engine.kernel_dtypes`).
    A named GPU target (`cebench.core.targets`) also has `family` (the kind of device it is,
    'cuda'), `workspace_bytes` (one cuBLAS workspace), `capacity_bytes` (total memory) and
    `bf16_flops` (dense BF16 matmul rate, FLOP/s); a device kind has 0 and None there.
    `card`: the GPU a prediction for it is made for (`targets.Target`: compute capability, SM
    count; a named target's own, `targets.DEFAULT_GPU` for the kind 'cuda'; None on the host).
    `uncounted`: what a peak measured or predicted here leaves out of the device's memory
    (README: "How each number is measured"), which a budget keeps room for."""

    name: str
    repeats: int
    warmup: int
    isolate_by_default: bool
    nominal_flops: float
    granularity: int
    mem_method: str
    events_method: str
    host_tensors_count: bool
    norm_stats_in_input_dtype: bool = False
    family: str = ""
    workspace_bytes: int = 0
    capacity_bytes: int | None = None
    bf16_flops: float | None = None
    card: targets_mod.Target | None = None
    uncounted: str = ""

    @property
    def kind(self) -> str:
        """The kind of device ('cpu', 'cuda'): what runs a step, and whose defaults apply."""
        return self.family or self.name

    @property
    def is_target(self) -> bool:
        """A named GPU target (for predictions), not a kind of device."""
        return bool(self.family)

    @property
    def is_host(self) -> bool:
        """Whether a step here runs on the host's CPU (not an accelerator)."""
        return isinstance(self, CPU)

    @property
    def is_gpu(self) -> bool:
        """Whether a step here runs on a CUDA GPU (any, or a named target)."""
        return isinstance(self, CUDA)

    @property
    def named_card(self) -> targets_mod.Target | None:
        """Its `card` where it is a named GPU target (`is_target`), whose figures a time is
        predicted with; None for a kind of device."""
        return self.card if self.is_target else None

    @property
    def capability(self) -> tuple[int, int] | None:
        """The compute capability of its `card` (None on the host): which kernels a prediction
        for it runs (attention's: `cebench.models.attention.kernel_for`)."""
        return None if self.card is None else self.card.capability

    def block_bytes(self, nbytes: int) -> int:
        """Bytes the allocator charges for a request of `nbytes`: rounded up to `granularity`."""
        return round_up(nbytes, self.granularity)

    def holds(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor`, on this device or the host, is in this device's memory."""
        return self.host_tensors_count or not on_host(tensor.device)

    def unavailable_reason(self) -> str | None:
        """Why this device cannot be used here, or None when it can."""
        return None

    def available(self) -> bool:
        """Whether this machine has the device."""
        return self.unavailable_reason() is None

    def visible(self) -> int:
        """Devices of this kind visible here."""
        return 1

    def select(self, index: int) -> None:  # noqa: B027 - a no-op by default: one device, nothing to choose
        """Make device `index` (of `visible()`) this process's current one."""

    def local_index(self, environ: Mapping[str, str]) -> int | None:
        """The index on its node a launcher gave this process (None: any, or not chosen)."""
        return None

    def backend(self) -> str:
        """The torch.distributed backend through which the ranks of a sharded step here talk."""
        return "gloo"

    def ranks_reason(self, world: int) -> str | None:
        """Why `world` ranks of a sharded step cannot run here, each on device `rank`, or
        None when they can."""
        return None

    def ranks_note(self, world: int) -> str:
        """What a measured row of `world` ranks here should say of how they ran ('' nothing)."""
        return ""

    @abstractmethod
    def model_name(self) -> str:
        """The hardware's model name, for the CSV's `device_name`."""

    @abstractmethod
    def time_once(self, step: Callable[[], object]) -> float:
        """Wall time of one `step()`, synchronized, in milliseconds."""

    @abstractmethod
    def live_bytes(self, live: Iterable[torch.Tensor]) -> int:
        """Bytes allocated on the device now, with `live` all the tensors alive there."""

    @abstractmethod
    def peak(self, step: Callable[[], object], live: Iterable[torch.Tensor]) -> MemoryReading:
        """Bytes live before one `step()` (`live`: the step's inputs) and at its highest point."""

    def free_cache(self) -> None:
        """Collect garbage and return the allocator's cached blocks (call it outside
        `except` blocks, where the traceback still pins a failed step's tensors)."""
        gc.collect()

    def is_oom(self, exc: BaseException) -> bool:
        """`out_of_memory(exc)` (host memory runs out under a GPU step too)."""
        return out_of_memory(exc)

    def compile_unsupported_reason(self) -> str | None:
        """Why `torch.compile` cannot build code for this device here, or None."""
        return None

    @abstractmethod
    def rate_probe_size(self, dtype: str) -> int:
        """Side (elements) of the square matmul that probes this device's rate in `dtype`."""


@dataclass(frozen=True, eq=False, repr=False)
class CPU(Device):
    """The host: exact byte counts from the allocator's events, `perf_counter` timing."""

    def model_name(self) -> str:
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return platform.processor() or platform.machine()

    def time_once(self, step: Callable[[], object]) -> float:
        t0 = time.perf_counter()  # CPU ops are synchronous
        step()
        return (time.perf_counter() - t0) * 1e3

    def live_bytes(self, live: Iterable[torch.Tensor]) -> int:
        return storage_bytes(live)

    def peak(self, step: Callable[[], object], live: Iterable[torch.Tensor]) -> MemoryReading:
        """The running sum of the allocator's events (`torch.profiler`, which sees inside
        `torch.compile`d code too) on top of the storages of `live`."""
        self.free_cache()
        base = self.live_bytes(live)
        sizes = allocation_events(step)
        return MemoryReading(base, base + running_peak(sizes), self.mem_method, net_bytes=sum(sizes))

    def compile_unsupported_reason(self) -> str | None:
        compiler = CPP_BUILDER.get("get_cpp_compiler")()
        if shutil.which(compiler) is None:
            return f"torch.compile on CPU needs a C++ compiler ('{compiler}' not found)"
        return None

    def rate_probe_size(self, dtype: str) -> int:
        return 1024 if dtype == "fp32" else 256  # the half types are slow on CPU

    def ranks_reason(self, world: int) -> str | None:
        """At most `RANKS_PER_CORE` ranks a core of this process's (`host_cores`): each rank is
        a process of its own, with torch's memory; more share the cores (`ranks_note`)."""
        most = RANKS_PER_CORE * host_cores()
        if world > most:
            return (f"{world} ranks on {host_cores()} CPU cores: at most {most} here ({RANKS_PER_CORE} a core; each "
                    "rank is a process of its own)")
        return None

    def ranks_note(self, world: int) -> str:
        cores = host_cores()
        if world <= cores:
            return ""
        return (f"{world} ranks shared {cores} CPU cores: the time is not a rank's with a core of its own (the memory "
                "is its own)")


@dataclass(frozen=True, eq=False, repr=False)
class CUDA(Device):
    """An NVIDIA GPU: the caching allocator's statistics, CUDA-event timing."""

    def block_bytes(self, nbytes: int) -> int:
        """What `max_memory_allocated` counts for one request of `nbytes` on a fresh segment
        (`c10/cuda/CUDACachingAllocator.cpp`): rounded up to 512 B; a request of 10 MiB or
        more gets a segment rounded up to 2 MiB, which is split only when the remainder
        exceeds 1 MiB, so a remainder of at most 1 MiB is charged to the request too.
        (A request of 1 to 10 MiB gets a 20 MiB segment, always split.)"""
        size = super().block_bytes(nbytes)
        if size >= LARGE_ALLOC:
            segment = -(-size // ROUND_LARGE) * ROUND_LARGE
            if segment - size <= SMALL_SIZE:
                return segment
        return size

    def unavailable_reason(self) -> str | None:
        import torch

        if torch.cuda.is_available():
            return None
        return f"no CUDA GPU is visible to this torch ({torch.__version__}); use cpu"

    def visible(self) -> int:
        import torch

        return torch.cuda.device_count()

    def select(self, index: int) -> None:
        import torch

        torch.cuda.set_device(index)

    def local_index(self, environ: Mapping[str, str]) -> int | None:
        """torchrun's LOCAL_RANK, else an `srun` task's SLURM_LOCALID."""
        return shard.local_index(environ)

    def backend(self) -> str:
        return "nccl"

    def ranks_reason(self, world: int) -> str | None:
        """One GPU per rank: `world` of them must be visible to this process."""
        count = self.visible()
        if count < world:
            return f"{world} ranks need {world} GPUs, one each; {count} visible here"
        return None

    def model_name(self) -> str:
        import torch

        return torch.cuda.get_device_name()

    def time_once(self, step: Callable[[], object]) -> float:
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def live_bytes(self, live: Iterable[torch.Tensor]) -> int:
        """Every tensor on the current GPU counts, `live` or not."""
        import torch

        torch.cuda.synchronize()
        return torch.cuda.memory_allocated()

    def peak(self, step: Callable[[], object], live: Iterable[torch.Tensor]) -> MemoryReading:
        """`max_memory_allocated` over the step (every tensor on the current GPU counts)."""
        import torch

        self.free_cache()
        base = self.live_bytes(live)
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return MemoryReading(base, torch.cuda.max_memory_allocated(), self.mem_method)

    def free_cache(self) -> None:
        import torch

        super().free_cache()
        torch.cuda.empty_cache()

    def compile_unsupported_reason(self) -> str | None:
        try:
            import triton  # noqa: F401
        except ImportError:
            return "torch.compile on CUDA needs triton, which is not installed"
        return None

    def rate_probe_size(self, dtype: str) -> int:
        return 4096


# CPU defaults: a default sweep finishes in minutes on 2 cores; CUDA: the 1B setting's.
_KNOWN: tuple[Device, ...] = (
    CPU(name="cpu", repeats=4, warmup=1, isolate_by_default=False, nominal_flops=1e11, granularity=1,
        mem_method="cpu-allocator-events", events_method="cpu-allocator-events", host_tensors_count=True,
        norm_stats_in_input_dtype=True,
        uncounted="the process's memory besides its tensors (the Python interpreter, torch's own libraries, their "
                  "threads' stacks), the C allocator's own overhead, other processes on the machine"),
    CUDA(name="cuda", repeats=20, warmup=3, isolate_by_default=True, nominal_flops=3e14,
         granularity=512,  # the caching allocator rounds every block up to 512 bytes
         mem_method="cuda-max-memory-allocated", events_method="cuda-allocator-events",
         host_tensors_count=False, card=targets_mod.DEFAULT_GPU,
         uncounted="the CUDA context and kernels (outside the caching allocator), NCCL's own buffers, the allocator's "
                   "fragmentation (reserved above allocated), other processes on the GPU"),
)
SMALL_SIZE, ROUND_LARGE, LARGE_ALLOC = 2**20, 2 * 2**20, 10 * 2**20  # the caching allocator's constants (bytes)
DEVICES: tuple[str, ...] = tuple(d.name for d in _KNOWN)  # the kinds of device a step runs on
KINDS: tuple[Device, ...] = _KNOWN  # each kind of device, as `DEVICES` names them
HOST: Device = _KNOWN[0]  # the host's CPU: where a user's variant is smoke-tested, a prediction's sample run
# One device per named GPU target: a CUDA device with the card's figures (predictions only).
_TARGETS: tuple[Device, ...] = tuple(
    replace(_KNOWN[1], name=t.name, family="cuda", workspace_bytes=t.workspace_bytes, capacity_bytes=t.capacity_bytes,
            bf16_flops=t.bf16_flops, card=t) for t in targets_mod.TARGETS)
_BY_NAME = {d.name: d for d in _KNOWN + _TARGETS}
TARGETS: tuple[str, ...] = DEVICES + targets_mod.NAMES  # what a prediction can be for
_AUTO = ("cuda", "cpu")  # what 'auto' tries, in order


def get(name: str, param: str | None = "device") -> Device:
    """The device or named GPU target called `name` (case and spaces ignored), whether or
    not it is here; an unknown name is a `UsageError` for `param`."""
    device = _BY_NAME.get(name.strip().lower())
    if device is None:
        raise UsageError(f"'{name}' is not one of {', '.join(TARGETS)} (cebench targets lists the GPUs)", param)
    return device


def target(name: str, *, auto: bool = False, here: bool = False, param: str | None = "device") -> Device:
    """What a command's --device or --target names, checked; every command resolves it here.
    `here`: a device to run on on this machine (`resolve`: 'auto' is cuda when a GPU is
    visible, else cpu). Otherwise any device or named GPU target, here or not (`get`), and
    'auto' too where `auto` (this machine's device). A bad name is a `UsageError` for `param`."""
    if here:
        return resolve(name, param)
    key = name.strip().lower()
    if auto and key == "auto":
        return resolve(key, param)
    if auto and key not in TARGETS:
        raise UsageError(f"'{key}' is not one of auto, {', '.join(TARGETS)} (cebench targets lists the GPUs)", param)
    return get(key, param)


def one_name(given: str | None, alias: str | None, option: str, other: str, default: str) -> str:
    """The value of `option` given as itself (`given`) or by its other name `other` (`alias`:
    --target for --device and the reverse), else `default`; both at once is a `UsageError`."""
    if given is not None and alias is not None:
        raise UsageError(f"another name for --{option}: give one of them", other)
    return given if given is not None else alias if alias is not None else default


def resolve(name: str, param: str | None = "device") -> Device:
    """The device to measure on here: 'auto' is CUDA when a GPU is visible, else the CPU;
    an unknown name, or a device this machine lacks, is a `UsageError` for `param`."""
    key = name.strip().lower()
    if key == "auto":
        return next(d for d in map(get, _AUTO) if d.available())
    if key in targets_mod.BY_NAME:
        raise UsageError(f"'{key}' is a GPU to predict for, not a device to run on: measure on this machine's "
                         f"{', '.join(('auto',) + DEVICES)}, or predict with cebench predict --target {key}", param)
    if key not in DEVICES:
        raise UsageError(f"'{name}' is not one of {', '.join(('auto',) + DEVICES)}", param)
    device = _BY_NAME[key]
    reason = device.unavailable_reason()
    if reason:
        raise UsageError(reason, param)
    return device
