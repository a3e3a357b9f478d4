"""One step on `meta` tensors: what it allocates (under the storage tracker) and how many
FLOPs it does, without allocating or computing anything.

`config.device` is the *target*: every storage is charged what its allocator charges
(`Device.block_bytes`: CUDA's caching allocator's 512-byte blocks and its block-split rule;
CPU: exact bytes), and a named GPU target's cuBLAS workspaces count in the base. The traced
step starts in steady state: with `grads` keep, after one untracked step; a model's, with
its optimizer's state made by one optimizer step (`training.make_model`). Real sweeps count
their rows' FLOPs here too.
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, overload

import torch

from cebench.core import devices, interpreter, timemodel
from cebench.core.config import Checkpointing, Compile, Config, Grads, Optimizer, torch_dtype
from cebench.core.errors import joined, said
from cebench.core.guard import user_code
from cebench.core.memory import MemoryReading, storage_bytes
from cebench.engine import compiled, compiled_helpers, data_reads, fake_world, kernel_dtypes, triton_launches
from cebench.engine.costs import Costs
from cebench.engine.device_view import seen_as
from cebench.engine.op_cache import OpCache
from cebench.engine.tracker import Observer, Recorded, StorageTracker
from cebench.losses import inputs as inputs_mod
from cebench.losses import variants
from cebench.losses.workloads import Step, make_step
from cebench.measure import probe
from cebench.models import fsdp
from cebench.models import model as model_mod
from cebench.models import training as training_mod
from cebench.models.contract import blocks
from cebench.models.model import Model
from cebench.shims.flop_counter import count_op, grouped_query_flops, untracked_modules
from cebench.shims.inductor import COMPILED_CALL
from cebench.shims.tensor import watch_rng_states
from cebench.store.schema import PREDICTED

if TYPE_CHECKING:
    from torch.utils.flop_counter import FlopCounterMode

class OpaqueOp(Exception):
    """The step ran an op whose allocations a dispatch-mode tracker cannot see."""


@dataclass(frozen=True)
class Trace(Generic[Recorded]):
    """One step traced on meta (`trace`). Bytes are charged as the target's allocator charges
    them (`Device.block_bytes`; an `EventTracker`'s peak: raw). `base_bytes`: the storages the
    step starts with (inputs, kept gradients; a model's parameters and optimizer state) on the
    target; `workspace_bytes`: its cuBLAS workspaces there, one per thread that ran a matmul
    (`blas`: 'forward', 'backward'; `Device.workspace_bytes`, 0 but on a named GPU);
    `peak_delta_bytes`: the most the step's new storages held at once, above the base;
    `state_bytes`: a model's parameters + gradients + optimizer state (None without a model),
    `parameter_bytes` and `optimizer_state_bytes` its parameters and optimizer state alone (0
    without one); `flops`: the FLOPs its counter counted (`counted`; None: no counter, or not
    kept); `skipped`: what it launched and did not run (Triton launches); `said`: the distinct
    warnings it raised; `record`: what its tracker recorded besides
    (`StorageTracker.recorded`: an `OpTracker`'s `Timeline`)."""

    base_bytes: int
    workspace_bytes: int
    peak_delta_bytes: int
    state_bytes: int | None
    parameter_bytes: int
    optimizer_state_bytes: int
    blas: frozenset[str]
    flops: int | None
    skipped: str
    said: str
    record: Recorded


@overload
def trace(config: Config, make_tracker: Callable[..., StorageTracker[Recorded]],
          counter: FlopCounterMode | None = None, layers: int | None = None,
          costs: Costs | None = None) -> Trace[Recorded]: ...
@overload
def trace(config: Config, *, counter: FlopCounterMode | None = None,
          layers: int | None = None, costs: Costs | None = None) -> Trace[None]: ...
def trace(config: Config, make_tracker: Callable[..., StorageTracker[Any]] = StorageTracker,
          counter: FlopCounterMode | None = None, layers: int | None = None,
          costs: Costs | None = None) -> Trace[Any]:
    """One step of `config` on `meta` inputs under a new tracker made by `make_tracker` (a
    `StorageTracker` class, or one partly applied, called with its keyword arguments), with
    `counter` counting that step's FLOPs alone and `costs` its ops and skipped Triton launches
    for the time model (neither where the variant's matmuls run in its own kernels,
    `Variant.kernel_matmuls`: a part would pass for the whole): its `Trace`. Nothing is
    allocated or computed. The RNG states saved by checkpointing count too where they live
    in the target's memory (`Device.host_tensors_count`: on CPU, not on CUDA), and so do the
    host tensors an optimizer keeps. `OpaqueOp` when the step ran a custom op. A peer's code
    runs as on the target (`_peers_run`): it sees the target's device, its Triton launches
    do nothing and its compiled helpers run eagerly (`Trace.skipped` says which) and its
    reads of data are answered (`cebench.engine.data_reads`); so does the untracked step
    before it (`grads` keep). `layers`: a preset's or config.json's model built with that
    many blocks instead of its own (`cebench.engine.series` extrapolates along them)."""
    with _world(config) as world:
        try:
            return _trace(config, make_tracker, counter, layers, world, costs)
        except BaseException:
            if world is not None:  # a step that failed half way leaves its model anywhere
                world.models.clear()
            raise


def _trace(config: Config, make_tracker: Callable[..., StorageTracker[Any]], counter: FlopCounterMode | None,
           layers: int | None, world: fake_world.FakeWorld | None, costs: Costs | None) -> Trace[Any]:
    """`trace`, the model sharded in `world` when given (`fake_world.fake_world`)."""
    target = config.device
    steady = _steady(config, layers, world)
    mesh = None if world is None else world.mesh
    on = _on(config, mesh is not None)
    answers = data_reads.Answers()  # what the step's reads of data would return (the targets' padding)
    answers.labels(steady.targets, inputs_mod.ignored_count(config), inputs_mod.IGNORE_INDEX, config.vocab)
    with user_code(config.variant.name, "variant"), _peers_run(config, answers, mesh is not None):
        steady.warm()
    before: Sequence[torch.Tensor] = steady.tensors()
    training = steady.training
    host = _host_state(training, target.host_tensors_count)

    def held(t: torch.Tensor) -> bool:  # in the target's memory
        return t.device.type in on and id(t) not in host

    state = None if training is None else training.state_bytes(target.block_bytes, held)
    before = [t for t in before if held(t)]
    # a model's parameters and its optimizer's state in the target's memory, as the step starts
    params = [] if training is None else [p for p in map(fsdp.local, training.params) if held(p)]
    optimizer_state = [] if training is None else [t for t in map(fsdp.local, training.state()) if held(t)]
    observers: list[Observer] = []
    launched = None
    if not variants.of(config).kernel_matmuls:  # a kernel's matmuls are unseen: a part would pass for all
        if counter is not None:
            observers.append(functools.partial(count_op, counter))
        if costs is not None:
            observers.append(costs.op)
            launched = costs.launch
    tracker = make_tracker(
        ignore=before, granularity=target.block_bytes, device_types=on, observers=observers,
        # an op's outputs on meta are remembered: the ops below are known
        cache=OpCache() if mesh is None and not _reads_data(config) else None,
        # measured with gloo, which holds buffers inside collectives
        temporaries=fake_world.gloo_temporaries if mesh is not None and target.is_host else None)
    step = steady.make(tracker.wrap(steady.fn))
    step.prepare()
    rng = watch_rng_states(tracker.rng_state) if target.host_tensors_count else contextlib.nullcontext()
    # The tracker counts FLOPs itself, the ops of a custom op's Python kernel (which it runs) too; it is above
    # the answers to data reads, which its ops reach.
    followed = fake_world.follow(tracker) if mesh is not None else contextlib.nullcontext()
    peers = _peers_run(config, answers, mesh is not None, launched)
    kernels = kernel_dtypes.as_on(target, config.torch_dtype)
    with user_code(config.variant.name, "variant"), rng, peers as skipped, kernels, compiled.counting(launched), \
            tracker, followed, grouped_query_flops(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # what the step warned (torch ignoring its options, say): the row's note
        step.run()
    if tracker.opaque:
        raise OpaqueOp(f"{', '.join(sorted(tracker.opaque))} is a custom op: on meta tensors it allocates only "
                       "its outputs, not its internal buffers, so its peak cannot be predicted; measure it with "
                       "cebench sweep")
    return Trace(base_bytes=storage_bytes(before, target.block_bytes),
                 workspace_bytes=target.workspace_bytes * len(tracker.blas), peak_delta_bytes=tracker.peak,
                 state_bytes=state, parameter_bytes=storage_bytes(params, target.block_bytes),
                 optimizer_state_bytes=storage_bytes(optimizer_state, target.block_bytes),
                 blas=frozenset(tracker.blas), flops=None if counter is None else counted(counter),
                 skipped=skipped.note(), said=said(caught), record=tracker.recorded())


def note(skipped: str, said: str) -> str:
    """A predicted row's note: what its trace did not run (`skipped`) and what its step warned."""
    return joined(skipped, said)


@dataclass
class _Steady:
    """A step of a config on `meta`, before it is traced: its loss function `fn`, how to make
    its step around a (wrapped) loss (`make`), its `targets`, `warm` (run the previous step,
    which leaves its gradients behind where they are kept; nothing else), the tensors the
    traced step starts with once `warm` ran (`tensors`), and a model's training state (None
    without a model)."""

    fn: Callable[..., torch.Tensor]
    make: Callable[[Callable[..., torch.Tensor]], Step]
    targets: torch.Tensor
    warm: Callable[[], None]
    tensors: Callable[[], Sequence[torch.Tensor]]
    training: training_mod.Training | None


def _steady(config: Config, layers: int | None = None, world: fake_world.FakeWorld | None = None) -> _Steady:
    """`config`'s step on `meta` in steady state: with `grads` keep, `warm` runs one untracked
    step first; a model's optimizer state is as `_model` gives it, with `layers` blocks
    (None: its own). A model sharded in `world` (fake tensors, `fake_world.fake_world`) is the
    one kept there for the steps of every shape and loss, else built there, and then `warm`
    brings it where a first step leaves it (FSDP's lazy setup, the optimizer's state), as
    every traced step leaves it again."""
    target = config.device
    if config.has_model:
        fn = _loss(config, target)
        model = with_layers(model_mod.of(config), layers)
        if world is not None:
            key = (model, config.dtype, target, config.optimizer, config.activation_checkpointing)
            kept = world.models.get(key)
            built = kept or training_mod.make_model(model, torch.device("cpu"), torch_dtype(config.dtype),
                                                    config.optimizer, config.activation_checkpointing, target,
                                                    world.mesh, stand_in=True)
            training = training_mod.make(config, device="cpu", model=built)

            def settle() -> None:
                if kept is None:
                    fsdp.settle(training.built.body, training.ids, training.optimizer)
                    world.models[key] = built

            return _Steady(fn, lambda loss: training_mod.make_step(loss, training, config), training.targets,
                           settle, training.tensors, training)
        training = training_mod.make(config, device="meta", model=_model(model, config.dtype, target, config.optimizer,
                                                                         config.activation_checkpointing))
        training.zero_grad()  # the model is shared: a step that failed half way may have left gradients
        _compile_blocks(training.built.body, config, target)
        return _Steady(fn, lambda loss: training_mod.make_step(loss, training, config), training.targets,
                       lambda: None, training.tensors, training)
    x = inputs_mod.make(config, device="meta")
    fn = _loss(config, target)

    def warm() -> None:
        if config.grads == Grads.KEEP:  # the previous step, which leaves its gradients behind
            previous = make_step(fn, x, config)
            previous.prepare()
            previous.run()

    return _Steady(fn, lambda loss: make_step(loss, x, config), x.targets, warm, x.tensors, None)


def _compile_blocks(body: torch.nn.Module, config: Config, target: devices.Device) -> None:
    """`body`'s blocks (shared by every step on meta) each run as inductor's code for
    `target` (`config`'s) runs it when `config` compiles them (`compiled.module_on_meta`, as
    `nn.Module.compile()` installs its compiled call), else eagerly."""
    if config.compile == Compile.BLOCKS:
        for block in training_mod.compile_blocks(body, model_mod.of(config).name, real=False):
            COMPILED_CALL.set_on(block, {"_compiled_call_impl": compiled.module_on_meta(block, target)})
    else:
        for block in blocks(body):
            COMPILED_CALL.set_on(block, {"_compiled_call_impl": None})


def _loss(config: Config, target: devices.Device) -> Callable[..., torch.Tensor]:
    """`config`'s variant's function as its step calls it on meta: a compiled variant's as
    inductor's code for `target` (`config`'s) runs (`cebench.engine.compiled`)."""
    variant = variants.of(config)
    return compiled.on_meta(variant.load(), target) if variant.compiled else variant.load()


@contextlib.contextmanager
def _peers_run(config: Config, answers: data_reads.Answers, fake: bool = False,
               launched: Callable[[list[torch.Tensor], str], None] | None = None,
               ) -> Iterator[triton_launches.Skipped]:
    """Around a step of `config` on meta: Triton launches do nothing
    (`triton_launches.skipped`; triton imported for a variant whose kernels are Triton's, or
    already imported), and, for such a variant, its packages' compiled helpers run eagerly
    (`compiled_helpers.eager`, named in the record yielded; the packages imported there,
    before the device view, so that what they import keeps torch's own functions); the
    peers' code sees the target (`seen_as`); a variant that compiles parts of itself has each
    run as inductor's code runs it (`compiled_helpers.predicted`); and `answers` answers such a variant's reads of
    data (entered last: the mode nearest the step's ops, under a tracker entered after it).
    Only a peer whose Python is followed around its kernels reads data: another step is
    spared the extra dispatch mode (a quarter of a model step's trace time). `fake`: the
    step runs on fake CPU tensors standing in for the target (a sharded step). `launched` is
    shown each skipped launch's tensor arguments (`Costs.launch`)."""
    target = config.device
    needs_triton = _reads_data(config)
    variant = variants.of(config)

    def skip(tensors: list[torch.Tensor], kernel: str) -> None:
        answers.forget(tensors)
        if launched is not None:
            launched(tensors, kernel)

    with triton_launches.skipped(needs_triton, on_skip=skip) as skipped, contextlib.ExitStack() as stack:
        if needs_triton:
            packages = [module for module, _ in variant.requires.packages]
            stack.enter_context(compiled_helpers.eager(packages, skipped.eager))
        if variant.compiled_parts:
            stack.enter_context(compiled_helpers.predicted([variant.load().__module__], target))
        stack.enter_context(seen_as(target, "cpu" if fake else "meta"))
        if needs_triton:
            stack.enter_context(answers.data_factories())
            stack.enter_context(answers)
        yield skipped


def _reads_data(config: Config) -> bool:
    """Whether `config`'s variant is a peer whose Python is followed around its Triton kernels
    (`Variant.triton_kernels`: its launches skipped, its reads of data answered)."""
    return variants.of(config).triton_kernels


def _on(config: Config, fake: bool = False) -> frozenset[str]:
    """The kinds of device whose tensors a step on meta for `config`'s target counts: meta
    (standing in for the target), and the host's own where the target is the host; `fake`:
    a step on fake CPU tensors (`fake_world.fake_world`), which stand in for the target."""
    if fake or config.device.host_tensors_count:
        return frozenset({"meta", "cpu"})
    return frozenset({"meta"})


def _host_state(training: training_mod.Training | None, host_counts: bool) -> set[int]:
    """The ids of the optimizer state a GPU keeps on the host (AdamW's step counts, unless
    fused: then on the device), where the target's memory does not hold them (`host_counts`
    False) and a step on fake CPU tensors cannot tell them by their device."""
    if training is None or host_counts or not training.sharded:
        return set()
    optimizer = training.optimizer
    if optimizer is None or optimizer.defaults.get("fused"):
        return set()
    return {id(t) for s in optimizer.state.values() for k, t in s.items() if k == "step"}


@contextlib.contextmanager
def _world(config: Config) -> Iterator[fake_world.FakeWorld | None]:
    """The world a step of `config` is sharded in: rank 0 of a fake world of `config.world`'s
    ranks (`fake_world.fake_world`), or None for an unsharded step."""
    if not config.world.sharded or not config.has_model:
        yield None
        return
    with fake_world.fake_world(config.world) as world:
        yield world


def with_layers(model: Model, layers: int | None) -> Model:
    """`model` with `layers` blocks (None: as it is), to be traced; its `n_params` stays the
    whole model's. Only a preset's or config.json's model (`Model.spec`) can be rebuilt so
    (`ValueError`)."""
    if layers is None or model.spec is not None and layers == model.spec.n_layers:
        return model
    if model.spec is None:
        raise ValueError(f"{model.name} is a user's build: cebench cannot change its blocks")
    return replace(model, spec=replace(model.spec, n_layers=layers))


@functools.lru_cache(maxsize=8)
def _model(model: Model, dtype: str, target: devices.Device, optimizer: Optimizer, checkpointing: Checkpointing,
           ) -> tuple[training_mod.Built, torch.optim.Optimizer | None]:
    """`model` on `meta` for `target` (a kind of device, or a named GPU target, whose compute
    capability chooses its attention kernel) with its optimizer's state
    (`training.make_model`), shared by the steps of every shape, loss and body for that
    target: nothing on meta changes. Keyed by the resolved `Model`, which a changed
    config.json changes."""
    return training_mod.make_model(model, torch.device("meta"), torch_dtype(dtype), optimizer, checkpointing, target)


def predict_peak(config: Config, counter: FlopCounterMode | None = None) -> MemoryReading:
    """Predicted base and peak bytes of one step of `config` on its target device, from a
    run on `meta` tensors (`trace`, counting its FLOPs on `counter`, and its ops' costs for
    its predicted time where there is one: `step_time`). The base is what a
    sweep's measured step starts with: the inputs' storages (and kept gradients), and on a
    named GPU one cuBLAS workspace per thread that ran a matmul (the forward's, the autograd
    engine's), which the sweep's warm-up creates; the peak adds what the step holds at its
    highest point; a model's step, its `state_bytes` too."""
    costs = Costs.of(config)
    traced = trace(config, counter=counter, costs=costs)
    base = traced.base_bytes + traced.workspace_bytes
    return MemoryReading(base, base + traced.peak_delta_bytes, PREDICTED, traced.state_bytes,
                         note=note(traced.skipped, traced.said), time_ms=step_time(config, costs))


def step_time(config: Config, costs: Costs | None) -> float | None:
    """The predicted time (ms) of `config`'s step whose ops `costs` counted (None: not counted,
    which its callers decide by `Verdict.time`: `Costs.of`)."""
    return None if costs is None else time_of(costs.ops, config.device)


def time_of(ops: Mapping[timemodel.OpCost, int], device: devices.Device) -> float | None:
    """The time (ms) of a step that ran `ops` on `device`: a named GPU with its family's
    efficiencies, or this CPU with its probe's rates (`cebench.measure.probe`); None on any
    other device."""
    if device.is_host:
        measured = probe.probe()
        return timemodel.step_ms(ops, measured.target(), measured.efficiency())
    card = device.named_card
    return None if card is None else timemodel.step_ms(ops, card)


INT64_MAX = 2**63 - 1


def flop_counter() -> FlopCounterMode:
    """A `FlopCounterMode` that counts the step's total alone. Its default module tracker,
    which attributes FLOPs to modules, hooks every module's outputs and so keeps tensors
    alive through checkpointed blocks: a traced step would hold more than the real one.
    Its module imports triton, so Triton's interpreter is chosen first (on a machine
    without a GPU: `cebench.core.interpreter`). torch's formulas do not cover the in-place
    `addmm_` and `baddbmm_` (F.linear_cross_entropy's chunks accumulate a gradient with
    `addmm_`): they are counted as their out-of-place twins."""
    interpreter.enable()
    from torch.utils.flop_counter import FlopCounterMode, flop_registry

    aten = torch.ops.aten
    # custom_mapping wraps a formula as the registry's are: give it theirs unwrapped
    in_place = {aten.addmm_: flop_registry[aten.addmm].__wrapped__,
                aten.baddbmm_: flop_registry[aten.baddbmm].__wrapped__}
    counter = FlopCounterMode(display=False, custom_mapping=in_place)
    return untracked_modules(counter)


def counted(counter: FlopCounterMode) -> int | None:
    """The FLOPs `counter` counted, or None when a row cannot carry them: none at all (the
    counter saw no matmul, so it could not see the step's) or more than int64 holds."""
    total = counter.get_total_flops()
    return total if 0 < total <= INT64_MAX else None


def count_flops(config: Config) -> int | None:
    """FLOPs of one step of `config` (matmuls: 2 per multiply-add) as `FlopCounterMode`
    counts them on `meta` inputs (`trace`: nothing allocated or computed); a compiled
    variant is counted on its eager twin. None when the count cannot be trusted or kept:
    the step runs a custom op (which hides its matmuls from the counter) or a variant whose
    matmuls run in its own kernels (`Variant.kernel_matmuls`), fails on `meta`, or `counted`
    says so."""
    counter = flop_counter()
    try:  # a compiled variant's own trace compiles it afresh, which a measuring process must not do
        return trace(replace(config, variant=variants.eager_twin(variants.own(config))), counter=counter).flops
    except Exception:  # whatever a variant does on meta tensors, the row is not failed for it
        return None
