"""`cebench sweep`: measure the grid, append each row to a CSV, print the table."""
from __future__ import annotations

import functools
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from cebench.cli.app import command, err, out, print_table
from cebench.cli.options import (Batch, CeChunk, Columns, Context, DModel, Dtype, Temperature, VariantNames,
                                 Vocab, Wide, Workload)
from cebench.run import shard as shard_mod
from cebench.core.config import Config, Settings
from cebench.core.errors import UsageError
from cebench.core.grid import DEFAULTS, GridOptions, resolve_device, split

if TYPE_CHECKING:
    from cebench.run.isolate import Child
    from cebench.run.plan import Plan
    from cebench.store.results import Result

POINT_TIMEOUT_S = 1800.0  # seconds an isolated point may run by default (a 1B-setting compile takes minutes)
RATE_TIMEOUT_S = 300.0  # seconds the pre-sweep matmul-rate probe may take in a child process


def _label(c: Config) -> str:
    chunk = f" ce_chunk={c.ce_chunk}" if c.ce_chunk else ""
    return f"{c.variant} {c.dtype} b={c.batch} ctx={c.context} V={c.vocab} d={c.d_model}{chunk}"


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (a batch scheduler's time limit, `kill`)."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


@command()
def sweep(
    ctx: typer.Context,
    batch: Batch = None,
    context: Context = None,
    vocab: Vocab = None,
    d_model: DModel = None,
    ce_chunk: CeChunk = None,
    variant: VariantNames = None,
    workload: Workload = None,
    temperature: Temperature = 0.9,
    dtype: Dtype = None,
    device: str = typer.Option("auto", help="auto, cpu or cuda (auto: cuda when a GPU is visible)."),
    repeats: int = typer.Option(None, help="Timed steps per point. Default: cpu 4; cuda 20."),
    warmup: int = typer.Option(None, help="Untimed steps before measuring, ≥ 1 (compilation happens here). "
                                          "Default: cpu 1; cuda 3."),
    threads: int = typer.Option(None, help="torch intra-op threads, fixed for the run and recorded. "
                                           "Default: torch's own choice."),
    out_path: Path = typer.Option(None, "--out", metavar="CSV", show_default=False,
                                  help="CSV to write; an existing cebench CSV is appended to. `{shard}` in it "
                                       "becomes INDEX-of-COUNT. Default: results/sweep-\\<time\\>.csv "
                                       "(in a shard: results/sweep-\\<run id\\>-shard-\\<I\\>-of-\\<N\\>.csv)."),
    shard_spec: str = typer.Option(None, "--shard", metavar="INDEX/COUNT", show_default=False,
                                   help="Measure only shard INDEX of COUNT (from 0): a deterministic share of "
                                        "the grid balanced by cost, every point in exactly one shard. Default: "
                                        "from torchrun (RANK of WORLD_SIZE, on cuda:LOCAL_RANK) or SLURM "
                                        "(SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT; else srun's "
                                        "SLURM_PROCID of SLURM_STEP_NUM_TASKS), else the whole grid."),
    resume: bool = typer.Option(False, "--resume", help="Skip every point that already has an ok or oom row in "
                                                        "--out (run again what errored, timed out or is missing)."),
    isolate: Optional[bool] = typer.Option(None, "--isolate/--no-isolate", show_default=False,
                                           help="Measure each point in a fresh process: a crash, a hang or a "
                                                "poisoned CUDA context becomes a row and the next point starts "
                                                "clean. Default: on for cuda, off for cpu."),
    point_timeout: float = typer.Option(None, "--point-timeout", metavar="SECONDS", show_default=False,
                                        help="With --isolate (which it turns on): a point still running after "
                                             "this long, process start-up included, is killed and written as "
                                             f"a timeout row. Default: {POINT_TIMEOUT_S:g}."),
    wide: Wide = False,
    columns: Columns = None,
) -> None:
    """Measure peak memory and step time of every variant over the grid of sizes.

    Each list option takes comma-separated values; the grid is their cartesian product,
    chunked variants also over --ce-chunk. Each row is written to the CSV as soon as it is
    measured; an oom, error or timeout is recorded as a row and the sweep goes on.
    """
    options = GridOptions.from_params(ctx.params)
    options.grid("cpu")  # every option checked before `--device auto` imports torch to look for a GPU
    shard = shard_mod.parse(shard_spec) if shard_spec is not None else shard_mod.from_env(os.environ)
    shard = shard if shard is None or shard.count > 1 else None  # 0/1 is the whole grid
    if point_timeout is not None and not point_timeout > 0:
        raise UsageError(f"--point-timeout: {point_timeout:g} must be a positive number of seconds")
    if point_timeout is not None and isolate is False:
        raise UsageError("--point-timeout needs --isolate (a point in the sweep's own process cannot be stopped)")
    if resume and out_path is None:
        raise UsageError("--resume needs --out: the CSV of the sweep to resume")
    grid = options.grid(resolve_device(device))
    d = DEFAULTS[grid.device]
    warmup = d.warmup if warmup is None else warmup
    repeats = d.repeats if repeats is None else repeats
    if warmup < 1 or repeats < 1:
        raise UsageError("--warmup and --repeats must be at least 1")
    if threads is not None and threads < 1:
        raise UsageError("--threads must be at least 1")
    isolate = point_timeout is not None or (grid.device == "cuda" if isolate is None else isolate)
    timeout_s = (point_timeout or POINT_TIMEOUT_S) if isolate else None
    path, where = shard_mod.out_path(out_path, shard, os.environ)

    from cebench.store.results import check_out, done_keys

    check_out(path)  # a foreign or unwritable --out is refused before torch is even imported
    done = done_keys(path) if resume else set()

    import torch

    from cebench.run import plan as plan_mod
    from cebench.run.isolate import Child
    from cebench.render.report import results_table
    from cebench.store.results import ResultWriter, to_frame
    from cebench.run.runner import isolated, run, smoke_test_isolated

    if threads is not None:
        torch.set_num_threads(threads)
    # The launcher's GPU for this process, unless it shows each task its GPU alone (srun --gpu-bind).
    local = shard_mod.local_index(os.environ) if grid.device == "cuda" else None
    cuda_index = local if local is not None and local < torch.cuda.device_count() else None
    if cuda_index is not None and not isolate:  # an isolated sweep leaves CUDA to its children
        torch.cuda.set_device(cuda_index)
    child = Child(specs=tuple(split(variant, "--variant")) if variant else (), threads=threads, cuda_index=cuda_index)
    settings = Settings(warmup=warmup, repeats=repeats)
    signal.signal(signal.SIGTERM, _terminate)  # a scheduler's kill ends the sweep as Ctrl-C does
    everything = grid.expand()
    grid, unsupported = grid.runnable(smoke=not isolate)
    for name, reason in unsupported.items():
        err.print(f"not run on {grid.device} here: {name}: {reason}", style="yellow", highlight=False)
    if isolate:  # a user's variant that crashes on the tiny problem must not take the sweep down either
        for name, how in smoke_test_isolated(grid.variants, grid.device, child, timeout_s).items():
            err.print(f"warning: --variant {name}: on the smoke test's tiny problem, {how}; its points will fail "
                      "the same way, one row each", style="yellow", highlight=False)
    plan = plan_mod.make(everything, shard, done, warmup, repeats)
    points = [p for p in plan.points if p.variant not in unsupported]
    if not grid.variants:
        raise UsageError(f"no variant of the sweep can run on {grid.device} here")
    if where:
        err.print(where, highlight=False)
    _announce(plan, points, grid.device, path, settings, child if isolate else None)
    if not points:
        why = f"every point of this shard is already in {path}" if plan.in_shard else "this shard has no points"
        out.print(f"nothing to measure: {why}", highlight=False)
        return
    tag = f"[shard {shard.label}] " if shard else ""
    rows: list[Result] = []
    with ResultWriter(path) as writer, _Progress(len(points), tag) as progress:
        if writer.repaired:
            err.print(f"warning: {path}: its last row was cut off (a crash or a full disk?) and is dropped: "
                      f"{writer.repaired[:120]}", style="yellow", highlight=False)
        if writer.dropped:
            err.print(f"warning: {path} was written by an older cebench: its rows will lack "
                      f"{', '.join(writer.dropped)}; use a new --out to keep them", style="yellow", highlight=False)
        measure = isolated(child, settings, timeout_s) if isolate else functools.partial(run, settings=settings)
        try:
            for point in points:
                progress.start(_label(point))
                result = measure(point)
                result.shard = shard.label if shard else ""
                writer.write(result)
                rows.append(result)
                progress.done(_label(point), result)
        except KeyboardInterrupt as exc:
            progress.stop()
            how = "terminated" if isinstance(exc, Terminated) else "interrupted"
            err.print(f"{how}: {len(rows)} of {len(points)} rows kept in {path}", highlight=False, soft_wrap=True)
            raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None
    title = (f"cebench sweep · {grid.device} ({rows[0].device_name}) · {torch.get_num_threads()} threads · "
             f"torch {torch.__version__}" + (f" · shard {shard.label}" if shard else ""))
    print_table(results_table(to_frame(rows), title=title), wide, columns)
    out.print(f"{len(rows)} rows → {path}", highlight=False)


def _announce(plan: Plan, points: list[Config], device: str, path: Path, settings: Settings,
              child: Child | None) -> None:
    """One line before the first point: what the sweep will measure, and a floor on how
    long that takes; a warning for a grid long enough to want shards."""
    from cebench.run import isolate as isolate_mod
    from cebench.run import plan as plan_mod
    from cebench.losses import variants
    from cebench.core.units import format_duration

    parts = [f"{plan.total} points on {device}"]
    if plan.shard:
        parts.append(f"shard {plan.shard.label} ({plan.shard.source}): {plan.in_shard} of them")
    if plan.skipped:
        parts.append(f"--resume: {plan.skipped} already in {path}")
    cannot = plan.in_shard - plan.skipped - len(points)
    parts.append(f"{len(points)} to measure" + (" each in a fresh process" if child else "")
                 + (f" ({cannot} of variants that cannot run here left out)" if cannot else ""))
    rates: dict[str, float] = {}
    dtypes = dict.fromkeys(p.dtype for p in points)
    for dtype in dtypes:
        if child is None:
            rates[dtype] = plan_mod.matmul_rate(device, dtype)
        elif (outcome := isolate_mod.call(plan_mod.matmul_rate, (device, dtype), child, RATE_TIMEOUT_S)).value:
            rates[dtype] = outcome.value
    if points and len(rates) == len(dtypes):
        compiled = sum(variants.get(p.variant).compiled for p in points)
        floor = plan_mod.estimate_s(points, settings.warmup, settings.repeats, rates)
        speeds = ", ".join(f"{r / 1e9:,.0f} GFLOP/s in {d}" for d, r in rates.items())
        parts.append(f"matmul work alone ≥ {format_duration(floor)} at the {speeds} a matmul reaches here now"
                     + f", plus {compiled} compilations" * bool(compiled))
    err.print("sweep: " + " · ".join(parts), highlight=False, soft_wrap=True)
    if plan.total > plan_mod.LONG_SWEEP and (plan.shard is None or plan.shard.count == 1):
        err.print(f"warning: {plan.total} points is a long sweep for one process: split it with torchrun, SLURM or "
                  "--shard (see the README), and --resume it if it stops", style="yellow", highlight=False)


class _Progress:
    """A progress bar with an ETA on a terminal; one plain line per finished point when
    stderr is a log (CI, make, a batch job), so a long sweep is never silent."""

    def __init__(self, total: int, tag: str = "") -> None:
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.total, self.count, self.tag = total, 0, tag  # tag: '[shard I/N] ' in a shard
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("eta"), TimeRemainingColumn(), console=err, transient=True,
                            disable=not err.is_terminal)
        self.task = self.bar.add_task("", total=total)

    def __enter__(self) -> _Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)

    def start(self, label: str) -> None:
        self.bar.update(self.task, description=self.tag + label)

    def done(self, label: str, result: Result) -> None:
        from cebench.core.units import format_bytes, format_ms

        self.count += 1
        self.bar.advance(self.task)
        if err.is_terminal:
            if result.status != "ok":
                err.print(f"{self.tag}{result.status}: {label}: {result.error}", style="yellow", highlight=False)
            return
        detail = (f"ok, peak Δ {format_bytes(result.peak_delta_bytes)}, {format_ms(result.time_ms_median)}"
                  if result.status == "ok" else f"{result.status}: {result.error}")
        err.print(f"{self.tag}[{self.count}/{self.total}] {label}: {detail}", highlight=False, soft_wrap=True)

    def stop(self) -> None:
        self.bar.stop()
