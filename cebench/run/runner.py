"""Runs one `Config` and returns its `Result`: warm-up, memory pass, timing pass.

Failure is data: out-of-memory → status 'oom', any other exception or a loss that is not
finite → 'error', a variant that cannot run here or lacks a loss semantics the point asks
for → 'unsupported'; every non-ok row says why in `error`. What the implementation warned
while it ran (a fallback, say) goes in `note`.
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from cebench.core import devices
from cebench.core.config import Config, Settings
from cebench.core.errors import UsageError, describe, said
from cebench.core.memory import MemoryReading
from cebench.losses import inputs as inputs_mod
from cebench.losses import variants
from cebench.losses.workloads import make_step
from cebench.measure import limits
from cebench.measure.meta import count_flops
from cebench.measure.timing import Timing, time_steps
from cebench.models import training
from cebench.models.model import resolve_model
from cebench.run import isolate
from cebench.run.isolate import Child
from cebench.store.schema import Result, Status


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


def _measure(config: Config, settings: Settings) -> _Measured:
    fn = variants.get(config.variant).build() if config.variant != training.BODY else training.stand_in
    if config.has_model:
        state = training.make(config)
        step, live = training.make_step(fn, state, config), state.tensors
    else:
        inputs = inputs_mod.make(config)
        step, live = make_step(fn, inputs, config), inputs.tensors
    device = devices.get(config.device)
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
    memory = device.peak(step.run, live())  # kept gradients, a model's optimizer state too
    timing = time_steps(step.run, step.prepare, device, settings.repeats)
    if config.has_model:
        memory = replace(memory, state_bytes=state.state_bytes(device.block_bytes, device.holds))
    return _Measured(memory, timing, first_ms, said(caught))


# A body step's peak and median ms (None: it failed), by its point, model, settings and threads.
_BODY: dict[tuple[object, ...], tuple[int, float] | None] = {}


def _model_columns(result: Result, config: Config, settings: Settings) -> None:
    """A model row's n_params, step_peak_bytes, and body_peak_bytes and body_time_ms from
    its body step (`training.body_config`), measured once per process."""
    result.n_params = resolve_model(config.model).n_params
    result.step_peak_bytes = result.peak_bytes
    body = training.body_config(config)
    key = (body, resolve_model(config.model), settings, torch.get_num_threads())
    if key not in _BODY:
        try:
            measured = _measure(body, settings)
            _BODY[key] = measured.memory.peak_bytes, measured.timing.median_ms
        except Exception:  # the loss's row stands; its body columns stay empty
            _BODY[key] = None
        devices.get(config.device).free_cache()
    measured_body = _BODY[key]
    if measured_body is not None:
        result.body_peak_bytes, result.body_time_ms = measured_body


def run(config: Config, settings: Settings, *, calibrate: bool = True, floor_ms: float | None = None) -> Result:
    """Measure `config`; never raises for a failure of the step itself. An ok row also gets
    its `flops` (and `tflops_per_s`) and `matmul_floor_ms`: with `calibrate`,
    `limits.matmul_floor_ms`, calibrated once per shape in this process after the row's own
    measurement, outside its memory probe; else `floor_ms` as given (calibrated elsewhere,
    None where that failed)."""
    device = devices.get(config.device)
    result = Result.blank(config, device.model_name())
    variant = variants.get(config.variant)
    reason = variant.unsupported_reason(config.device) or variant.lacks(config)
    if reason:
        result.status, result.error = Status.UNSUPPORTED, reason
        return result
    outcome: _Measured | None = None
    try:
        outcome = _measure(config, settings)
    except Exception as exc:  # failure is data: classify, record, and move on
        result.status = Status.OOM if device.is_oom(exc) else Status.ERROR
        result.error = describe(exc)
    device.free_cache()
    if outcome is None:
        return result
    memory, timing, first_ms = outcome.memory, outcome.timing, outcome.first_ms
    result.note = "; ".join(filter(None, (variant.interpreter_note(config.device), outcome.said)))
    result.peak_bytes, result.base_bytes = memory.peak_bytes, memory.base_bytes
    result.peak_delta_bytes, result.mem_method = memory.peak_delta_bytes, memory.method
    result.time_ms_median, result.time_ms_p25 = timing.median_ms, timing.p25_ms
    result.time_ms_p75, result.time_ms_min = timing.p75_ms, timing.min_ms
    result.repeats, result.time_ms_samples = timing.repeats, timing.samples_ms
    result.tokens_per_s = config.tokens / (timing.median_ms / 1e3)
    if variant.compiled:
        result.compile_s = max(first_ms - timing.median_ms, 0.0) / 1e3
    result.flops = count_flops(config)
    if result.flops is not None:
        result.tflops_per_s = result.flops / (timing.median_ms / 1e3) / 1e12
    if config.has_model:
        result.model_state_bytes = memory.state_bytes
        _model_columns(result, config, settings)
        return result  # the matmul floor is the loss's alone, not the step's
    result.matmul_floor_ms = limits.matmul_floor_ms(config, settings) if calibrate else floor_ms
    return result


def smoke_test_isolated(names: tuple[str, ...], device: str, child: Child, timeout_s: float | None) -> dict[str, str]:
    """`variants.smoke_test` of each user variant among `names`, each in a fresh process
    (`isolate.call`): `UsageError` when one breaks the contract, as in-process; one that
    kills its process or outlives `timeout_s` is returned (name → how), for its points to
    fail in isolation as their rows say, rather than ending the sweep."""
    crashed = {}
    for name in variants.untrusted(names, device):
        outcome = isolate.call(variants.smoke_test, ((name,), device), child, timeout_s)
        if outcome.usage:
            raise UsageError(outcome.error)
        if outcome.status != Status.OK:
            crashed[name] = outcome.error
    return crashed


def isolated(child: Child, settings: Settings, timeout_s: float | None) -> Callable[[Config], Result]:
    """`run`, each point in a fresh process set up as `child` (`isolate.call`), waiting at
    most `timeout_s` seconds: a point that kills its process or outlives the timeout
    becomes an `error` or `timeout` row. The matmul floor is calibrated once per shape, in a
    process of its own, and handed to the points. Nothing here touches CUDA: a GPU's name
    comes from a child."""
    names: dict[str, str] = {"cpu": devices.get("cpu").model_name()}
    floors: dict[tuple[object, ...], float | None] = {}

    def measure(point: Config) -> Result:
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
