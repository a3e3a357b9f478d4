"""Predictions whose cost does not grow with how often a loop runs.

A chunked loss traced on meta runs its loop once per `ce_chunk` rows, so tracing it costs
O(N / ce_chunk). But the trace repeats itself: a step whose variant declares it
(`Variant.affine_in_rows`) is a fixed sequence of storage events with one identical
iteration per chunk, and every storage's bytes are affine in the batch. Batches that
leave the same last, partial chunk (`period`: batch steps of `ce_chunk / gcd(ce_chunk,
context)` sequences, a whole number of chunks) therefore give traces that differ only by
whole iterations inserted into each loop, and by bytes that grow by the same amount per
step.

`Series` traces three such batches (`SAMPLES` periods and the next two), aligns their event
sequences (the second is the first with one run of events inserted per loop, the third
with two), checks that every event's bytes are affine in the batch, and from that computes
any batch's peak, base, FLOPs and model state in time independent of the batch: the peak
of k copies of an inserted run is its first copy's or its last copy's, in closed form.
The allocator's rounding (`Device.block_bytes`) is applied to each event's bytes at the
batch asked for, never extrapolated. When any check fails the step is traced whole
(`predicted` falls back); tests compare both on shapes where both run.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import torch

from cebench.core import devices
from cebench.core.config import Config
from cebench.core.memory import MemoryReading
from cebench.losses import variants
from cebench.measure.meta import counted, flop_counter, predict_peak, trace
from cebench.measure.tracker import StorageTracker
from cebench.models import training as training_mod
from cebench.models.model import resolve_model
from cebench.store.schema import PREDICTED

ALLOC, FREE = "+", "-"
Signature = tuple[str, object]  # (ALLOC or FREE, the op that made the storage)
SAMPLES = 4  # periods in the smallest traced batch: each loop has run a regular iteration between its first and last
WORTH = 8  # periods beyond the smallest sample from which extrapolating is cheaper than one whole trace


class EventTracker(StorageTracker):
    """A storage tracker that logs each storage's allocation and release as (signature,
    raw bytes), in order, and the raw bytes of the distinct storages it was told to ignore
    (`before`: what the step starts with). `block` is what the target's allocator charges
    a request (applied by `Series`, not here)."""

    def __init__(self, ignore: Iterable[torch.Tensor] = (),
                 granularity: int | Callable[[int], int] = 1, device_types: frozenset[str] | None = None) -> None:
        ignore = list(ignore)
        super().__init__(ignore, 1, device_types)
        self.block = granularity if callable(granularity) else functools.partial(_round, granularity)
        self.before = list({t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in ignore}.values())
        self.events: list[tuple[Signature, int]] = []
        self._live: dict[int, tuple[int, object]] = {}
        self._op: object = None

    def rng_state(self, state: torch.Tensor) -> None:
        self._op = "get_rng_state"
        self.track(state)

    def _changed(self, key: int, tensor: torch.Tensor | None) -> None:
        old = self._live.pop(key, None)
        if old is not None:  # released, or resized: the old storage goes first
            self.events.append(((FREE, old[1]), old[0]))
        if tensor is not None:
            raw = self._sizes[key]  # granularity 1: the storage's own bytes
            self._live[key] = (raw, self._op)
            self.events.append(((ALLOC, self._op), raw))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._op = func
        return super().__torch_dispatch__(func, types, args, kwargs)


def _round(granularity: int, nbytes: int) -> int:
    return -(-nbytes // granularity) * granularity


@dataclass(frozen=True)
class _Sample:
    """One traced batch, as `Series` needs it."""

    events: list[tuple[Signature, int]]
    before: list[int]
    flops: int | None
    blas: frozenset[str]
    skipped: str
    state: int | None


def _sample(config: Config, flops: bool) -> tuple[_Sample, Callable[[int], int]]:
    """`config`'s step traced on meta with its events logged (and its FLOPs counted: a
    counter costs a model step's trace half as much again), and its target's `block`."""
    counter = flop_counter() if flops else None
    tracker, _, state = trace(config, EventTracker, counter)
    total = None if counter is None else counted(counter)
    return _Sample(tracker.events, tracker.before, total, frozenset(tracker.blas),
                   tracker.skipped, state), tracker.block


@dataclass(frozen=True)
class _Run:
    """A run of events inserted once per period before template event `at`: each event's
    signature, its bytes at one period (`first`) and their growth per period (`slope`)."""

    at: int
    signatures: tuple[Signature, ...]
    first: tuple[int, ...]
    slope: tuple[int, ...]


class NotRepeating(Exception):
    """The sampled traces are not one fixed sequence with whole iterations inserted."""


def _insertions(s0: Sequence[Signature], s1: Sequence[Signature]) -> list[tuple[int, int, int]]:
    """(position in s0, start in s1, length) of each run of events s1 inserts into s0, each
    a repeat of the events before it in s1 (a loop's extra iteration). `NotRepeating` when
    s1 is not s0 with such runs inserted."""
    found = _align(s0, s1, 0, 0, 0, 0)
    if found is None:
        raise NotRepeating("the longer trace is not the shorter one with repeated runs inserted")
    return found


def _align(s0: Sequence[Signature], s1: Sequence[Signature], i: int, j: int, floor_i: int, floor_j: int,
           ) -> list[tuple[int, int, int]] | None:
    """`_insertions` from s0[i:] and s1[j:] on, no run placed before (floor_i, floor_j), the
    end of the run found before it; None when there is no such alignment. At each place
    the traces part, the shortest repeated run that lets the rest align is taken."""
    while i < len(s0) and j < len(s1) and s0[i] == s1[j]:
        i, j = i + 1, j + 1
    if j == len(s1):
        return [] if i == len(s0) else None
    spare = (len(s1) - j) - (len(s0) - i)  # events s1 still has to insert
    for length in range(1, min(spare, j - floor_j) + 1):
        if s1[j:j + length] != s1[j - length:j]:
            continue
        # Placed as early as the loop allows: its last iteration (a partial chunk) may look like the others
        # but for its bytes, and must stay matched with the other trace's last one.
        at, start = i, j
        while at > floor_i and start > floor_j and s1[start - 1] == s1[start + length - 1]:
            at, start = at - 1, start - 1
        rest = _align(s0, s1, i, j + length, at, start + length)
        if rest is not None:
            return [(at, start, length), *rest]
    return None


class Series:
    """The traces of a step at batches `first`, `first + period` and `first + 2·period`,
    aligned: any batch `first + k·period` (k ≥ 0) is answered from them (`reading`,
    `flops`). `NotRepeating` when they do not repeat as the module says."""

    def __init__(self, config: Config, first: int, period: int, flops: bool = True) -> None:
        self.config, self.first, self.period = config, first, period
        samples = []
        for k in range(3):
            sample, self._block = _sample(replace(config, batch=first + k * period), flops)
            samples.append(sample)
        s0, s1, s2 = samples
        if len({(s.blas, s.skipped, s.state) for s in samples}) != 1 or len({len(s.before) for s in samples}) != 1:
            raise NotRepeating("the traces differ in what they launch or start with")
        sig0, sig1, sig2 = ([e[0] for e in s.events] for s in samples)
        inserted = _insertions(sig0, sig1)
        runs, at2, j1 = [], 0, 0  # index into s2 while walking s0 with each run doubled
        template_slope = []
        position = 0
        for at, start, length in [*inserted, (len(sig0), len(sig1), 0)]:
            for i in range(position, at):  # template events before this run
                v0, v1, v2 = s0.events[i][1], s1.events[i + j1][1], s2.events[at2][1]
                if sig2[at2] != sig0[i] or v2 - v1 != v1 - v0:
                    raise NotRepeating(f"event {i} is not affine in the batch")
                template_slope.append(v1 - v0)
                at2 += 1
            position = at
            if not length:
                break
            signatures = tuple(sig1[start:start + length])
            once = [v for _, v in s1.events[start:start + length]]
            twice = [v for _, v in s2.events[at2:at2 + 2 * length]]
            if tuple(sig2[at2:at2 + 2 * length]) != signatures * 2 or twice[:length] != twice[length:]:
                raise NotRepeating(f"the run inserted at event {at} is not repeated")
            slope = tuple(t - o for t, o in zip(twice[:length], once, strict=True))
            runs.append(_Run(at, signatures, tuple(once), slope))
            at2 += 2 * length
            j1 += length
        if at2 != len(sig2):
            raise NotRepeating("the third trace has events the pattern lacks")
        self._template = [(sig, v) for sig, v in s0.events]
        self._template_slope = template_slope
        self._runs = runs
        self._samples = samples
        for values in (s.before for s in samples), ([s.flops] for s in samples):
            for a, b, c in zip(*values, strict=True):
                if a is not None and (b is None or c is None or c - b != b - a):
                    raise NotRepeating("the inputs or FLOPs are not affine in the batch")

    def _k(self, batch: int) -> int:
        k, rest = divmod(batch - self.first, self.period)
        if rest or k < 0:
            raise ValueError(f"batch {batch} is not {self.first} + k·{self.period}")
        return k

    def peak_delta(self, batch: int) -> int:
        """The highest the step's own storages reach above what it starts with (bytes, as
        the target's allocator charges them)."""
        k, block = self._k(batch), self._block
        level = peak = 0
        runs = iter(self._runs)
        run = next(runs, None)
        for i, ((kind, _), v0) in enumerate(self._template):
            while run is not None and run.at == i:
                level, peak = self._repeat(run, k, level, peak)
                run = next(runs, None)
            level += _signed(kind, block(v0 + k * self._template_slope[i]))
            peak = max(peak, level)
        while run is not None:
            level, peak = self._repeat(run, k, level, peak)
            run = next(runs, None)
        return peak

    def _repeat(self, run: _Run, k: int, level: int, peak: int) -> tuple[int, int]:
        """(level, peak) after `k` copies of `run` from `level`: the highest copy is the first
        when a copy leaves the level lower or as it was, the last when it raises it."""
        if k == 0:
            return level, peak
        block, step, high = self._block, 0, 0
        for (kind, _), first, slope in zip(run.signatures, run.first, run.slope, strict=True):
            step += _signed(kind, block(first + (k - 1) * slope))
            high = max(high, step)
        return level + k * step, max(peak, level + high + (k - 1) * max(step, 0))

    def _affine(self, values: Sequence[int], k: int) -> int:
        return values[0] + k * (values[1] - values[0])

    def reading(self, batch: int) -> tuple[MemoryReading, int | None]:
        """The predicted reading of a step at `batch` (as `meta.predict_peak` gives it) and
        its FLOPs (None when they cannot be counted)."""
        k = self._k(batch)
        s0 = self._samples[0]
        before = [self._affine([s.before[i] for s in self._samples], k) for i in range(len(s0.before))]
        target = devices.get(self.config.device)
        base = sum(target.block_bytes(n) for n in before)
        base += target.workspace_bytes * len(s0.blas)
        flops = None if s0.flops is None else self._affine([s.flops or 0 for s in self._samples], k)
        return MemoryReading(base, base + self.peak_delta(batch), PREDICTED, s0.state, note=s0.skipped), flops


def _signed(kind: str, nbytes: int) -> int:
    return nbytes if kind == ALLOC else -nbytes


def period(config: Config) -> int | None:
    """The batch step that adds whole iterations to `config`'s loops and keeps its last
    chunk as it is (sequences), or None when its step is not declared affine in the rows
    (`Variant.affine_in_rows`) or its model is a user's build."""
    name = config.variant
    if name != training_mod.BODY and not variants.get(name).affine_in_rows:
        return None
    if config.has_model and resolve_model(config.model).spec is None:
        return None
    chunk = config.ce_chunk
    return chunk // math.gcd(chunk, config.context) if chunk else 1


def series(config: Config, flops: bool = True) -> Series | None:
    """The `Series` that answers `config` at its batch (with its FLOPs unless `flops` is
    False), or None when there is none: not declared affine, the batch below the samples,
    or traces that do not repeat. Shared by every batch of the same point and residue
    (`fit` asks many)."""
    step = period(config)
    if step is None:
        return None
    first = config.batch % step + SAMPLES * step
    if config.batch < first:
        return None
    return _series(replace(config, batch=first), step, flops)


@functools.lru_cache(maxsize=64)
def _series(config: Config, step: int, flops: bool) -> Series | None:
    try:
        return Series(config, config.batch, step, flops)
    except NotRepeating:
        return None


def predicted(config: Config, *, whole_below: int = WORTH) -> tuple[MemoryReading, int | None]:
    """`config`'s predicted reading and FLOPs: from its `Series` when its batch is at least
    `whole_below` periods beyond the samples' first (extrapolation is then cheaper than
    one trace), else from one whole trace (`meta.predict_peak`)."""
    step = period(config)
    if step is not None and config.batch >= config.batch % step + (SAMPLES + whole_below) * step:
        found = series(config)
        if found is not None:
            return found.reading(config.batch)
    counter = flop_counter()
    reading = predict_peak(config, counter)
    return reading, counted(counter)
