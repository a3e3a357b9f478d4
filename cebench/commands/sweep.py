"""A sweep as a library call: the grid planned (shard, resume, what cannot run here), then
measured point by point, in process or each point in a fresh one, each row written to the
CSV as it is measured. `cebench sweep` parses its options into a `Sweep` and renders what
it yields; nothing here prints."""
from __future__ import annotations

import contextlib
import difflib
import functools
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cebench.commands import arguments
from cebench.core import devices
from cebench.core.axes import AXES
from cebench.core.config import Config, Settings
from cebench.core.errors import InputWarning, UsageError
from cebench.core.guard import time_limit, user_code
from cebench.core.shard import Shard, from_env, parse
from cebench.engine import support
from cebench.losses import variants
from cebench.models import model as model_mod
from cebench.run import plan as plan_mod
from cebench.run import shard as shard_mod
from cebench.run.grid import Grid, GridOptions
from cebench.run.isolate import Child, wait_s
from cebench.run.plan import Plan
from cebench.store.files import Lock, ResultWriter, check_out, done_keys, one_kind, point_key, read_rows
from cebench.store.schema import Result, Status

POINT_TIMEOUT_S = 1800.0  # seconds an isolated point may run by default (a 1B-setting compile takes minutes)
RATE_TIMEOUT_S = 300.0  # seconds the pre-sweep matmul-rate probe may take in a child process
MAX_STEPS = 10_000  # --repeats and --warmup at most: every timed step is kept, in memory and in its CSV cell
THREADS_PER_CPU = 4  # --threads at most this many per CPU here (torch crashes on absurd counts)


def _in_process(variant: str) -> contextlib.AbstractContextManager[None]:
    """Run `variant` in the sweep's own process: its exits are a `UsageError` naming it (and
    whatever user code ran inside it), the rows before it kept (`cebench.core.guard`)."""
    return user_code(variant, "variant", where="the sweep's own process", ends="the sweep",
                     hint="measure it with --isolate (each point in a fresh process, where that is an error row)")


@dataclass(frozen=True)
class Estimate:
    """A floor on a sweep's time: the matmul work of every step at `rates` (FLOP/s per
    dtype, measured now), in `floor_s` seconds, plus `compilations` torch.compile calls."""

    floor_s: float
    rates: Mapping[str, float]
    compilations: int


class Sweep:
    """One sweep, planned when made and measured when iterated (each `Result` is yielded
    after it is written to `path`).

    `options` is the grid as given (`GridOptions`); `device` 'auto', 'cpu' or 'cuda';
    `repeats`/`warmup` default to the device's; `threads` fixes torch's intra-op threads;
    `shard` is 'INDEX/COUNT' or a `Shard` (None: from torchrun/SLURM in `environ`, else the
    whole grid); `out` the CSV (None: results/sweep-<time>.csv), appended to when it exists;
    `overwrite` replaces it instead (its rows dropped when the first new row is written);
    `resume` skips the points `out` holds as ok or oom; `isolate` measures each point in a
    fresh process (None: the device's default; a `point_timeout` in seconds turns it on;
    above `guard.NO_LIMIT_S`, or inf, there is no limit). A point whose model is sharded
    (`fsdp` > 1) always runs in its ranks, processes of its own, bounded by `point_timeout`
    (default `POINT_TIMEOUT_S`; `ranks_timeout_s`, None for no limit, and `default_timeout`
    whether that is the default); a shard of the sweep starts the ranks of each of its
    sharded points (`cebench.run.ranks`). Bad input is a `UsageError`
    naming the parameter, raised before anything is measured or written. From when it is made (an existing `out`) or
    first iterated (a new one) to its last row, it holds `out`'s `Lock`: a second process
    writing that file is refused.
    """

    def __init__(self, options: GridOptions | None = None, *, device: str = "auto", repeats: int | None = None,
                 warmup: int | None = None, threads: int | None = None, shard: str | Shard | None = None,
                 out: Path | str | None = None, resume: bool = False, overwrite: bool = False,
                 isolate: bool | None = None, point_timeout: float | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        options = options or GridOptions()
        environ = os.environ if environ is None else environ
        device = arguments.name(device, "device")
        out = None if out is None else arguments.path(out, "out")
        point_timeout = arguments.seconds(point_timeout)
        with time_limit(point_timeout):  # a user's build the grid resolves here is bounded too
            options.grid("cpu")  # every grid option checked before device 'auto' imports torch to look for a GPU
        self.shard = _whose_shard(shard, environ)
        _check_options(out=out, resume=resume, overwrite=overwrite, isolate=isolate, point_timeout=point_timeout,
                       threads=threads, warmup=warmup, repeats=repeats)
        self.device = devices.target(device, here=True)
        grid = options.grid(self.device.name)
        self.settings = Settings(warmup=self.device.warmup if warmup is None else warmup,
                                 repeats=self.device.repeats if repeats is None else repeats)
        self.isolate = point_timeout is not None or (self.device.isolate_by_default if isolate is None else isolate)
        self.timeout_s = (point_timeout or POINT_TIMEOUT_S) if self.isolate else None
        # a sharded point's ranks are processes of their own, bounded as an isolated point is (None: unbounded)
        self.ranks_timeout_s = wait_s(self.timeout_s if self.isolate else POINT_TIMEOUT_S)
        self.default_timeout = point_timeout is None  # the limit is POINT_TIMEOUT_S, the default
        done, refused = self._take_csv(out, grid, resume=resume, overwrite=overwrite, environ=environ)
        _check_no_process_group(grid)
        _set_threads(threads)
        self.threads = threads
        self.device_index = self._take_gpu(environ)
        self.child = Child(specs=options.specs, threads=threads, device=self.device, device_index=self.device_index)
        everything = grid.expand()
        self.grid_id = plan_mod.grid_id(everything)
        self.grid, self.unsupported = grid.runnable(smoke=False)
        # user variants that crash or hang on the smoke test's tiny problem (name → how): their points fail
        self.crashed: dict[str, str] = self._smoke_test()
        if not self.grid.variants:
            why = "; ".join(f"{name}: {reason}" for name, reason in self.unsupported.items())
            raise UsageError(f"no variant of the sweep can run on {self.device.name} here ({why})", "variant")
        # a point the CSV holds as unsupported is measured again only where it can run now (a peer installed since)
        done |= {key for p in everything if (key := point_key(p)) in refused and support.verdict(p).run is not None}
        self.plan: Plan = plan_mod.make(everything, self.shard, done, self.settings.warmup, self.settings.repeats)
        self.points: list[Config] = [p for p in self.plan.points if p.variant.name not in self.unsupported]
        self.warnings: list[str] = []  # what opening the CSV found (a cut-off row, an older header)
        self.written: list[Result] = []
        self._writer: ResultWriter | None = None

    def _take_csv(self, out: Path | str | None, grid: Grid, *, resume: bool, overwrite: bool,
                  environ: Mapping[str, str]) -> tuple[set[tuple[str, ...]], set[tuple[str, ...]]]:
        """Set `path` (and `where`: a line saying where it went), refuse a CSV this sweep cannot write,
        lock an existing one and read its rows: the keys of its points already done, and of those
        it holds as unsupported (with `resume`; else none)."""
        self.path, self.where = shard_mod.out_path(None if out is None else Path(out), self.shard, environ)
        header = check_out(self.path)  # a foreign or unwritable CSV is refused before torch is even imported
        # --overwrite: the file is replaced by the first new row (`ResultWriter`); until then it is only locked,
        # so bad input, a refusal, a crash or a kill before that row leaves it as it was.
        self._replace = overwrite and header is not None
        old = None if overwrite else header
        _check_header(self.path, old, grid)
        # This process alone writes the CSV from here on (`Lock`): a second sweep of it is refused, so
        # that two --resume runs never measure a point twice.
        self._lock = Lock(self.path) if header is not None else None
        rows = read_rows(self.path) if old is not None else None  # a cut-off last row: warned about here
        if rows is not None:
            one_kind(rows, predictions=False)
        done = done_keys(rows) if resume and rows is not None else set()
        refused = done_keys(rows, (Status.UNSUPPORTED,)) if resume and rows is not None else set()
        if resume and header is None and not self.path.exists():
            warnings.warn(InputWarning(_no_such_csv(self.path)), stacklevel=3)  # at the caller of `Sweep(...)`
        return done, refused

    def _take_gpu(self, environ: Mapping[str, str]) -> int | None:
        """The index of the launcher's GPU for this process, made current unless the sweep isolates
        its points (its children take it then); None when there is none to choose, as when the
        launcher shows each task its GPU alone (srun --gpu-bind)."""
        local = self.device.local_index(environ)
        index = local if local is not None and local < self.device.visible() else None
        if index is not None and not self.isolate:
            self.device.select(index)
        return index

    def _smoke_test(self) -> dict[str, str]:
        """Run the users' variants of the grid on a tiny problem, as their points will run. In this
        process one that breaks the contract is a `UsageError`; isolated, those that crash or hang
        are returned (name → how), their points to fail the same way."""
        if self.isolate:
            from cebench.run.runner import smoke_test_isolated

            return smoke_test_isolated(self.grid.variants, self.device, self.child, self.timeout_s)
        for variant in variants.untrusted(self.grid.variants, self.device):
            with _in_process(variant.name):
                variants.smoke_test((variant,), self.device)
        return {}

    def unbounded(self) -> list[str]:
        """The users' variants and model builds whose points run in this process, where nothing
        bounds their time (a hang hangs the sweep), by name: none when the sweep isolates its
        points (a sharded point's ranks are bounded processes of their own)."""
        if self.isolate:
            return []
        here = [p for p in self.points if not p.world.sharded]
        builds = [m.name for m in dict.fromkeys(model_mod.of(p) for p in here if p.has_model) if m.spec is None]
        return [v.name for v in variants.untrusted(dict.fromkeys(map(variants.own, here)), self.device)] + builds

    def estimate(self) -> Estimate | None:
        """A floor on the time the points take (`Estimate`), from the rate a square matmul of
        each dtype reaches on the device now; None when a rate could not be measured."""
        from cebench.run import isolate as isolate_mod

        rates: dict[str, float] = {}
        dtypes = dict.fromkeys(p.dtype for p in self.points)
        for dtype in dtypes:
            if not self.isolate:
                rates[dtype] = plan_mod.matmul_rate(self.device, dtype)
            elif (outcome := isolate_mod.call(plan_mod.matmul_rate, (self.device, dtype), self.child,
                                              RATE_TIMEOUT_S)).value:
                rates[dtype] = outcome.value
        if not self.points or len(rates) < len(dtypes):
            return None
        compiled = sum(variants.own(p).compiles for p in self.points)
        return Estimate(plan_mod.estimate_s(self.points, self.settings.warmup, self.settings.repeats, rates), rates,
                        compiled)

    def _measure(self) -> Callable[[Config], Result]:
        from cebench.run.runner import isolated, run

        if self.isolate:
            return isolated(self.child, self.settings, self.timeout_s)
        return functools.partial(run, settings=self.settings, child=self.child, timeout_s=self.ranks_timeout_s)

    def open(self) -> list[str]:
        """Open the CSV for appending (`__iter__` does it when not done yet; a cut-off last
        row is cut from it then, with an `InputWarning`) and return what opening it found:
        an older header whose rows lack columns. With `overwrite`, the file is replaced by its first
        new row (`ResultWriter`: until then it is as it was)."""
        if self._writer is None:
            # (a cut-off last row cut from the file; replaced: the file is as it was until the first row)
            self._writer = ResultWriter(self.path, self._lock, quiet=True, replace=self._replace)
            if self._writer.dropped:
                self.warnings.append(f"{self.path} was written by an older cebench: its rows will lack "
                                     f"{', '.join(self._writer.dropped)}; use a new CSV to keep them")
        return self.warnings

    def __iter__(self) -> Iterator[Result]:
        """Measure each point, write its row to `path` (flushed) and yield it. A failing
        write is a `UsageError`, every earlier row kept."""
        if not self.points:
            if self._lock is not None:
                self._lock.close()
            return
        self.open()
        assert self._writer is not None
        with self._writer as writer, devices.frozen_heap():
            measure = self._measure()
            for point in self.points:
                if self.isolate:
                    result = measure(point)
                else:
                    with _in_process(point.variant.name):
                        result = measure(point)
                result.shard = self.shard.label if self.shard else ""
                result.grid = self.grid_id
                writer.write(result)
                self.written.append(result)
                yield result


def _no_such_csv(path: Path) -> str:
    """'--resume: <path> does not exist …', with the name of a CSV beside it that is close."""
    try:
        stems = {p.stem: p for p in path.parent.glob(f"*{path.suffix}")} if path.parent.is_dir() else {}
    except OSError:
        stems = {}
    close = difflib.get_close_matches(path.stem, list(stems), n=1, cutoff=0.75)
    hint = f" (did you mean {stems[close[0]]}?)" if close else ""
    return f"--resume: {path} does not exist{hint}: every point is measured, into a new CSV"


def _whose_shard(shard: str | Shard | None, environ: Mapping[str, str]) -> Shard | None:
    """The sweep's shard: `shard` parsed from 'INDEX/COUNT', else the launcher's (torchrun, SLURM:
    `environ`); None for the whole grid (no shard, or 0/1)."""
    if isinstance(shard, str):
        shard = parse(shard)
    elif shard is None:
        shard = from_env(environ)
    elif not isinstance(shard, Shard):
        raise UsageError(f"must be text such as '0/4' or a Shard, not {type(shard).__name__} {shard!r}", "shard")
    return shard if shard is None or shard.count > 1 else None


def _check_options(*, out: Path | str | None, resume: bool, overwrite: bool, isolate: bool | None,
                   point_timeout: float | None, threads: int | None, warmup: int | None, repeats: int | None) -> None:
    """A `UsageError` for options that do not go together or are out of range (`Sweep`'s)."""
    if point_timeout is not None and isolate is False:
        raise UsageError("needs --isolate (a point in the sweep's own process cannot be stopped)", "point_timeout")
    if resume and out is None:
        raise UsageError("needs --out: the CSV of the sweep to resume", "resume")
    if overwrite and out is None:
        raise UsageError("needs --out: the CSV to replace", "overwrite")
    if overwrite and resume:
        raise UsageError("not with --resume, which keeps the rows of --out that --overwrite drops", "overwrite")
    if threads is not None and not 1 <= arguments.count(threads, "threads") <= THREADS_PER_CPU * (os.cpu_count() or 1):
        raise UsageError(f"must be from 1 to {THREADS_PER_CPU} × the {os.cpu_count() or 1} CPUs here", "threads")
    for name, steps in (("warmup", warmup), ("repeats", repeats)):
        if steps is not None and not 1 <= arguments.count(steps, name) <= MAX_STEPS:
            raise UsageError(f"must be from 1 to {MAX_STEPS:,} (every timed step is kept)", name)


def _check_header(path: Path, header: tuple[str, ...] | None, grid: Grid) -> None:
    """A `UsageError` when the CSV at `path`, to be appended to (`header`: its columns; None: a new
    or replaced file), lacks the column of an axis that `grid` sets off its old value: its rows
    would read back as the old value, so they are refused rather than mislabelled."""
    if header is None:
        return
    for axis in AXES:
        if axis.name not in header and any(v != axis.off for v in grid.values[axis.name]):
            raise UsageError(f"{path} was written by an older cebench, without a {axis.name} column: "
                             f"rows with {axis.name} other than {axis.text(axis.off)} need a new CSV", "out")


def _check_no_process_group(grid: Grid) -> None:
    """Import torch; a `UsageError` when `grid` has sharded points (`fsdp` > 1) and this process
    is already in torch.distributed's process group (their ranks need one of their own)."""
    import torch

    if any(n > 1 for n in grid.values["fsdp"]) and torch.distributed.is_available() \
            and torch.distributed.is_initialized():
        raise UsageError("a sharded point's ranks are processes the sweep starts, in a process group of their "
                         "own: run the sweep outside torch.distributed's (torchrun's ranks may shard it)", "fsdp")


def _set_threads(threads: int | None) -> None:
    """Fix torch's intra-op threads at `threads` (None: leave torch's own choice)."""
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def sweep(*, device: str = "auto", repeats: int | None = None, warmup: int | None = None,
          threads: int | None = None, shard: str | None = None, out: Path | str | None = None, resume: bool = False,
          overwrite: bool = False, isolate: bool | None = None, point_timeout: float | None = None,
          **grid: Any) -> list[Result]:
    """Measure the grid: one `Result` per point, each also appended to the CSV `out`
    (default results/sweep-<time>.csv; `overwrite`: replacing it). The options are `Sweep`'s;
    iterate a `Sweep` for the rows one at a time as they are measured."""
    return list(Sweep(GridOptions(**grid), device=device, repeats=repeats, warmup=warmup, threads=threads,
                      shard=shard, out=out, resume=resume, overwrite=overwrite, isolate=isolate,
                      point_timeout=point_timeout))


__all__ = ["Estimate", "Sweep", "sweep"]
