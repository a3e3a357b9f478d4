"""The sweep grid: option values parsed and checked against `AXES`, device-aware
defaults, and expansion into measured points (`Config`). Imports torch only to resolve
device 'auto' or 'cuda'."""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cebench.core import devices
from cebench.core.axes import AXES, BY_NAME, NO_MODEL, SEMANTICS, Axis, Checkpointing, Role, parse_world, split
from cebench.core.config import ALONE, LOGITS, LOSS, SAMPLE, WORKLOADS, Config
from cebench.core.devices import Device
from cebench.core.errors import UsageError
from cebench.core.world import NAMES as DEGREES
from cebench.core.world import REMAINDER, World
from cebench.engine import support
from cebench.losses import variants
from cebench.losses.variants import Variant
from cebench.models.model import Model, resolve_model


def check_temperature(temperature: float) -> float:
    """Sampling temperature must be a positive, finite number."""
    if not 0 < temperature < float("inf"):
        raise UsageError(f"{temperature} must be positive", "temperature")
    return temperature


def parse_names(text: str, known: list[str], param: str) -> tuple[str, ...]:
    """'a,b' → ('a', 'b'), each checked against `known`, duplicates dropped."""
    chosen: list[str] = []
    for part in split(text, param):
        if part not in known:
            raise UsageError(f"unknown '{part}' (choose from {', '.join(known)})", param)
        if part not in chosen:
            chosen.append(part)
    return tuple(chosen)


def select_variants(variant: str | None, workload: str | None, device: str | None = None) -> tuple[Variant, ...]:
    """Variant and workload texts → the variants they name, resolved (where a variant's name
    enters). Without `variant`: the default variants of the chosen workloads (default: loss)
    on a device of kind `device`. A variant is a variant name, a user's
    ``module:function`` or ``file.py:function``, or either with ``-compiled`` appended;
    variants named explicitly must belong to the chosen workloads."""
    workloads = parse_names(workload, list(WORKLOADS), "workload") if workload is not None else None
    if variant is None:
        return tuple(dict.fromkeys(v for w in (workloads or (LOSS,)) for v in variants.defaults(w, device)))
    chosen = tuple(dict.fromkeys(variants.resolve(part) for part in split(variant, "variant")))
    if workloads is not None:
        stray = [v.name for v in chosen if not set(v.workloads) & set(workloads)]
        if stray:
            raise UsageError(f"{', '.join(stray)} is not a {'/'.join(workloads)} variant", "variant")
    return chosen


@dataclass(frozen=True)
class Grid:
    """The cartesian grid of a sweep: the values of every axis (`AXES` name → values; a
    model by its name, `models` holding it resolved), the variants and the device, resolved.
    Axes that apply to chunked variants only (`ce_chunk`) expand those alone; the other
    variants are measured once per shape. `grid.batch` etc. read `values`."""

    variants: tuple[Variant, ...]
    device: Device
    values: Mapping[str, tuple]
    temperature: float = 0.9
    model_own: tuple[str, ...] = ()  # the axes each point's model decides (`Axis.model_sets`, `model_default`)
    workloads: tuple[str, ...] = ()  # the workloads chosen (empty: each variant's own)
    gpus: tuple[int, ...] = ()  # worlds of these many ranks only (`--gpus`; empty: every combination of degrees)
    models: Mapping[str, Model] = field(default_factory=dict)  # each model of `values` by its name, resolved

    def __getattr__(self, name: str) -> tuple:
        values = self.__dict__.get("values", {})
        if name in values:
            return values[name]
        raise AttributeError(name)

    def runnable(self, smoke: bool = True) -> tuple[Grid, dict[str, str]]:
        """This grid without the variants that cannot run on its device here, and why each
        of those cannot (name → reason). With `smoke`, user variants are smoke-tested on a
        tiny problem first (`UsageError` when one breaks the contract)."""
        reasons = {v.name: r for v in self.variants if (r := support.variant_reason(v, self.device))}
        if smoke:
            variants.smoke_test(self.variants, self.device)
        return replace(self, variants=tuple(v for v in self.variants if v.name not in reasons)), reasons

    def runs(self, variant: Variant) -> list[str]:
        """The workloads `variant` has points of: each chosen workload it has
        (`Variant.workloads`; none chosen: its own)."""
        return [w for w in self.workloads or (variant.workload,) if w in variant.workloads]

    def expand(self) -> list[Config]:
        """Every point, grouped by shape so that the variants of one shape are adjacent
        (the last axes vary fastest: batch before context before d_model, vocab, dtype), each
        world of `gpus` ranks where those are given.
        A sampler takes the loss semantics' `off` values, so it is measured once per shape. A
        variant runs on each chosen workload it has (`Variant.workloads`; none chosen: its
        own); a point of the logits workload has d_model 0 (no projection)."""
        shared = [a for a in AXES if not a.chunked_only]
        order = [a for a in shared if a.name not in ("batch", "context", "d_model", "vocab")] + [
            BY_NAME[n] for n in ("vocab", "d_model", "context", "batch")]
        chunked = [a for a in AXES if a.chunked_only]
        points: dict[Config, None] = {}
        for combo in itertools.product(*(self.values[a.name] for a in order)):
            shape: dict[str, Any] = dict(zip((a.name for a in order), combo, strict=True))
            if self.gpus and World.of(shape).size not in self.gpus:
                continue
            model = self.models.get(shape["model"])
            if model is not None:  # the model's vocab and d_model, whatever the grid lists
                shape.update({name: getattr(model, name) for name in self.model_own})
            shape["model"] = model or ALONE
            for base in self.variants:
                for workload in self.runs(base):
                    variant = base.on(workload)
                    own = shape if workload != SAMPLE else {**shape, **{a.name: a.off for a in SEMANTICS}}
                    if workload == LOGITS:
                        own = {**own, "d_model": 0}
                    per_chunk = [self.values[a.name] if variant.chunked else (None,) for a in chunked]
                    for extra in itertools.product(*per_chunk):
                        points[Config(variant=base, workload=workload, device=self.device,
                                      temperature=self.temperature, **own,
                                      **dict(zip((a.name for a in chunked), extra, strict=True)))] = None
        return list(points)


def _worlds(text: str | None, values: dict[str, tuple], given: Mapping[str, str | None]) -> tuple[int, ...]:
    """`--gpus`: the world sizes given (`text`; () when not given), each made a world of each
    combination of the other degrees' values, `REMAINDER` (FSDP) taking what they leave
    (`World.of_size`), whose values it gets (`Grid.expand` keeps the worlds of the sizes
    given). A `UsageError` with --fsdp too, without a model, or for degrees that do not divide
    a size."""
    if text is None:
        return ()
    gpus = parse_world(text, "gpus")
    remainder = BY_NAME[REMAINDER]
    if given.get(REMAINDER) is not None:
        raise UsageError(f"shards the model over the GPUs the other degrees leave ({remainder.name} = gpus / "
                         f"{' / '.join(n for n in DEGREES if n != REMAINDER)}): give --gpus or {remainder.flag}, "
                         "not both", "gpus")
    if all(m == NO_MODEL for m in values["model"]):
        raise UsageError("applies to a model's training step: give --model too", "gpus")
    others = [n for n in DEGREES if n != REMAINDER]
    sizes = []
    for size in gpus:
        for combo in itertools.product(*(values[n] for n in others)):
            split = dict(zip(others, combo, strict=True))
            try:
                sizes.append(World.of_size(size, **split)[REMAINDER])
            except ValueError:
                named = " × ".join(f"{BY_NAME[n].flag} {v}" for n, v in split.items())
                raise UsageError(f"{named} does not divide --gpus {size:,} (each world is "
                                 f"{' × '.join(DEGREES)} GPUs)", others[-1]) from None
    values[REMAINDER] = tuple(dict.fromkeys(sizes))
    return gpus


def _check_rules(values: dict[str, tuple], given: Mapping[str, str | None], samplers: list[str]) -> dict[str, Model]:
    """Check the grid's parsed `values` (`given`: the options' texts) against the rules each
    axis declares (`Axis.requires`, `model_sets`, `model_default`, `without_model`,
    `Role.STEP`), and fill in what a model decides: with a model, each model resolved
    (`UsageError` for a bad one), vocab and d_model its own, its softcap too unless given, the
    loss workload alone; an axis whose `requires` is off everywhere takes its own `off` value
    (a value given for it is a `UsageError`). The models resolved, by name."""
    for axis in AXES:
        if axis.requires is not None:
            needed = BY_NAME[axis.requires[0]]
            if all(needed.is_off(v) for v in values[needed.name]):
                if given.get(axis.name) is not None and any(not axis.is_off(v) for v in values[axis.name]):
                    raise UsageError(f"{axis.requires[1]}: give {needed.flag} too", axis.name)
                values[axis.name] = (axis.off,)
    names = [m for m in values["model"] if m != NO_MODEL]
    models = _model_rules(values, given, samplers, names) if names else {}
    for axis in AXES:
        if axis.role is Role.STEP and samplers and any(not axis.is_off(v) for v in values[axis.name]):
            raise UsageError(f"needs the loss workload: the sample workload ({samplers[0]}) has no graph and no "
                             "gradients (use --workload loss)", axis.name)
    return models


def _logits_rules(values: dict[str, tuple], given: Mapping[str, str | None], only: bool) -> None:
    """The logits workload's rules, where the grid has points of it: cross-entropy of given
    N × vocab logits has no projection, so no model's step (a model runs the loss workload)
    and, where it is the only workload with points (`only`), no --d-model."""
    if any(m != NO_MODEL for m in values["model"]):
        raise UsageError("a model's step is a loss's: the logits workload has no projection and no model (use "
                         "--workload loss)", "model")
    if only and given.get("d_model") is not None:
        raise UsageError("does not apply to the logits workload: the loss of given N × vocab logits has no "
                         "projection", "d_model")


def _model_rules(values: dict[str, tuple], given: Mapping[str, str | None], samplers: list[str],
                 models: list[str]) -> dict[str, Model]:
    """`_check_rules` with `models` in the grid: their vocab and d_model set in `values`, and
    the models by their canonical names (`cebench.models.model.canonical_name`), each resolved
    here (where a model's name enters): returned by that name."""
    for axis in AXES:
        if axis.model_sets and given.get(axis.name) is not None:
            raise UsageError("is the model's own with --model (cebench models shows it)", axis.name)
    if samplers:
        raise UsageError(f"a model's step is a loss's: the sample workload ({samplers[0]}) has none (use --workload "
                         "loss)", "model")
    for axis in AXES:
        if axis.without_model and any(not axis.is_off(v) for v in values[axis.name]):
            raise UsageError(axis.without_model, axis.name)
    resolved = [resolve_model(m) for m in models]
    values["model"] = tuple(dict.fromkeys(m.name for m in resolved))  # a preset by its name, not its Hugging Face id
    builds = [m.name for m in resolved if not m.checkpoints_blocks]
    if builds and Checkpointing.BLOCKS in values["activation_checkpointing"]:
        raise UsageError(f"cebench checkpoints the blocks of a preset or config.json model; {builds[0]}'s body "
                         "checkpoints its own", "activation_checkpointing")
    for axis in _model_own(given):  # the model's own attribute of the axis's name
        values[axis.name] = tuple(dict.fromkeys(getattr(m, axis.name) for m in resolved))
    return {m.name: m for m in resolved}


def _model_own(given: Mapping[str, str | None]) -> list[Axis]:
    """The axes a grid's model decides, `given` the options' texts: those it sets, and those it
    defaults that are not given."""
    return [a for a in AXES if a.model_sets or (a.model_default and given.get(a.name) is None)]


def option_text(value: object) -> str | None:
    """An axis value as option text: None and text stay, a sequence is comma-joined, a number written."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Iterable):
        return ",".join(str(v) for v in value)
    return str(value)


GRID_PARAMS: tuple[str, ...] = tuple(a.name for a in AXES) + ("variant", "workload", "temperature", "gpus")


def grid_params(params: Mapping[str, object]) -> dict[str, Any]:
    """The grid's keyword arguments (`GRID_PARAMS`) among `params`, a command's parsed
    parameters: what `GridOptions` and the API's functions take."""
    return {k: params[k] for k in GRID_PARAMS if k in params}


class GridOptions:
    """A grid as given: each axis's values (`AXES` name → comma-separated text, a number or
    a sequence; missing or None = the device's default), the variants and workloads, the
    temperature. `GridOptions(batch="2,8", variant="dense,chunked")`; parsed into a `Grid`
    by `grid(device)`. An unknown axis is a `UsageError`."""

    def __init__(self, *, variant: str | Iterable[str] | None = None, workload: str | None = None,
                 temperature: float = 0.9, gpus: int | str | Iterable[int] | None = None, **axes: object) -> None:
        unknown = sorted(set(axes) - set(BY_NAME))
        if unknown:
            raise UsageError(f"not an axis (axes: {', '.join(BY_NAME)})", unknown[0])
        self.axes: dict[str, str | None] = {k: option_text(v) for k, v in axes.items()}
        self.variant, self.workload, self.temperature = option_text(variant), workload, temperature
        self.gpus = option_text(gpus)

    def __repr__(self) -> str:
        return (f"GridOptions(variant={self.variant!r}, workload={self.workload!r}, gpus={self.gpus!r}, "
                f"axes={self.axes!r})")

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> GridOptions:
        """The grid options among a command's parsed parameters (by name); others ignored."""
        return cls(**grid_params(params))

    @property
    def specs(self) -> tuple[str, ...]:
        """The variants as given (names, ``module:function`` specs): what a fresh process
        resolves again to stand where this one stands (`cebench.run.isolate.Child`)."""
        return tuple(split(self.variant, "variant")) if self.variant else ()

    def given(self, **changes: Any) -> GridOptions:
        """These options with some replaced (axes, variant, workload, temperature)."""
        return GridOptions(**{**self.axes, "variant": self.variant, "workload": self.workload,
                              "temperature": self.temperature, "gpus": self.gpus, **changes})

    def grid(self, device: Device | str) -> Grid:
        """The grid for `device` (a `Device`, or the name of one: 'cpu', 'cuda' or a named GPU
        target); unset axes take the defaults of its kind; each axis's rules are checked
        (`_check_rules`)."""
        device = device if isinstance(device, Device) else devices.get(device)
        kind = device.kind
        values = {a.name: a.values(self.axes.get(a.name), kind) for a in AXES}
        chosen = parse_names(self.workload, list(WORKLOADS), "workload") if self.workload is not None else ()
        grid = Grid(variants=select_variants(self.variant, self.workload, kind), device=device, values=values,
                    temperature=check_temperature(self.temperature), workloads=chosen)
        samplers = [v.name for v in grid.variants if v.workload == SAMPLE]
        runs = {w for v in grid.variants for w in grid.runs(v)}  # the workloads the grid has points of
        if LOGITS in runs:
            _logits_rules(values, self.axes, only=runs == {LOGITS})
        gpus = _worlds(self.gpus, values, self.axes)
        models = _check_rules(values, self.axes, samplers)
        if gpus:
            grid = replace(grid, gpus=gpus)
        if models:
            grid = replace(grid, model_own=tuple(a.name for a in _model_own(self.axes)), models=models)
        beyond = support.too_large(*(max(values[n]) for n in ("batch", "context", "vocab", "d_model")))
        if beyond is not None:
            raise UsageError(*beyond)
        return grid
