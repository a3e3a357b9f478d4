"""Runs one `Config` and returns its `Result`: warm-up, memory pass, timing pass.

Failure is data: out-of-memory → status 'oom', any other exception or a loss that is not
finite → 'error', a variant that cannot run here or lacks a loss semantics the point asks
for → 'unsupported'; every non-ok row says why in `error`. What the implementation warned
while it ran (a fallback, say) goes in `note`.

A point whose model is sharded (`World.sharded`) is measured by its `Config.world`'s ranks,
processes of its own (`sharded`, `cebench.run.ranks`): it is isolated whether or not the sweep
isolates points. Whether a point can run at all is `cebench.engine.support`'s answer.
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cebench.core import devices
from cebench.core.config import Compile, Config, Settings
from cebench.core.devices import Device
from cebench.core.errors import UsageError, describe, joined, said
from cebench.core.memory import MemoryReading
from cebench.engine import support
from cebench.engine.trace import count_flops
from cebench.losses import inputs as inputs_mod
from cebench.losses import variants
from cebench.losses.variants import Variant
from cebench.losses.workloads import make_step
from cebench.measure import limits
from cebench.measure.timing import Timing, time_steps
from cebench.models import model as model_mod
from cebench.models import training
from cebench.run import isolate, ranks
from cebench.run.isolate import Child
from cebench.store.schema import Result, Status

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


class NotFinite(Exception):
    """The step's loss was NaN or infinite."""


@dataclass(frozen=True)
class _Measured:
    """One point's readings: its step's memory and time, the first (warm-up) step's time in
    ms, and what the implementation warned."""

    memory: MemoryReading
    timing: Timing
    first_ms: float
    said: str


def _measure(config: Config, settings: Settings, mesh: DeviceMesh | None = None) -> _Measured:
    """`config`'s step: warm-up, memory pass, timing pass; a model sharded over `mesh` when
    given (in one of its ranks: `_rank`)."""
    fn = variants.of(config).build()
    if config.has_model:
        state = training.make(config, mesh=mesh)
        step, live = training.make_step(fn, state, config), state.tensors
    else:
        inputs = inputs_mod.make(config)
        step, live = make_step(fn, inputs, config), inputs.tensors
    device = config.device
    first_ms, problems = 0.0, []
    with warnings.catch_warnings(record=True) as caught:  # the warm-up's warnings: what the row says it did
        warnings.simplefilter("always")
        for i in range(settings.warmup):
            step.prepare()
            if i == 0:
                first_ms = device.time_once(lambda: problems.append(step.check()))
            else:
                device.time_once(step.run)
    if problems and problems[0]:
        raise NotFinite(problems[0])
    step.prepare()
    probe = device.peak if mesh is None else functools.partial(ranks.peak, device)
    memory = probe(step.run, live())  # kept gradients, a model's optimizer state too
    timing = time_steps(step.run, step.prepare, device, settings.repeats)
    if config.has_model:
        memory = replace(memory, state_bytes=state.state_bytes(device.block_bytes, device.holds))
    return _Measured(memory, timing, first_ms, said(caught))


# A body step's peak and median ms (None: it failed), by its point (its model the resolved one), settings and threads.
_BODY: dict[tuple[object, ...], tuple[int, float] | None] = {}


def _body_key(config: Config, settings: Settings, threads: int | None) -> tuple[object, ...]:
    """The key in `_BODY` of `config`'s body step (`training.body_config`) at `threads` intra-op threads."""
    return training.body_config(config), settings, threads


def _model_columns(result: Result, config: Config, settings: Settings) -> None:
    """A model row's n_params, step_peak_bytes, and body_peak_bytes and body_time_ms from
    its body step (`training.body_config`), measured once per process (a sharded one by
    the point's ranks, `sharded`)."""
    result.n_params = model_mod.of(config).n_params
    result.step_peak_bytes = result.peak_bytes
    body = training.body_config(config)
    key = _body_key(config, settings, result.threads)
    if key not in _BODY:
        try:
            measured = _measure(body, settings)
            _BODY[key] = measured.memory.peak_bytes, measured.timing.median_ms
        except Exception:  # the loss's row stands; its body columns stay empty
            _BODY[key] = None
        config.device.free_cache()
    measured_body = _BODY[key]
    if measured_body is not None:
        result.body_peak_bytes, result.body_time_ms = measured_body


def _fill(result: Result, config: Config, outcome: _Measured) -> None:
    """An ok row's measured columns from `outcome`, and its `flops` (and `tflops_per_s`),
    counted in this process."""
    memory, timing, first_ms = outcome.memory, outcome.timing, outcome.first_ms
    variant = variants.own(config)
    result.add_note(variant.interpreter_note(config.device.kind), outcome.said, memory.note)
    result.peak_bytes, result.base_bytes = memory.peak_bytes, memory.base_bytes
    result.peak_delta_bytes, result.mem_method = memory.peak_delta_bytes, memory.method
    result.time_ms_median, result.time_ms_p25 = timing.median_ms, timing.p25_ms
    result.time_ms_p75, result.time_ms_min = timing.p75_ms, timing.min_ms
    result.repeats, result.time_ms_samples = timing.repeats, timing.samples_ms
    result.tokens_per_s = config.tokens / config.world.gpus_per_step / (timing.median_ms / 1e3)
    if variant.compiles or config.compile == Compile.BLOCKS:
        result.compile_s = max(first_ms - timing.median_ms, 0.0) / 1e3
    result.flops = count_flops(config)  # a sharded point's too: through a fake process group, here
    if result.flops is not None:
        result.tflops_per_s = result.flops / (timing.median_ms / 1e3) / 1e12
    if config.has_model:
        result.model_state_bytes = memory.state_bytes


@devices.frozen_heap()  # a fresh block per call
def run(config: Config, settings: Settings, *, calibrate: bool = True, floor_ms: float | None = None,
        child: Child | None = None, timeout_s: float | None = None) -> Result:
    """Measure `config`; never raises for a failure of the step itself. An ok row also gets
    its `flops` (and `tflops_per_s`) and `matmul_floor_ms`: with `calibrate`,
    `limits.matmul_floor_ms`, calibrated once per shape in this process after the row's own
    measurement, outside its memory probe; else `floor_ms` as given (calibrated elsewhere,
    None where that failed). A sharded point (`World.sharded`) is measured by its ranks
    (`sharded`), set up as `child` (default: this process's threads and the point's device;
    a user's variant needs its spec there), waiting at most `timeout_s` seconds (None: for ever)."""
    device = config.device
    if config.world.sharded:
        return sharded(config, settings, child or Child(device=config.device), timeout_s, device.model_name())
    result = Result.blank(config, device.model_name())
    reason = support.reason(config)
    if reason:
        result.status, result.error = Status.UNSUPPORTED, reason
        return result
    outcome: _Measured | None = None
    try:
        outcome = _measure(config, settings)
    except Exception as exc:  # failure is data: classify, record, and move on
        refused = support.torch_refused(exc)
        result.status = Status.OOM if device.is_oom(exc) else Status.UNSUPPORTED if refused else Status.ERROR
        result.error = refused or describe(exc)
    device.free_cache()
    if outcome is None:
        return result
    _fill(result, config, outcome)
    if config.has_model:
        _model_columns(result, config, settings)
        return result  # the matmul floor is the loss's alone, not the step's
    result.matmul_floor_ms = limits.matmul_floor_ms(config, settings) if calibrate else floor_ms
    return result


@dataclass(frozen=True)
class _Rank:
    """What one rank of a sharded point measured: its `step`, its `body` step (None: not
    asked for, or it failed) and its device's name."""

    step: _Measured
    body: _Measured | None
    device_name: str


def _rank(mesh: DeviceMesh, config: Config, settings: Settings, body: bool) -> _Rank:
    """One rank's part of a sharded point (`ranks.launch` calls it): its step sharded over
    `mesh`, then, with `body`, its body step's (a failure of which leaves it None, as
    unsharded; the ranks fail alike, for they run the same step)."""
    device = config.device
    measured = _measure(config, settings, mesh)
    device.free_cache()
    body_measured = None
    if body:
        try:
            body_measured = _measure(training.body_config(config), settings, mesh)
        except Exception:  # the loss's row stands; its body columns stay empty
            pass
    return _Rank(measured, body_measured, device.model_name())


def sharded(config: Config, settings: Settings, child: Child, timeout_s: float | None, device_name: str) -> Result:
    """Measure `config`, whose model is sharded over `config.world`'s ranks, in that many
    processes of its own (`ranks.launch`), each set up as `child` with its share of the
    threads (`ranks.share`: the row's `threads`), waiting at most `timeout_s` seconds (None:
    for ever); never raises for a failure of the step. The first rank that fails makes the
    row's status and error (oom, error, timeout); a point whose ranks cannot all run here is
    `unsupported`. The memory columns and `model_state_bytes` are those of the rank with the
    highest peak (rank 0, which holds the most padding rows, unless another's is higher;
    `note` gives each rank's peak where they differ), time and warnings rank 0's; the body
    step is sharded too (its peak the highest rank's, its time rank 0's); `flops` is counted
    here. `device_name`: the row's where no rank said it."""
    threads = ranks.share(child.threads, config.world.size)

    def failed(status: str, error: str) -> Result:
        result = Result.blank(config, device_name)
        result.threads, result.status, result.error = threads, status, error
        return result

    reason = support.reason(config)  # its ranks too: one GPU each, or a few CPU cores' share (`Device.ranks_reason`)
    if reason:
        return failed(Status.UNSUPPORTED, reason)
    key = _body_key(config, settings, threads)
    outcome = ranks.launch(_rank, (config, settings, key not in _BODY), config.world, replace(child, threads=threads),
                           timeout_s)
    if outcome.status != Status.OK:
        return failed(outcome.status, outcome.error)
    done: list[_Rank] = outcome.value
    result = Result.blank(config, done[0].device_name)
    result.threads = threads
    top = max(done, key=lambda r: r.step.memory.peak_bytes)  # the first of the highest: the lowest rank
    peaks = [r.step.memory.peak_bytes for r in done]
    by_rank = "" if len(set(peaks)) == 1 else "peak by rank: " + ", ".join(f"{p:,} B" for p in peaks)
    shared = config.device.ranks_note(config.world.size)
    memory = replace(top.step.memory, note=joined(top.step.memory.note, by_rank, shared))
    _fill(result, config, replace(done[0].step, memory=memory))
    if key not in _BODY:
        bodies = [r.body for r in done if r.body is not None]
        _BODY[key] = (max(b.memory.peak_bytes for b in bodies), bodies[0].timing.median_ms) if len(bodies) == len(
            done) else None
    _model_columns(result, config, settings)
    return result


def smoke_test_isolated(chosen: tuple[Variant, ...], device: Device, child: Child,
                        timeout_s: float | None) -> dict[str, str]:
    """`variants.smoke_test` of each user variant among `chosen`, each in a fresh process
    (`isolate.call`): `UsageError` when one breaks the contract, as in-process; one that
    kills its process or outlives `timeout_s` is returned (name → how), for its points to
    fail in isolation as their rows say, rather than ending the sweep. Unguarded there: its
    `os._exit` or `SystemExit` ends (or fails) that process alone, a crash like any other,
    not a `UsageError` about cebench's own process."""
    crashed = {}
    unguarded = functools.partial(variants.smoke_test, guarded=False)
    for variant in variants.untrusted(chosen, device):
        outcome = isolate.call(unguarded, ((variant,), device), child, timeout_s)
        if outcome.usage:
            raise UsageError(outcome.error)
        if outcome.status != Status.OK:
            crashed[variant.name] = outcome.error
    return crashed


def isolated(child: Child, settings: Settings, timeout_s: float | None) -> Callable[[Config], Result]:
    """`run`, each point in a fresh process set up as `child` (`isolate.call`; a sharded
    point in its ranks, `sharded`), waiting at most `timeout_s` seconds: a point that kills
    its process or outlives the timeout becomes an `error` or `timeout` row. The matmul
    floor is calibrated once per shape, in a process of its own, and handed to the points.
    Nothing here touches CUDA: a GPU's name comes from a child."""
    names: dict[Device, str] = {devices.HOST: devices.HOST.model_name()}
    floors: dict[tuple[object, ...], float | None] = {}

    def measure(point: Config) -> Result:
        if point.world.sharded:  # its ranks are processes of its own
            result = sharded(point, settings, child, timeout_s, names.get(point.device, ""))
            names[point.device] = result.device_name or names.get(point.device, "")
            return result
        shape = limits.floor_key(point, settings)  # the children's thread count is the parent's
        if shape not in floors and not point.has_model:  # a model's row has no matmul floor
            calibration = isolate.call(limits.matmul_floor_ms, (point, settings), child, timeout_s)
            floors[shape] = calibration.value if calibration.status == Status.OK else None
        outcome = isolate.call(functools.partial(run, calibrate=False, floor_ms=floors.get(shape)), (point, settings),
                               child, timeout_s)
        if outcome.status == Status.OK:
            names[point.device] = outcome.value.device_name
            return outcome.value
        result = Result.blank(point, names.get(point.device, ""))
        result.status, result.error = outcome.status, outcome.error
        return result

    return measure
