"""Peak memory without the hardware: a results row predicted on `meta` tensors
(`cebench.engine.trace`) for any size, and the largest batch that fits a memory budget."""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

from cebench.core import timemodel
from cebench.core.config import ITEMSIZE, Compile, Config
from cebench.engine import compiled, fake_world, series, support
from cebench.losses import variants
from cebench.losses.inputs import ignored_count
from cebench.models import model as model_mod
from cebench.models import training
from cebench.store.schema import Result


def predict(config: Config) -> Result:
    """A results row for `config` with predicted memory, its `flops`, and no time columns; a
    compiled variant run as inductor's generated code runs (`cebench.engine.compiled`:
    unsharded, else `unsupported`; for a GPU its note says how it was lowered); a step that
    fails on `meta` is an `error` row. On a named GPU target the row names it (`target`) and,
    in bf16 or fp16, carries `predicted_floor_ms`: the counted FLOPs at the card's dense BF16
    rate, and `predicted_time_ms` where the time model can predict the step
    (`cebench.core.timemodel`; estimates, never measured times)."""
    target = config.device
    result = Result.blank(config, f"predicted for {target.name}")
    result.target = target.name if target.is_target else ""
    refused = support.verdict(config).predict  # inside a model, its loss alone at batch 1 too (milliseconds)
    if refused is None:
        try:  # with the FLOPs of the same meta step, as `count_flops` counts a measured row's
            reading, flops = series.predicted(config)
        except Exception as exc:  # a custom op, an op without a meta kernel: report it, go on
            refused = support.refusal(exc)
    if refused is not None:
        result.status, result.error = refused.status, refused.reason
        return result
    result.base_bytes, result.peak_bytes = reading.base_bytes, reading.peak_bytes
    result.peak_delta_bytes, result.mem_method = reading.peak_delta_bytes, reading.method
    result.add_note(reading.note)  # what the trace did not run (Triton launches skipped)
    if (variants.own(config).compiles or config.compile == Compile.BLOCKS) and target.is_gpu:
        result.add_note(compiled.GPU_NOTE)
    if config.world.sharded and target.is_host and not fake_world.matched_world(config.world.size):
        result.add_note(fake_world.UNMATCHED_WORLD_NOTE)
    result.flops = flops
    if config.has_model:
        _model_columns(result, config, reading.state_bytes)
    if result.flops is not None and target.bf16_flops and config.dtype in ("bf16", "fp16"):
        result.predicted_floor_ms = result.flops / target.bf16_flops * 1e3
    _time_columns(result, config, reading.time_ms)
    return result


def tokens_per_s(config: Config, time_ms: float) -> float:
    """The non-padding tokens of `config`'s step per second per GPU, at a step time of
    `time_ms` (a TP group's ranks share its step's tokens: `World.gpus_per_step`)."""
    return (config.tokens - ignored_count(config)) / config.world.gpus_per_step / time_ms * 1e3


def _time_columns(result: Result, config: Config, time_ms: float | None) -> None:
    """A predicted row's time columns on a named GPU or this CPU (its probe's rates):
    `predicted_time_ms` and the non-padding tokens per second it gives, and on its note why
    it is missing or what limits it (on a GPU, a step under `timemodel.SHORT_MS`; a family
    whose efficiencies are borrowed, compiled kernels)."""
    device = config.device
    if not device.is_target and not device.is_host:
        return
    if time_ms is None:
        result.add_note(support.verdict(config).time or "time not predicted: its ops did not repeat along the batch "
                        "or the blocks as its memory did")
        return
    result.predicted_time_ms = time_ms
    result.predicted_tokens_per_s = tokens_per_s(config, time_ms)
    target = device.named_card
    generated = variants.own(config).compiles or config.compile == Compile.BLOCKS
    result.add_note(
        timemodel.efficiency(target)[1] if target is not None else "",
        f"time under {timemodel.SHORT_MS:g} ms: mostly launches, which the time model knows least"
        if time_ms < timemodel.SHORT_MS and target is not None else "",
        "time: inductor's kernels as fused kernels reading or writing each buffer once (not calibrated on "
        "compiled rows)" if generated else "",
        f"time: {timemodel.collectives_note(target, config.world)}" if config.world.sharded else "")


def _model_columns(result: Result, config: Config, state_bytes: int | None) -> None:
    """A model row's model columns, predicted: body_peak_bytes from its body step
    (`training.body_config`), empty when that fails."""
    result.n_params, result.model_state_bytes = model_mod.of(config).n_params, state_bytes
    result.step_peak_bytes = result.peak_bytes
    result.body_peak_bytes = _body_peak(training.body_config(config))


@functools.lru_cache(maxsize=16)
def _body_peak(body: Config, shared: bool = False) -> int | None:
    """The predicted peak of a body step (shared by every loss variant at its shape; keyed by
    the point, whose model is the resolved one, which a changed config.json changes;
    `shared`: one of many batches, as `series.predicted` takes it); None when it cannot be
    predicted (the loss's row stands, its body column empty)."""
    try:
        return series.predicted(body, flops=False, shared=shared)[0].peak_bytes
    except Exception:  # an op without a meta kernel in a user's body, say
        return None


@dataclass(frozen=True)
class Fit:
    """The largest batch of one variant and ce_chunk whose predicted absolute peak fits
    the budget, with that peak in bytes. `batch` 0: not even one sequence fits.
    `at_limit`: the search stopped at its batch limit, which still fits. `time_ms`: the
    predicted step time at that batch on a named GPU (None where the time model cannot
    predict it, `Verdict.time`). `unsupported`: why the point cannot be predicted
    (`Verdict.predict`; its batch then 0, nothing predicted), None when it was fitted.
    `body_peak_bytes`: with a model, the peak of the same step at that batch with a stand-in
    loss (`training.body_config`; None without a model, a batch, or where it cannot be
    predicted), beside which `peak_bytes` gives the loss's share."""

    config: Config
    batch: int
    peak_bytes: int | None
    at_limit: bool
    predictions: int
    time_ms: float | None = None
    unsupported: str | None = None
    body_peak_bytes: int | None = None

    @property
    def tokens(self) -> int:
        return self.batch * self.config.context

    @property
    def answered(self) -> bool:
        """A batch fits, or the point cannot be predicted (saying why): what `fit --out` writes a
        row for (none where not one sequence fits)."""
        return bool(self.batch or self.unsupported)

    @property
    def tokens_per_s(self) -> float | None:
        """Non-padding tokens per second at the fitted batch (None without a predicted time)."""
        if self.time_ms is None or not self.batch:
            return None
        return tokens_per_s(replace(self.config, batch=self.batch), self.time_ms)


def largest_fitting(peak: Callable[[int], int], budget: int, guess: int, cap: int) -> int:
    """Largest b in [1, cap] with peak(b) ≤ budget (0 if none).

    `peak` must not decrease with b; it is typically convex and piecewise linear (the
    maximum of a few phases, each affine in b). `guess` and its neighbour are asked first:
    when the answer is one of them, nothing else is (not even cap, which may be costly).
    Then the bracket lo (fits) < hi (does not) is shrunk from both sides: the chord between
    them crosses the budget where peak fits when it is convex, and the tangent at hi crosses
    it next to where peak stops fitting; on a linear piece both land on the answer.
    Bisection when nothing made progress."""
    lo, hi = 0, cap + 1  # the largest batch known to fit (0: none yet), the smallest known not to

    def visit(b: int) -> None:
        nonlocal lo, hi
        if lo < b < hi:
            if peak(b) <= budget:
                lo = b
            else:
                hi = b

    guess = max(1, min(cap, guess))
    visit(guess)
    visit(guess + 1 if lo == guess else guess - 1)  # a guess next to the answer brackets it now
    if lo == 0:
        if hi == 1 or peak(1) > budget:
            return 0
        lo = 1
    if hi == cap + 1 and lo < cap:
        if peak(cap) <= budget:
            return cap
        hi = cap
    while hi - lo > 1:
        before = (lo, hi)
        visit(lo + (budget - peak(lo)) * (hi - lo) // (peak(hi) - peak(lo)))
        slope = peak(hi) - peak(hi - 1)
        if hi - lo > 1 and slope > 0:
            last = hi - -(-(peak(hi) - budget) // slope)  # the tangent at hi is ≤ budget up to here
            visit(last + 1)
            visit(last)
        if (lo, hi) == before:
            visit((lo + hi) // 2)
    return lo


def fit(config: Config, budget: int, max_batch: int) -> Fit:
    """The largest batch ≤ `max_batch` at `config`'s context whose predicted `peak_bytes`
    ≤ `budget`, every candidate predicted (peak(batch) fits, peak(batch + 1) does not).

    Probes at 8 and 16 chunks' worth of sequences (dense: batch 8, 16) give the
    slope of peak against batch; secant steps from there find where it crosses the budget
    (a model's step peaks in its optimizer step at small batches, in its activations at
    large ones), and `largest_fitting` starts from that guess. Each probe is extrapolated where
    it can be (`cebench.engine.series`): its cost grows neither with its chunks nor with its
    model's blocks. A compiled chunked loss is traced whole, each probe compiled: its search
    stops at `compiled.MAX_CHUNKS` chunks (an answer there is `at_limit`). On a named GPU the
    answer's step time is predicted too (`Fit.time_ms`), and with a model the same step's
    peak with a stand-in loss (`Fit.body_peak_bytes`). A point that cannot be predicted
    (`Verdict.predict`: a setting of its model's step another excludes, say) is answered
    `Fit.unsupported`, nothing predicted."""
    refused = support.verdict(config).predict
    if refused is not None:
        return Fit(config, 0, None, False, 0, unsupported=refused.reason)
    cache: dict[int, int] = {}

    def peak(batch: int) -> int:
        if batch not in cache:
            point = replace(config, batch=batch)
            # extrapolated where it can be, from traces shared by every batch of its residue
            cache[batch] = series.predicted(point, flops=False, shared=True)[0].peak_bytes
        return cache[batch]

    h_bound = budget // (config.context * config.d_model * ITEMSIZE[config.dtype])  # h alone must fit
    cap = max(1, min(max_batch, h_bound))
    if config.ce_chunk and variants.own(config).compiled:  # as far as a compiled step is predicted
        cap = min(cap, max(1, compiled.MAX_CHUNKS * config.ce_chunk // config.context))
    unit = -(-(config.ce_chunk or config.context) // config.context)  # sequences per chunk (≥ 1)
    probes = sorted({min(cap, k * unit) for k in (8, 16)})
    a, guess = probes[-2:] if len(probes) > 1 else (probes[0], probes[0])
    for _ in range(4):  # secant steps: the peak is the maximum of a few phases, each affine in batch
        if guess == a or peak(guess) == peak(a):
            break
        a, guess = guess, min(cap, max(1, guess + int((budget - peak(guess)) * (guess - a) // (peak(guess) - peak(a)))))
    batch = largest_fitting(peak, budget, guess, cap)
    time_ms = series.predicted(replace(config, batch=batch), flops=False, shared=True)[0].time_ms if batch else None
    body = _body_peak(training.body_config(replace(config, batch=batch)), shared=True) if batch and config.has_model \
        else None
    return Fit(config, batch, peak(batch) if batch else None, batch == cap, len(cache), time_ms, body_peak_bytes=body)
