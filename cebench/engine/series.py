"""Predictions whose cost does not grow with how often a loop runs.

A chunked loss traced on meta runs its loop once per `ce_chunk` rows, so tracing it costs
O(N / ce_chunk). But the trace repeats itself: a step whose variant declares it
(`Variant.affine_in_rows`) is a fixed sequence of storage events with one identical
iteration per chunk, and every storage's bytes are affine in the batch. Batches that
leave the same last, partial chunk (`period`: steps of `ce_chunk` rows for a loss alone,
which sees N and nothing else; of `ce_chunk / gcd(ce_chunk, context)` sequences, a whole
number of chunks, for a model's step) therefore give traces that differ only by whole
iterations inserted into each loop, and by bytes that grow by the same amount per step.

`Series` traces three such batches (`SAMPLES` periods and the next two), aligns their event
sequences (the second is the first with one run of events inserted per loop, the third
with two), checks that every event's bytes are affine in the batch, and from that computes
any batch's peak, base, FLOPs and model state in time independent of the batch: the peak
of k copies of an inserted run is its first copy's or its last copy's, in closed form.
The allocator's rounding (`Device.block_bytes`) is applied to each event's bytes at the
batch asked for, never extrapolated.

A model's blocks are a loop too: a preset's or config.json's model (`layers`) is traced with
`LAYERS`, `LAYERS + 1` and `LAYERS + 2` blocks (a sharded one's from `SHARDED_LAYERS`: the
first and last block differ from those between), aligned the same way with each event's
bytes part of its signature (they do not change with the blocks; an optimizer's per-
parameter loop repeats its ops every parameter but its bytes every block), and the storages
the step starts with grow by one block's parameters and state per step. Every variant's step
qualifies: the loss runs once, after the blocks. Both axes combine: each of a batch series'
three samples is written out (`Series.sample`) from its own series along the blocks, so a
deep model at a huge batch costs nine traces of a few blocks and a few chunks.

When any check fails the step is traced whole (`predicted` falls back); tests compare both
on shapes where both run.
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, TypeVar

import torch

from cebench.core import devices
from cebench.core.config import Config
from cebench.core.memory import MemoryReading
from cebench.core.timemodel import OpCost
from cebench.engine.costs import Costs
from cebench.engine.trace import counted, flop_counter, note, predict_peak, time_of, trace
from cebench.engine.tracker import StorageTracker, charge
from cebench.losses import variants
from cebench.models import model as model_mod
from cebench.shims.torch_names import storage_key
from cebench.store.schema import PREDICTED

ALLOC, FREE = "+", "-"
Number = TypeVar("Number", int, float)  # what is extrapolated along an axis: bytes and FLOPs, a time
Signature = tuple[str, object]  # (ALLOC or FREE, the op that made the storage)
SAMPLES = 4  # periods in the smallest traced batch: each loop has run a regular iteration between its first and last
WORTH = 8  # periods beyond the smallest sample from which extrapolating is cheaper than one whole trace
LAYERS = 2  # blocks in the smallest sample along a model's blocks: the first and the last block differ from the rest
# ... and along a sharded model's: a block's backward frees the previous block's reduce-scatter input and prefetches
# the next block, so an inserted block needs one like it before it, which the first is not
SHARDED_LAYERS = 3
WORTH_LAYERS = 3  # blocks beyond the samples from which extrapolating along them is cheaper than a whole trace
WRITTEN_OUT = 1024  # blocks beyond which a step is not written out as a batch series' sample (real models: ≤ 128)


class Logged(NamedTuple):
    """What an `EventTracker` logged: each storage's allocation and release as (signature,
    raw bytes), in order (`events`: its own list, where a storage that dies after the trace
    still logs its release), and the raw bytes of the distinct storages it was told to ignore
    (`before`: what the step starts with)."""

    events: list[tuple[Signature, int]]
    before: list[int]


class EventTracker(StorageTracker[Logged]):
    """A storage tracker that logs the step's storages (`Logged`) in raw bytes, whatever its
    `granularity`: what the target's allocator charges is applied by `Series`."""

    def __init__(self, ignore: Iterable[torch.Tensor] = (), **given: Any) -> None:  # `StorageTracker`'s
        ignore = list(ignore)
        super().__init__(ignore, **{**given, "granularity": 1})
        self._log = Logged([], list({storage_key(t.untyped_storage()): t.untyped_storage().nbytes()
                                     for t in ignore}.values()))
        self._live: dict[int, tuple[int, object]] = {}
        self._op: object = None

    def recorded(self) -> Logged:
        return self._log

    def rng_state(self, state: torch.Tensor) -> None:
        self._op = "get_rng_state"
        self.track(state)

    def _changed(self, key: int, tensor: torch.Tensor | None) -> None:
        old = self._live.pop(key, None)
        if old is not None:  # released, or resized: the old storage goes first
            self._log.events.append(((FREE, old[1]), old[0]))
        if tensor is not None:
            raw = self._sizes[key]  # granularity 1: the storage's own bytes
            self._live[key] = (raw, self._op)
            self._log.events.append(((ALLOC, self._op), raw))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._op = func
        return super().__torch_dispatch__(func, types, args, kwargs)


@dataclass(frozen=True)
class _Sample:
    """One traced step, as `Series` needs it: its storage events (raw bytes), the raw bytes
    of the storages it starts with, its FLOPs (None: not counted), the threads that ran a
    matmul, its skipped-launch note, a model's state bytes, what it warned, and where its
    time is predicted (`Verdict.time`), its ops in order (`ops`; None: not counted)."""

    events: list[tuple[Signature, int]]
    before: list[int]
    flops: int | None
    blas: frozenset[str]
    skipped: str
    state: int | None
    said: str = ""
    ops: tuple[OpCost, ...] | None = None


def _traced(config: Config, flops: bool, layers: int | None = None) -> tuple[_Sample, Callable[[int], int]]:
    """`config`'s step traced on meta with its events logged (and its FLOPs counted: a
    counter costs a model step's trace half as much again), its model with `layers` blocks
    (None: its own), and what its target's allocator charges a request (`block`)."""
    counter = flop_counter() if flops else None
    costs = Costs.of(config)  # the time rides along: cheaper than a second trace
    traced = trace(config, EventTracker, counter, layers=layers, costs=costs)
    # the events as the step left them: a storage that dies later (a sharded world's model, freed with its world)
    # would log its release into the tracker's list after the trace
    sample = _Sample(list(traced.record.events), traced.record.before, traced.flops, traced.blas, traced.skipped,
                     traced.state_bytes, traced.said, None if costs is None else tuple(costs.sequence))
    return sample, charge(config.device.block_bytes)


@dataclass(frozen=True)
class _Run:
    """A run of events inserted once per step along the axis before template event `at`:
    each event's signature, its bytes at k = 1 (`first`) and their growth per step (`slope`);
    at k, k copies alike."""

    at: int
    signatures: tuple[Signature, ...]
    first: tuple[int, ...]
    slope: tuple[int, ...]


class NotRepeating(Exception):
    """The sampled traces are not one fixed sequence with whole iterations inserted."""


def _insertions(s0: Sequence[object], s1: Sequence[object]) -> list[tuple[int, int, int]]:
    """(position in s0, start in s1, length) of each run of events s1 inserts into s0, each
    a repeat of the events before it in s1 (a loop's extra iteration). `NotRepeating` when
    s1 is not s0 with such runs inserted."""
    found = _align(s0, s1, 0, 0, 0, 0)
    if found is None:
        raise NotRepeating("the longer trace is not the shorter one with repeated runs inserted")
    return found


def _align(s0: Sequence[object], s1: Sequence[object], i: int, j: int, floor_i: int, floor_j: int,
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


def _grown(op: OpCost, df: int, db: int, k: int) -> OpCost:
    """`op` with `k` steps of `df` FLOPs and `db` bytes added."""
    return replace(op, flops=op.flops + k * df, nbytes=op.nbytes + k * db)


class _OpSeries:
    """The ops of three traced samples a step apart along an axis (each in order), aligned as
    their storage events are (`_insertions`, on each op's name, class and precision): a
    template of ops whose FLOPs and bytes are affine in the step, with runs inserted once
    per step between them, whose k copies are alike. `ops(k)` counts what a trace at k steps
    would, in time independent of k; `sequence(k)` writes it out in order. `NotRepeating`
    where the ops do not repeat so."""

    def __init__(self, o0: Sequence[OpCost], o1: Sequence[OpCost], o2: Sequence[OpCost]) -> None:
        sig0, sig1, sig2 = ([(op.op, op.kind, op.precision) for op in o] for o in (o0, o1, o2))
        # in order: a template op (at the first value, its FLOPs and bytes per step), or a run (a list of those,
        # at k = 1)
        self._items: list[tuple[OpCost, int, int] | list[tuple[OpCost, int, int]]] = []
        at2 = j1 = position = 0
        for at, start, length in [*_insertions(sig0, sig1), (len(sig0), len(sig1), 0)]:
            for i in range(position, at):
                if at2 == len(sig2):
                    raise NotRepeating("the third trace ends before the pattern of its ops does")
                a, b, c = o0[i], o1[i + j1], o2[at2]
                df, db = b.flops - a.flops, b.nbytes - a.nbytes
                if sig2[at2] != sig0[i] or _grown(a, df, db, 2) != c:
                    raise NotRepeating(f"op {i} is not affine along the axis")
                self._items.append((a, df, db))
                at2 += 1
            position = at
            if not length:
                break
            once, twice = o1[start:start + length], o2[at2:at2 + 2 * length]
            if tuple(sig2[at2:at2 + 2 * length]) != tuple(sig1[start:start + length]) * 2 \
                    or twice[:length] != twice[length:]:
                raise NotRepeating(f"the ops inserted at op {at} are not repeated")
            self._items.append([(a, b.flops - a.flops, b.nbytes - a.nbytes)
                                for a, b in zip(once, twice[:length], strict=True)])
            at2 += 2 * length
            j1 += length
        if at2 != len(sig2):
            raise NotRepeating("the third trace has ops the pattern lacks")

    def ops(self, k: int) -> Counter[OpCost]:
        """The ops at k steps from the first value, each with how often it runs."""
        found: Counter[OpCost] = Counter()
        for item in self._items:
            if isinstance(item, tuple):
                found[_grown(*item, k)] += 1
            else:  # a run: k copies of its ops as they are at k
                for op, df, db in item:
                    found[_grown(op, df, db, k - 1)] += k
        return found

    def sequence(self, k: int) -> tuple[OpCost, ...]:
        """The ops at k steps from the first value, in order."""
        out: list[OpCost] = []
        for item in self._items:
            if isinstance(item, tuple):
                out.append(_grown(*item, k))
            else:
                out += [_grown(op, df, db, k - 1) for op, df, db in item] * k
        return tuple(out)


class Series:
    """Three traced samples of a step along one axis (a batch in sequences, or a model's
    blocks) at `first`, `first + period` and `first + 2·period`, aligned: any value `first +
    k·period` (k ≥ 0) is answered from them (`reading`; `sample` writes its events out).
    `NotRepeating` when they do not repeat as the module says. `same_bytes`: along this axis
    an event's bytes do not change, so the traces are aligned on them too (an optimizer's
    loop over parameters repeats its ops every parameter, its bytes every block)."""

    def __init__(self, samples: Sequence[_Sample], block: Callable[[int], int], device: devices.Device, first: int,
                 period: int, same_bytes: bool = False) -> None:
        self.block, self._device, self.first, self.period = block, device, first, period
        s0, s1, s2 = samples
        if len({(s.blas, s.skipped) for s in samples}) != 1:
            raise NotRepeating("the traces differ in what they launch")
        sig0, sig1, sig2 = (s.events if same_bytes else [e[0] for e in s.events] for s in samples)
        inserted = _insertions(sig0, sig1)
        runs, at2, j1 = [], 0, 0  # index into s2 while walking s0 with each run doubled
        template_slope = []
        position = 0
        for at, start, length in [*inserted, (len(sig0), len(sig1), 0)]:
            for i in range(position, at):  # template events before this run
                if at2 == len(sig2):
                    raise NotRepeating("the third trace ends before the pattern does")
                v0, v1, v2 = s0.events[i][1], s1.events[i + j1][1], s2.events[at2][1]
                if sig2[at2] != sig0[i] or v2 - v1 != v1 - v0:
                    raise NotRepeating(f"event {i} is not affine along the axis")
                template_slope.append(v1 - v0)
                at2 += 1
            position = at
            if not length:
                break
            keys = tuple(sig1[start:start + length])
            signatures = tuple(sig for sig, _ in s1.events[start:start + length])
            once = [v for _, v in s1.events[start:start + length]]
            twice = [v for _, v in s2.events[at2:at2 + 2 * length]]
            if tuple(sig2[at2:at2 + 2 * length]) != keys * 2 or twice[:length] != twice[length:]:
                raise NotRepeating(f"the run inserted at event {at} is not repeated")
            slope = tuple(t - o for t, o in zip(twice[:length], once, strict=True))
            runs.append(_Run(at, signatures, tuple(once), slope))
            at2 += 2 * length
            j1 += length
        if at2 != len(sig2):
            raise NotRepeating("the third trace has events the pattern lacks")
        self._template = s0.events
        self._template_slope = template_slope
        self._ops: _OpSeries | None = None  # the ops, where counted and repeating (else no time is predicted)
        if all(s.ops is not None for s in samples):
            with contextlib.suppress(NotRepeating):
                self._ops = _OpSeries(*(s.ops or () for s in samples))
        self._runs = runs
        self._samples = samples
        self._before = _Before(*(s.before for s in samples))
        for values in ([s.flops] for s in samples), ([s.state] for s in samples):
            for a, b, c in zip(*values, strict=True):
                if (a is None) != (c is None) or a is not None and (b is None or c - b != b - a):
                    raise NotRepeating("the FLOPs or the model state are not affine along the axis")

    def _k(self, value: int) -> int:
        k, rest = divmod(value - self.first, self.period)
        if rest or k < 0:
            raise ValueError(f"{value} is not {self.first} + k·{self.period}")
        return k

    def peak_delta(self, value: int) -> int:
        """The highest the step's own storages reach above what it starts with at `value`
        (bytes, as the target's allocator charges them)."""
        k, block = self._k(value), self.block
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
        block, step, high = self.block, 0, 0
        for (kind, _), first, slope in zip(run.signatures, run.first, run.slope, strict=True):
            step += _signed(kind, block(first + (k - 1) * slope))
            high = max(high, step)
        return level + k * step, max(peak, level + high + (k - 1) * max(step, 0))

    def _affine(self, values: Sequence[Number | None], k: int) -> Number | None:
        a, b = values[0], values[1]
        return None if a is None or b is None else a + k * (b - a)

    def reading(self, value: int) -> tuple[MemoryReading, int | None]:
        """The predicted reading of the step at `value` (as `trace.predict_peak` gives it) and
        its FLOPs (None when they cannot be counted)."""
        k, s0 = self._k(value), self._samples[0]
        target = self._device
        base = self._before.charged(k, target.block_bytes) + target.workspace_bytes * len(s0.blas)
        state = self._affine([s.state for s in self._samples], k)
        flops = self._affine([s.flops for s in self._samples], k)
        time_ms = None if self._ops is None else time_of(self._ops.ops(k), self._device)
        return MemoryReading(base, base + self.peak_delta(value), PREDICTED, state, note=note(s0.skipped, s0.said),
                             time_ms=time_ms), flops

    def sample(self, value: int) -> _Sample:
        """The step at `value` as its own trace would log it, written out from the pattern
        (raw bytes: the allocator's rounding is applied by whoever reads them)."""
        k = self._k(value)
        events: list[tuple[Signature, int]] = []
        runs = iter(self._runs)
        run = next(runs, None)
        for i, (signature, v0) in enumerate([*self._template, (None, 0)]):
            while run is not None and run.at == i:
                events += [(sig, first + (k - 1) * slope)
                           for sig, first, slope in zip(run.signatures, run.first, run.slope, strict=True)] * k
                run = next(runs, None)
            if signature is not None:
                events.append((signature, v0 + k * self._template_slope[i]))
        s0 = self._samples[0]
        return _Sample(events, self._before.raw(k), self._affine([s.flops for s in self._samples], k), s0.blas,
                       s0.skipped, self._affine([s.state for s in self._samples], k), s0.said,
                       None if self._ops is None else self._ops.sequence(k))


class _Before:
    """The storages a step starts with, along an axis: the same storages with bytes affine
    in k (the batch's inputs), or the first sample's plus the same storages added at each
    step (a model's blocks' parameters and optimizer state)."""

    def __init__(self, b0: list[int], b1: list[int], b2: list[int]) -> None:
        self._first = b0
        if len(b0) == len(b1) == len(b2):
            if any(c - b != b - a for a, b, c in zip(b0, b1, b2, strict=True)):
                raise NotRepeating("the inputs are not affine along the axis")
            self._slope, self._added = [b - a for a, b in zip(b0, b1, strict=True)], []
            return
        c0, c1, c2 = Counter(b0), Counter(b1), Counter(b2)
        if c1 - c0 != c2 - c1 or c0 - c1 or c1 - c2:
            raise NotRepeating("the storages a step starts with do not grow by the same ones each step")
        self._slope, self._added = [0] * len(b0), sorted((c1 - c0).elements())

    def raw(self, k: int) -> list[int]:
        """Each storage's raw bytes at `k`."""
        return [a + k * s for a, s in zip(self._first, self._slope, strict=True)] + self._added * k

    def charged(self, k: int, block: Callable[[int], int]) -> int:
        """Their bytes at `k` as the target's allocator charges them, in time independent of k."""
        added = k * sum(block(n) for n in self._added)
        return sum(block(a + k * s) for a, s in zip(self._first, self._slope, strict=True)) + added


def _signed(kind: str, nbytes: int) -> int:
    return nbytes if kind == ALLOC else -nbytes


def period(config: Config) -> int | None:
    """The step along `config`'s batch axis (`size`) that adds whole iterations to its loops
    and keeps its last chunk as it is, or None when its step is not declared affine in the
    rows (`Variant.affine_in_rows`), or its model is a user's build or has more than
    `WRITTEN_OUT` blocks (a batch series' samples are written out block by block)."""
    config = traced_as(config)
    if not variants.of(config).affine_in_rows:
        return None
    if config.has_model:
        spec = model_mod.of(config).spec
        if spec is None or spec.n_layers > WRITTEN_OUT:
            return None
    chunk = config.ce_chunk
    if not config.has_model:
        return chunk or 1
    return chunk // math.gcd(chunk, config.context) if chunk else 1


def traced_as(config: Config) -> Config:
    """The point whose step is `config`'s, op for op (`Variant.traced_as`: torch-lce-auto at N
    rows is torch-lce at the chunk torch picks for N, so it is extrapolated too)."""
    return variants.own(config).traced_as(config)


def size(config: Config) -> int:
    """Where `config` lies along its batch axis: a model's step in sequences (its blocks see
    them), a loss alone in rows, N (it sees nothing else, so a context of 100,000 tokens does
    not make a period of whole sequences and whole chunks millions of rows long)."""
    return config.batch if config.has_model else config.tokens


def _sized(config: Config, value: int) -> Config:
    """`config` at `value` along its batch axis (`size`): a loss alone as N rows of context 1."""
    return replace(config, batch=value) if config.has_model else replace(config, batch=value, context=1)


def layers(config: Config) -> int | None:
    """The blocks of `config`'s model when a step of it is cheaper extrapolated along them than
    traced whole (a preset or config.json model with `LAYERS + 2 + WORTH_LAYERS` or more),
    else None. Every variant's step qualifies: its loss runs once, after the blocks."""
    if not config.has_model:
        return None
    spec = model_mod.of(config).spec
    return spec.n_layers if spec is not None and spec.n_layers >= _first_layers(config) + 2 + WORTH_LAYERS else None


def _first_layers(config: Config) -> int:
    """Blocks in the smallest sample along `config`'s model's blocks."""
    return SHARDED_LAYERS if config.world.sharded else LAYERS


def series(config: Config, flops: bool = True) -> Series | None:
    """The `Series` along the batch that answers `config` at `size(config)` (with its FLOPs
    unless `flops` is False), or None when there is none: not declared affine, the batch
    below the samples, or traces that do not repeat. Shared by every batch of the same
    point and residue (`fit` asks many)."""
    config = traced_as(config)
    step = period(config)
    if step is None:
        return None
    value = size(config)
    first = value % step + SAMPLES * step
    if value < first:
        return None
    return _batch_series(_sized(config, first), step, flops)


@functools.lru_cache(maxsize=64)
def _batch_series(config: Config, step: int, flops: bool) -> Series | None:
    try:
        first = size(config)
        pairs = [_sampled(_sized(config, first + k * step), flops) for k in range(3)]
        return Series([sample for sample, _ in pairs], pairs[0][1], config.device, first, step)
    except NotRepeating:
        return None


@functools.lru_cache(maxsize=64)
def _layer_series(config: Config, flops: bool) -> Series | None:
    try:
        first = _first_layers(config)
        pairs = [_traced(config, flops, first + k) for k in range(3)]
        return Series([sample for sample, _ in pairs], pairs[0][1], config.device, first, 1, same_bytes=True)
    except NotRepeating:
        return None


def _sampled(config: Config, flops: bool) -> tuple[_Sample, Callable[[int], int]]:
    """`config`'s step as a trace logs it: written out from its model's blocks' `Series`
    where that is cheaper, else traced whole."""
    blocks = layers(config)
    found = None if blocks is None else _layer_series(config, flops)
    if blocks is None or found is None:
        return _traced(config, flops)
    return found.sample(blocks), found.block


def predicted(config: Config, *, flops: bool = True, shared: bool = False) -> tuple[MemoryReading, int | None]:
    """`config`'s predicted reading and FLOPs (None when not counted: `flops` False, or a
    step they cannot be counted in): from its batch `Series` when that is cheaper than one
    trace (chunks, and a batch `WORTH` periods beyond the samples' first), or whenever it
    exists if `shared` (one of many batches of the same point, as `fit` asks: they share
    its traces); else from its model's blocks' `Series`; else from one whole trace."""
    config = traced_as(config)
    step, value = period(config), size(config)
    if step is not None and (shared or config.ce_chunk and value >= value % step + (SAMPLES + WORTH) * step):
        found = series(config, flops)
        if found is not None:
            return found.reading(value)
    blocks = layers(config)
    by_layers = None if blocks is None else _layer_series(config, flops)
    if blocks is not None and by_layers is not None:
        return by_layers.reading(blocks)
    counter = flop_counter() if flops else None
    reading = predict_peak(config, counter)
    return reading, None if counter is None else counted(counter)

