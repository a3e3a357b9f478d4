"""`cebench predict` and `cebench fit` as library calls: the grid checked, each point
predicted on meta tensors (`cebench.engine.points`), the rows or answers returned. Nothing
here imports torch until a function runs; nothing prints."""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cebench.commands import arguments
from cebench.core.axes import AXES, STEP_SETTINGS, parse_world
from cebench.core.config import LOSS, Settings
from cebench.core.errors import InputWarning, UsageError, describe
from cebench.core.guard import time_limit
from cebench.losses import variants
from cebench.run.grid import GridOptions

if TYPE_CHECKING:
    from cebench.core.config import Config
    from cebench.engine.points import Fit
    from cebench.store.schema import Result


def predict(*, target: str = "cuda", out: Path | str | None = None, point_timeout: float | None = None,
            progress: Callable[[int, int, Config], None] | None = None, **grid: Any) -> list[Result]:
    """Each point's peak memory on `target` ('cuda': storages charged as the caching
    allocator charges its blocks; 'cpu': exact bytes; a named GPU, `targets()`: also its
    cuBLAS workspaces in the base, and `predicted_floor_ms`), predicted on meta tensors: rows
    with `mem_method` 'predicted', `flops`, and no time; a compiled variant as inductor's generated
    code runs (`cebench.engine.compiled`; unsharded, else `unsupported`).
    Also appended to the CSV `out` when given. A user's loss or build still running after
    `point_timeout` seconds at once is stopped (`UsageError`; None: no limit). `progress`,
    when given, is called before each point with how many are done, how many there are and
    the point."""
    from cebench.core import devices

    device = devices.target(arguments.name(target, "target"), param="target")
    out = None if out is None else arguments.path(out, "out")
    seconds = arguments.seconds(point_timeout)
    with time_limit(seconds):  # a user's build (resolved with the grid), smoke test and traces
        options = GridOptions(**grid)
        warn_user_code(options, seconds, "predict")
        points = options.grid(device)
        # torch and pandas, once the arguments are checked: a usage error is one line at once
        from cebench.engine.fake_world import session
        from cebench.engine.points import predict as predict_point
        from cebench.store.files import ResultWriter, check_out, one_kind, read_rows
        if out is not None and check_out(out) is not None:  # a foreign or unwritable CSV is refused first
            one_kind(read_rows(out, warn=False), predictions=True)  # and one of measurements
        variants.smoke_test(points.variants, devices.HOST)  # a user's variant keeps the contract, on a tiny problem
        expanded = points.expand()
        warn_meta_work(expanded, "predict")
        warn_worlds(expanded, options, "predict")
        rows = []
        with session():  # the points' sharded steps share their fake world and models
            for done, point in enumerate(expanded):
                if progress is not None:
                    progress(done, len(expanded), point)
                rows.append(predict_point(point))
    if out is not None:
        with ResultWriter(out) as writer:
            for row in rows:
                writer.write(row)
    return rows


@dataclass(frozen=True)
class Fitted:
    """`fit`'s answer: one `Fit` per variant and ce_chunk that could be predicted, and per
    value of each setting of a model's step (a point of settings that cannot be predicted
    together: `Fit.unsupported`, saying why), the measured row of each fitted batch (index
    into `fits` → `Result`; with `measure`), the settings that could not be fitted (the
    variant, with the step settings given several values → why), the budget (bytes) and the
    share of it kept free (`headroom`, a fraction: every peak is at most `limit`), and with a
    model, the answer for the loss alone at the model's vocab and d_model (index → `Fit`)
    and where the context came from when it was not given (`context_from`); on a named GPU,
    the `fastest` setting that fits."""

    fits: list[Fit]
    measured: Mapping[int, Result] = field(default_factory=dict)
    not_fitted: Mapping[str, str] = field(default_factory=dict)
    budget: int | None = None
    alone: Mapping[int, Fit] = field(default_factory=dict)
    headroom: Fraction = Fraction(0)
    context_from: str | None = None

    @property
    def limit(self) -> int | None:
        """The bytes a peak may reach (`peak_limit`): the budget less its `headroom` share."""
        return None if self.budget is None else peak_limit(self.budget, self.headroom)

    @property
    def fastest(self) -> int | None:
        """The index into `fits` of the setting that trains the most tokens per second per GPU
        within the budget (its predicted time at its largest batch, `Fit.tokens_per_s`; which
        may not be the largest batch): None where no time was predicted."""
        timed = [i for i, f in enumerate(self.fits) if f.tokens_per_s is not None]
        return max(timed, key=lambda i: self.fits[i].tokens_per_s or 0.0) if timed else None


HEADROOM = "5%"  # `fit`'s default share of the budget kept free for what cebench does not count


def peak_limit(budget: int, headroom: Fraction) -> int:
    """The bytes a peak may reach within `budget` when the `headroom` share of it is kept free
    (for what cebench does not count: the CUDA context, NCCL's buffers, fragmentation)."""
    return math.floor(budget * (1 - headroom))


def fit(budget: int | str | None = None, *, target: str = "cuda", max_batch: int = 4096, measure: bool = False,
        headroom: str | Fraction = HEADROOM, out: Path | str | None = None, point_timeout: float | None = None,
        **grid: Any) -> Fitted:
    """The largest batch whose predicted absolute peak (inputs included; on a named GPU its
    cuBLAS workspaces too) fits `budget` (text as `--budget` takes it, '80GiB', or bytes,
    refused below 1 MiB as `--budget 80` is; default: a named GPU's memory) less `headroom`
    (text as `--headroom` takes it, '5%', or a `Fraction` of the budget kept free), per loss
    variant (compiled ones only when named) and ce_chunk, at one context, vocab, d_model and
    dtype; with a `model`, the peak of its whole training step (per value of each of its
    step's settings given, `STEP_SETTINGS`: `activation_checkpointing="none,blocks"` answers
    for both; at the model's own longest context, `max_position_embeddings`, unless `context`
    is given), and the loss alone's answer beside it (`alone`). With `measure`, each answer is
    also run once on `target` (which this machine must have). With `out`, the predicted row of
    each answer (its setting at its max batch; an unsupported one's row saying why) is
    appended to that CSV, as `predict` writes rows. A user's loss or build still running after
    `point_timeout` seconds at once is stopped (`UsageError`; None: no limit)."""
    share = arguments.tolerance(headroom, "headroom")
    if share >= 1:
        raise UsageError(f"'{headroom}' leaves nothing of the budget (give less than 100%)", "headroom")
    path = None if out is None else arguments.path(out, "out")
    seconds = arguments.seconds(point_timeout)
    with time_limit(seconds):
        warn_user_code(GridOptions(**grid), seconds, "fit")
        return _fit(arguments.budget(budget), arguments.name(target, "target"),
                    arguments.count(max_batch, "max_batch"), measure, share, path, grid)


def _fit(budget: int | None, target: str, max_batch: int, measure: bool, headroom: Fraction, out: Path | None,
         grid: dict[str, Any]) -> Fitted:
    from cebench.core import devices

    device = devices.target(target, param="target")
    if max_batch < 1:
        raise UsageError("must be at least 1", "max_batch")
    if budget is None:
        budget = device.capacity_bytes
        if budget is None:
            raise UsageError(f"is needed for target {device.name} (a named GPU, see cebench targets, has its own)",
                             "budget")
    if measure:
        devices.target(target, here=True, param="target")  # the target must be here to measure on it
    one_value(GridOptions(**{**grid, "batch": 1}), device.kind, "fit", lists=STEP_SETTINGS)
    grid, context_from = _own_context(grid)
    options = GridOptions(**{**grid, "batch": 1, "workload": LOSS})
    candidates = options.grid(device)
    # torch and pandas, once the arguments are checked: a usage error is one line at once
    from cebench.engine import support
    from cebench.engine.fake_world import session
    from cebench.engine.points import fit as fit_point
    from cebench.engine.points import predict as predict_point
    from cebench.models.training import loss_alone
    from cebench.store.files import ResultWriter, check_out, one_kind, read_rows

    if out is not None and check_out(out) is not None:  # a foreign or unwritable CSV is refused first
        one_kind(read_rows(out, warn=False), predictions=True)
    if grid.get("variant") is None:  # compiled ones when named: each batch a fit asks of one compiles it again
        candidates = replace(candidates, variants=tuple(v for v in candidates.variants if not v.compiles))
    if support.too_large(max_batch, candidates.context[0], candidates.vocab[0], candidates.d_model[0]):
        raise UsageError(f"{max_batch:,} sequences of {candidates.context[0]:,} tokens would need more fp32 logits "
                         "than any machine holds", "max_batch")
    variants.smoke_test(candidates.variants, devices.HOST)
    several = tuple(n for n in STEP_SETTINGS if len(getattr(candidates, n, ())) > 1)

    def named(point: Config) -> str:  # the variant, and the step's settings that take several values
        return " · ".join([point.variant.name, *(f"{n} {point.value(n)}" for n in several)])

    points, skipped = [], {}
    for point in candidates.expand():
        refused = support.verdict(point).loss
        if refused is not None:  # its loss alone cannot be predicted: passed over, said why
            skipped[named(point)] = refused.reason
        else:  # a point its step refuses is answered unsupported, saying why (`points.fit`)
            points.append(point)
    if not points:
        name, why = next(iter(skipped.items()))
        raise UsageError(f"no variant here can be predicted ({name}: {why})", "variant")
    warn_meta_work([replace(p, batch=max_batch) for p in points], f"fit (at --max-batch {max_batch:,})")
    warn_worlds(points, options, "fit")
    within = peak_limit(budget, headroom)
    fits = []
    with session():  # the points' sharded steps share their fake world and models
        for point in points:
            try:
                fits.append(fit_point(point, within, max_batch))
            except Exception as exc:  # a model's body that cannot be traced on meta (a custom op, say)
                if not point.has_model:  # the loss alone was predicted at batch 1: this is no user's model
                    raise
                skipped[named(point)] = describe(exc)
        # each answer's row as predict writes it, in the same world
        rows = [predict_point(replace(f.config, batch=max(f.batch, 1))) for f in fits if f.answered] if out else []
    if not fits:
        name, why = next(iter(skipped.items()))
        raise UsageError(f"no variant can be predicted in this model's step ({name}: {why})", "model")
    losses = {i: loss_alone(f.config) for i, f in enumerate(fits) if f.config.has_model and not f.unsupported}
    alone_fits = {c: fit_point(c, within, max_batch) for c in set(losses.values())}  # one whatever the settings
    alone = {i: alone_fits[c] for i, c in losses.items()}
    measured = {}
    if measure:  # in a fresh process per answer where the device isolates its points by default
        import functools

        from cebench.commands.sweep import POINT_TIMEOUT_S
        from cebench.run.isolate import Child
        from cebench.run.runner import isolated, run

        settings = Settings(warmup=1, repeats=1)
        child = Child(specs=options.specs, device=device)
        one = (isolated(child, settings, POINT_TIMEOUT_S) if device.isolate_by_default
               else functools.partial(run, settings=settings))
        measured = {i: one(replace(f.config, batch=f.batch)) for i, f in enumerate(fits) if f.batch}
    if out is not None:
        with ResultWriter(out) as writer:
            for row in rows:
                writer.write(row)
    return Fitted(fits, measured, skipped, budget, alone, headroom, context_from)


def _own_context(grid: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """`grid` with a model's own longest context (its config's `max_position_embeddings`)
    where a model is given without a context, and the words that say so (None: the
    context was given, or there is no model; a user's build declares none and keeps the
    default, which is said too)."""
    from cebench.models.model import resolve_model

    if grid.get("context") is not None or grid.get("model") in (None, ""):
        return grid, None
    model = resolve_model(str(grid["model"]))
    if model.spec is None:
        return grid, f"the default ({model.name} declares no length; --context sets one)"
    return ({**grid, "context": str(model.spec.max_positions)},
            f"{model.name}'s max_position_embeddings, its longest; --context sets another")


META_CHUNKS = 100_000  # chunks of meta ops beyond which a prediction earns a warning before it starts (~1 min)
META_CHUNKS_LIMIT = 1_000_000  # chunks of meta ops beyond which it is refused (~10 min, GBs of trace events)


def warn_meta_work(points: Iterable[Config], command: str) -> None:
    """An `InputWarning` before predicting `points` when their steps would run more than
    `META_CHUNKS` chunks of meta ops in all (a chunked step runs a dozen ops per chunk), a
    `UsageError` beyond `META_CHUNKS_LIMIT`. A step extrapolated along the batch
    (`series.period`) runs a few chunks, whatever its N."""
    from cebench.engine import series

    points = [p for p in points if series.period(p) is None]
    chunks = sum(p.chunks for p in points)
    if chunks <= META_CHUNKS:
        return
    largest = max(p.tokens for p in points)
    work = f"{command}: {chunks:,} chunks of meta ops to trace (a dozen ops each; N up to {largest:,} tokens)"
    if chunks > META_CHUNKS_LIMIT:
        raise UsageError(f"{work}, beyond the {META_CHUNKS_LIMIT:,} cebench traces (hours, and gigabytes of "
                         "events); fewer tokens or a larger --ce-chunk")
    warnings.warn(InputWarning(f"{work}, which may take minutes; fewer tokens or a larger --ce-chunk take less "
                               "(Ctrl-C stops it)"), stacklevel=3)


def warn_worlds(points: Iterable[Config], options: GridOptions, command: str) -> None:
    """An `InputWarning`, once, before `command` predicts in a fake world of more than
    `fake_world.NOTICE_RANKS` ranks (its largest): named by the options the user gave
    (`--gpus` where given), and how long it may take."""
    from cebench.engine import fake_world

    worlds = [p.world for p in points if p.world.size > fake_world.NOTICE_RANKS]
    if worlds:
        world = max(worlds, key=lambda w: w.size)
        warnings.warn(InputWarning(f"{world.asked(options.gpus is not None)}: building a fake world of "
                                   f"{world.size:,} ranks to predict rank 0's step, which may take minutes "
                                   "(Ctrl-C stops it)"), stacklevel=3)


def warn_user_code(options: GridOptions, seconds: float | None, command: str) -> None:
    """An `InputWarning` as `command` starts when it runs a user's loss or model build
    (`file.py:fn`, `module:fn`) in this process under a limit given above `POINT_TIMEOUT_S`
    (above `guard.NO_LIMIT_S`: none): what runs, and how long it may. With no limit given,
    none was asked for and nothing is said."""
    from cebench.commands.sweep import POINT_TIMEOUT_S
    from cebench.core.axes import split
    from cebench.core.guard import NO_LIMIT_S
    from cebench.losses.loader import is_spec
    from cebench.models.hf import PREFIX
    from cebench.models.model import preset_name

    if seconds is None or seconds <= POINT_TIMEOUT_S:
        return
    given = options.axes.get("model")
    heads = {m: m.rpartition(":")[0] for m in (split(given, "model") if given else ()) if is_spec(m)}
    builds = [m for m, head in heads.items()  # not a preset's, a config's or an hf: model's :suffix
              if not m.startswith(PREFIX) and preset_name(head) is None and not head.endswith(".json")]
    users = [s for s in options.specs if is_spec(s)] + builds
    if not users:
        return
    bound = (f"unbounded: --point-timeout above {NO_LIMIT_S:,.0f} s is no limit" if seconds > NO_LIMIT_S
             else f"bounded by --point-timeout's {seconds:,.0f} s")
    warnings.warn(InputWarning(f"{command}: {users[0]}{' and others' * (len(users) > 1)} run here, {bound}"),
                  stacklevel=3)


def one_value(options: GridOptions, kind: str, command: str, lists: tuple[str, ...] = ()) -> None:
    """Every axis but ce_chunk (and those named in `lists`) takes one value in `command` (its
    options as given, each parsed, or the default of device `kind`), and so does --gpus unless
    fsdp is in `lists`: checked before any work (no model is resolved, torch not imported)."""
    gpus = parse_world(options.gpus, "gpus") if options.gpus is not None else ()
    if len(gpus) > 1 and "fsdp" not in lists:
        raise UsageError(f"{command} takes one value, not {','.join(map(str, gpus))} (sweep measures a grid)", "gpus")
    for axis in AXES:
        values = axis.values(options.axes.get(axis.name), kind)
        if not axis.chunked_only and axis.name not in lists and len(values) > 1:
            listed = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
            raise UsageError(f"{command} takes one value, not {listed} (sweep measures a grid)", axis.name)
