"""cebench's Python API: what each command computes, as functions that return values.

The command line parses its options into these calls and renders what they return. Every
function takes the grid as keyword arguments named after the axes (`batch`, `context`,
`vocab`, `d_model`, `ce_chunk`, `dtype`, and the loss semantics `ignore_frac`, `softcap`,
`label_smoothing`, `z_loss`, `reduction`, and a model's step: `model`, `optimizer`,
`activation_checkpointing`: an int, a float, a string such as "2,8", or a sequence; missing
= the device's default) plus `variant` and `workload`. Bad
input raises `UsageError`, whose `param` names the argument at fault.

    import cebench

    rows = cebench.sweep(variant="dense,chunked", batch=8, vocab=50257, device="cpu", out="peak.csv")
    assert rows[1].peak_delta_bytes <= 200 * 2**20
    (chunked,) = cebench.predict(variant="chunked", batch=64, ce_chunk=2048, d_model=2048, target="cuda")
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cebench.core.axes import AXES, BY_NAME
from cebench.core.config import LOSS, WORKLOADS, Settings
from cebench.core.errors import InputWarning, UsageError, describe
from cebench.losses import variants
from cebench.run.grid import LOGITS_LIMIT, GridOptions
from cebench.run.sweep import Sweep

if TYPE_CHECKING:
    import pandas as pd

    from cebench.analyze.anatomy import Anatomy
    from cebench.analyze.check import CheckReport
    from cebench.analyze.explain import Explanation
    from cebench.analyze.predict import Fit
    from cebench.analyze.verify import LossCheck, SamplerCheck, Setting
    from cebench.core.config import Config
    from cebench.store.schema import Result

__all__ = ["Explained", "Fitted", "GridOptions", "Sweep", "UsageError", "Verified", "check", "explain", "fit",
           "load", "predict", "sweep", "targets", "verify"]


def sweep(*, device: str = "auto", repeats: int | None = None, warmup: int | None = None,
          threads: int | None = None, shard: str | None = None, out: Path | str | None = None, resume: bool = False,
          isolate: bool | None = None, point_timeout: float | None = None, **grid: Any) -> list[Result]:
    """Measure the grid: one `Result` per point, each also appended to the CSV `out`
    (default results/sweep-<time>.csv). The options are `Sweep`'s; iterate a `Sweep` for
    the rows one at a time as they are measured."""
    return list(Sweep(GridOptions(**grid), device=device, repeats=repeats, warmup=warmup, threads=threads,
                      shard=shard, out=out, resume=resume, isolate=isolate, point_timeout=point_timeout))


def targets() -> tuple[Any, ...]:
    """The named GPU targets (`cebench.core.targets.Target`: memory, cuBLAS workspace, BF16
    rate and their sources), as `cebench targets` lists them."""
    from cebench.core.targets import TARGETS

    return TARGETS


def predict(*, target: str = "cuda", out: Path | str | None = None, **grid: Any) -> list[Result]:
    """Each point's peak memory on `target` ('cuda': storages charged as the caching
    allocator charges its blocks; 'cpu': exact bytes; a named GPU, `targets()`: also its
    cuBLAS workspaces in the base, and `predicted_floor_ms`), predicted on meta tensors: rows
    with `mem_method` 'predicted', `flops`, and no time; compiled variants are `unsupported`.
    Also appended to the CSV `out` when given."""
    from cebench.analyze.predict import predict as predict_point
    from cebench.core import devices
    from cebench.store.files import ResultWriter, check_out, one_kind, read_rows

    points = GridOptions(**grid).grid(devices.target(target, param="target").name)
    if out is not None and check_out(Path(out)) is not None:  # a foreign or unwritable CSV is refused first
        one_kind(read_rows(Path(out), warn=False), predictions=True)  # and one of measurements
    variants.smoke_test(points.variants, "cpu")  # a user's variant keeps the contract, on a tiny CPU problem
    expanded = points.expand()
    _warn_meta_work(expanded, "predict")
    rows = [predict_point(point) for point in expanded]
    if out is not None:
        with ResultWriter(Path(out)) as writer:
            for row in rows:
                writer.write(row)
    return rows


@dataclass(frozen=True)
class Fitted:
    """`fit`'s answer: one `Fit` per variant and ce_chunk that could be predicted, the
    measured row of each fitted batch (index into `fits` → `Result`; with `measure`), the
    variants that could not be fitted (name → why), the budget used (bytes), and with a
    model, the answer for the loss alone at the model's vocab and d_model (index → `Fit`)."""

    fits: list[Fit]
    measured: Mapping[int, Result] = field(default_factory=dict)
    not_fitted: Mapping[str, str] = field(default_factory=dict)
    budget: int | None = None
    alone: Mapping[int, Fit] = field(default_factory=dict)


def fit(budget: int | None = None, *, target: str = "cuda", max_batch: int = 4096, measure: bool = False,
        **grid: Any) -> Fitted:
    """The largest batch whose predicted absolute peak (inputs included; on a named GPU its
    cuBLAS workspaces too) fits `budget` bytes (default: a named GPU's memory), per loss
    variant and ce_chunk, at one context, vocab, d_model and dtype; with a `model`, the
    peak of its whole training step, and the loss alone's answer beside it (`alone`). With
    `measure`, each answer is also run once on `target` (which this machine must have)."""
    from cebench.analyze.predict import fit as fit_point
    from cebench.analyze.predict import unpredictable
    from cebench.core import devices
    from cebench.models.training import loss_alone

    device = devices.target(target, param="target").name
    if max_batch < 1:
        raise UsageError("must be at least 1", "max_batch")
    if budget is None:
        budget = devices.get(device).capacity_bytes
        if budget is None:
            raise UsageError(f"is needed for target {device} (a named GPU, see cebench targets, has its own)",
                             "budget")
    if budget < 1:
        raise UsageError("must be a positive number of bytes", "budget")
    if measure:
        devices.target(device, here=True, param="target")  # the target must be here to measure on it
    options = GridOptions(**{**grid, "batch": 1, "workload": LOSS})
    candidates = options.grid(device)
    _one_value(candidates, "fit")
    if max_batch * candidates.context[0] * candidates.vocab[0] * 4 >= LOGITS_LIMIT:
        raise UsageError(f"{max_batch:,} sequences of {candidates.context[0]:,} tokens would need more fp32 logits "
                         "than any machine holds", "max_batch")
    variants.smoke_test(candidates.variants, "cpu")
    points, skipped = [], {}
    for point in candidates.expand():
        why = unpredictable(point)
        if why is None:
            points.append(point)
        else:
            skipped[point.variant] = why
    if not points:
        raise UsageError("no variant here can be predicted (compiled variants and custom ops cannot)", "variant")
    _warn_meta_work([replace(p, batch=max_batch) for p in points], f"fit (at --max-batch {max_batch:,})")
    fits = []
    for point in points:
        try:
            fits.append(fit_point(point, budget, max_batch))
        except Exception as exc:  # a model's body that cannot be traced on meta (a custom op, say)
            if not point.has_model:  # the loss alone was predicted at batch 1: this is no user's model
                raise
            skipped[point.variant] = describe(exc)
    if not fits:
        name, why = next(iter(skipped.items()))
        raise UsageError(f"no variant can be predicted in this model's step ({name}: {why})", "model")
    alone = {i: fit_point(loss_alone(f.config), budget, max_batch) for i, f in enumerate(fits) if f.config.has_model}
    measured = {}
    if measure:  # in a fresh process per answer where the device isolates its points by default
        import functools

        from cebench.run.isolate import Child
        from cebench.run.runner import isolated, run
        from cebench.run.sweep import POINT_TIMEOUT_S

        settings = Settings(warmup=1, repeats=1)
        child = Child(specs=options.specs, device=device)
        one = (isolated(child, settings, POINT_TIMEOUT_S) if devices.get(device).isolate_by_default
               else functools.partial(run, settings=settings))
        measured = {i: one(replace(f.config, batch=f.batch)) for i, f in enumerate(fits) if f.batch}
    return Fitted(fits, measured, skipped, budget, alone)


@dataclass(frozen=True)
class Explained:
    """`explain`'s answer: one `Explanation` per variant and ce_chunk (with a model: one
    `Anatomy` of its training step each, in `anatomies`), the points that could not be
    explained (label → why), and whether they were traced on meta tensors."""

    explanations: list[Explanation]
    not_explained: Mapping[str, str]
    meta: bool
    anatomies: list[Anatomy] = field(default_factory=list)


EXPLAIN_VARIANTS = "dense,chunked"


def explain(*, device: str | None = None, meta: bool = False, target: str | None = None, **grid: Any) -> Explained:
    """What one loss step of each point holds at its peak, allocation by allocation: on
    `device` ('auto', 'cpu', 'cuda'; default auto) from the allocator's events, or on meta
    tensors (`meta`, and always for cuda without a GPU here and for a named GPU target).
    `target` is another name for `device`. One value of each axis but ce_chunk; batch
    defaults to the largest of the device's sweep defaults, variant to dense,chunked. With a
    `model`: what its training step holds at its peak, part by part (parameters, optimizer
    state, gradients, activations, the loss's buffers), traced on meta for the device."""
    from cebench.core import devices

    if device is not None and target is not None:
        raise UsageError("give the device once (--device; --target is another name for it)", "target")
    param = "target" if target is not None else "device"
    name = device or target or "auto"
    if name.strip().lower() != "auto":  # checked before the grid; 'auto' resolved after it (torch looks for a GPU)
        devices.target(name, auto=True, param=param)
    options = GridOptions(**{**grid, "variant": grid.get("variant") or EXPLAIN_VARIANTS, "workload": LOSS})
    _one_value(options.given(batch=options.axes.get("batch") or "1").grid("cpu"), "explain")  # before torch
    device = devices.target(name, auto=True, param=param).name
    meta = meta or devices.get(device).is_target or not devices.get(device).available()
    if options.axes.get("batch") is None:
        options = options.given(batch=str(max(BY_NAME["batch"].default(devices.get(device).kind))))
    points = options.grid(device)
    if points.model[0] != "none":
        return _anatomies(points)

    from cebench.analyze.explain import Unexplainable
    from cebench.analyze.explain import explain as explain_point

    variants.smoke_test(points.variants, "cpu" if meta else device)
    done, skipped = [], {}
    for point in points.expand():
        label = point.variant if point.ce_chunk is None else f"{point.variant} ce_chunk={point.ce_chunk}"
        try:
            done.append(explain_point(point, meta))
        except Unexplainable as exc:
            skipped[label] = str(exc)
    return Explained(done, skipped, meta)


def _anatomies(points: Any) -> Explained:
    """`explain` of a model's training step: each point's `Anatomy`, on meta."""
    from cebench.analyze.anatomy import anatomy
    from cebench.analyze.predict import unpredictable

    variants.smoke_test(points.variants, "cpu")
    done, skipped = [], {}
    for point in points.expand():
        label = point.variant if point.ce_chunk is None else f"{point.variant} ce_chunk={point.ce_chunk}"
        why = unpredictable(point)  # what cannot be predicted cannot be taken apart
        if why is None:
            try:
                done.append(anatomy(point))
            except Exception as exc:  # a model's body that cannot be traced on meta (a custom op, say)
                why = describe(exc)
        if why is not None:
            skipped[label] = why
    return Explained([], skipped, True, done)


META_CHUNKS = 100_000  # chunks of meta ops beyond which a prediction earns a warning before it starts


def _warn_meta_work(points: Iterable[Config], command: str) -> None:
    """An `InputWarning` before predicting `points` when their steps would run more than
    `META_CHUNKS` chunks of meta ops in all (a chunked step runs a dozen ops per chunk)."""
    points = list(points)
    chunks = sum(-(-p.tokens // p.ce_chunk) if p.ce_chunk else 1 for p in points)
    if chunks > META_CHUNKS:
        largest = max(p.tokens for p in points)
        warnings.warn(InputWarning(f"{command}: {chunks:,} chunks of meta ops to trace (a dozen ops each; N up to "
                                   f"{largest:,} tokens), which may take hours; fewer tokens or a larger --ce-chunk "
                                   "take less (Ctrl-C stops it)"), stacklevel=3)


def _one_value(grid: Any, command: str) -> None:
    """Every axis but ce_chunk takes one value in `command`."""
    for axis in AXES:
        values = grid.values[axis.name]
        if axis.name != "ce_chunk" and len(values) > 1:
            listed = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
            raise UsageError(f"{command} takes one value, not {listed} (sweep measures a grid)", axis.name)


@dataclass(frozen=True)
class Verified:
    """`verify`'s answer: the loss checks (the parity matrix: variant × setting × dtype ×
    case), the sampler checks, the variants that cannot run on `device` (name → why), the
    settings checked, in order, and the device they ran on. `passed`: no check failed."""

    losses: list[LossCheck]
    samplers: list[SamplerCheck]
    skipped: Mapping[str, str]
    settings: list[Setting] = field(default_factory=list)
    device: str = "cpu"

    @property
    def passed(self) -> bool:
        return all(c.passed is not False for c in [*self.losses, *self.samplers])


def verify(*, variant: str | None = None, device: str = "auto", dtype: str | None = None, temperature: float = 0.9,
           vocab: int = 16, draws: int = 200_003, ce_chunk: int = 4096, **semantics: Any) -> Verified:
    """Check the correctness claims of every variant (or of `variant`) on `device` ('auto',
    'cpu', 'cuda'; default auto: cuda when a GPU is visible): losses and gradients against a
    float64 reference at three shapes and two edge cases in each `dtype` (default: the
    device's, cpu fp32, cuda bf16), with every loss semantics off and with each alone at each
    of its values (keywords named after the axes, `ignore_frac`, `softcap`, ...; missing =
    `cebench.analyze.verify.DEFAULT_SETTINGS`); samplers by a chi-square test of `draws`
    draws over a `vocab`-token vocabulary."""
    from cebench.analyze.verify import SampleCase, run_all, settings
    from cebench.core import devices
    from cebench.core.axes import SEMANTICS, parse_dtypes, parse_vocab
    from cebench.run.grid import check_temperature, option_text, select_variants

    unknown = sorted(set(semantics) - {a.name for a in SEMANTICS})
    if unknown:
        raise UsageError(f"not a loss semantics (those are: {', '.join(a.name for a in SEMANTICS)})", unknown[0])
    matrix = settings({k: option_text(v) for k, v in semantics.items()})

    names = list(select_variants(variant, ",".join(WORKLOADS)))
    kind = devices.target(device, here=True).kind
    dtypes = list(parse_dtypes(dtype)) if dtype is not None else list(BY_NAME["dtype"].default(kind))
    parse_vocab(str(vocab), "vocab")
    if draws < 100:
        raise UsageError("at least 100 draws are needed for a chi-square test", "draws")
    if ce_chunk < 1:
        raise UsageError(f"{ce_chunk} must be a positive integer", "ce_chunk")
    check_temperature(temperature)
    sample = SampleCase(rows=draws, vocab=vocab, ce_chunk=ce_chunk, temperature=temperature)
    losses, samplers, skipped = run_all(names, dtypes, sample, matrix, kind)
    return Verified(losses, samplers, skipped, matrix, kind)


def load(path: Path | str) -> pd.DataFrame:
    """A results CSV (any schema cebench wrote), validated and typed."""
    from cebench.store.frame import load as load_frame

    return load_frame(Path(path))


def check(results: Path | str | pd.DataFrame, baseline: Path | str | pd.DataFrame, *,
          mem_tol: str | Fraction = "1%", time_tol: str | Fraction | None = None, strict: bool = False) -> CheckReport:
    """Compare `results` with `baseline` point by point (CSV paths or `load`ed frames):
    a `CheckReport` whose `passed` is False when a point's peak Δ grew beyond `mem_tol`, a
    point that was ok failed, or (with `time_tol`) its step time grew significantly."""
    from cebench.analyze.check import compare, parse_tolerance

    def frame(x: Path | str | pd.DataFrame) -> pd.DataFrame:
        return load(x) if isinstance(x, (str, Path)) else x

    mem = parse_tolerance(mem_tol, "mem_tol") if isinstance(mem_tol, str) else mem_tol
    time = parse_tolerance(time_tol, "time_tol") if isinstance(time_tol, str) else time_tol
    return compare(frame(results), frame(baseline), mem_tol=mem, time_tol=time, strict=strict,
                   names=(str(results) if not hasattr(results, "columns") else "results",
                          str(baseline) if not hasattr(baseline, "columns") else "baseline"))
