"""`cebench sweep`: measure the grid, append each row to a CSV (or replace it), print the table."""
from __future__ import annotations

import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cebench.cli.app import check_columns, command, err, out, print_table
from cebench.cli.options import (
    DEVICE_HELP,
    TEMPERATURE,
    Columns,
    DeviceAlias,
    MemoryUnit,
    Temperature,
    VariantNames,
    Wide,
    Workload,
    per_device,
    with_axes,
)
from cebench.commands.sweep import POINT_TIMEOUT_S, Sweep
from cebench.core import devices
from cebench.core.axes import SEMANTICS, semantics_label
from cebench.core.config import Config
from cebench.core.guard import Interrupted
from cebench.run.grid import GridOptions

if TYPE_CHECKING:
    from cebench.store.schema import Result


def _label(c: Config) -> str:
    chunk = f" ce_chunk={c.ce_chunk}" if c.ce_chunk else ""
    semantics = semantics_label({a.name: getattr(c, a.name) for a in SEMANTICS})
    return f"{c.variant} {c.dtype} b={c.batch} ctx={c.context} V={c.vocab} d={c.d_model}{chunk}" + (
        f" {semantics}" if semantics else "")


class Terminated(Interrupted):
    """SIGTERM arrived (a batch scheduler's time limit, `kill`)."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


# The options of `cebench sweep` alone (those it shares with other commands are in `cebench.cli.options`).
_Repeats = Annotated[int | None, typer.Option(help=f"Timed steps per point. Default: {per_device('repeats')}.")]
_Warmup = Annotated[int | None, typer.Option(help="Untimed steps before measuring, ≥ 1 (compilation happens here). "
                                                  f"Default: {per_device('warmup')}.")]
_Threads = Annotated[int | None, typer.Option(help="torch intra-op threads, fixed for the run and recorded. "
                                                   "Default: torch's own choice.")]
_Out = Annotated[Path | None, typer.Option(
    "--out", metavar="CSV", show_default=False,
    help="CSV to write; an existing cebench CSV is appended to (see --overwrite). `{shard}` in it becomes "
         "INDEX-of-COUNT. Default: results/sweep-\\<time\\>.csv (in a shard: "
         "results/sweep-\\<run id\\>-shard-\\<I\\>-of-\\<N\\>.csv).")]
_Shard = Annotated[str | None, typer.Option(
    "--shard", metavar="INDEX/COUNT", show_default=False,
    help="Measure only shard INDEX of COUNT (from 0): a deterministic share of the grid balanced by cost, every point "
         "in exactly one shard. Default: from torchrun (RANK of WORLD_SIZE, on cuda:LOCAL_RANK) or SLURM "
         "(SLURM_ARRAY_TASK_ID of SLURM_ARRAY_TASK_COUNT; else srun's SLURM_PROCID of SLURM_STEP_NUM_TASKS), else the "
         "whole grid.")]
_Resume = Annotated[bool, typer.Option("--resume", help="Skip every point that already has an ok or oom row in --out "
                                                        "(run again what errored, timed out or is missing).")]
_Overwrite = Annotated[bool, typer.Option(
    "--overwrite", help="Replace --out rather than append to it (a baseline made again on purpose): its rows "
                        "are dropped when the first new row is written, and kept whatever ends the sweep before. Not "
                        "with --resume.")]
_Isolate = Annotated[bool | None, typer.Option(
    "--isolate/--no-isolate", show_default=False,
    help="Measure each point in a fresh process: a crash, a hang or a poisoned CUDA context becomes a row and the next "
         "point starts clean. Default: " + ", ".join(
             f"{'on' if d.isolate_by_default else 'off'} for {d}" for d in devices.KINDS) + ".")]
_PointTimeout = Annotated[float | None, typer.Option(  # the sweep's: a point killed (options.PointTimeout: a build)
    "--point-timeout", metavar="SECONDS", show_default=False,
    help="With --isolate (which it turns on): a point still running after this long, process start-up included, is "
         "killed and written as a timeout row; a user's model build run while the sweep plans is stopped after it "
         f"too. Default: {POINT_TIMEOUT_S:g}.")]


@command()
@with_axes()
def sweep(
    ctx: typer.Context,
    variant: VariantNames = None,
    workload: Workload = None,
    temperature: Temperature = TEMPERATURE,
    device: str = typer.Option(None, metavar="DEVICE", show_default=False, help=DEVICE_HELP),
    target: DeviceAlias = None,
    repeats: _Repeats = None,
    warmup: _Warmup = None,
    threads: _Threads = None,
    out_path: _Out = None,
    shard_spec: _Shard = None,
    resume: _Resume = False,
    overwrite: _Overwrite = False,
    isolate: _Isolate = None,
    point_timeout: _PointTimeout = None,
    unit: MemoryUnit = None,
    wide: Wide = False,
    columns: Columns = None,
) -> None:
    """Measure peak memory and step time of every variant over the grid of sizes.

    Each list option takes comma-separated values; the grid is their cartesian product,
    chunked variants also over --ce-chunk. Each row is written to the CSV as soon as it is
    measured; an oom, error or timeout is recorded as a row and the sweep goes on.
    """
    device = devices.one_name(device, target, "device", "target", "auto")
    if columns is not None:  # checked before the work, not after a long sweep
        from cebench.render.report import column_keys

        check_columns(columns, column_keys())
    s = Sweep(GridOptions.from_params(ctx.params), device=device, repeats=repeats, warmup=warmup, threads=threads,
              shard=shard_spec, out=out_path, resume=resume, overwrite=overwrite, isolate=isolate,
              point_timeout=point_timeout)
    _tell_plan(s)
    if not s.points:
        why = f"every point of this shard is already in {s.path}" if s.plan.in_shard else "this shard has no points"
        out.print(f"nothing to measure: {why}", highlight=False)
        return
    _measure_points(s, unit)
    _print_results(s, unit, wide, columns)


def _tell_plan(s: Sweep) -> None:
    """On stderr, before the first point: what cannot run here, the users' variants that crashed on
    the smoke test, where the CSV is, and what the sweep will measure (`_announce`)."""
    for name, reason in s.unsupported.items():
        err.print(f"not run on {s.device.name} here: {name}: {reason}", style="yellow", highlight=False)
    for name, how in s.crashed.items():
        err.print(f"warning: --variant {name}: on the smoke test's tiny problem, {how}; its points will fail "
                  "the same way, one row each", style="yellow", highlight=False)
    if s.where:
        err.print(s.where, highlight=False)
    _announce(s)


def _measure_points(s: Sweep, unit: str | None) -> None:
    """Measure every point of `s` into its CSV, with progress on stderr (memory in `unit`). Ctrl-C
    or SIGTERM ends it in one line saying how many rows were kept: exit 130, or 143 for SIGTERM."""
    signal.signal(signal.SIGTERM, _terminate)  # a scheduler's kill ends the sweep as Ctrl-C does
    for warning in s.open():
        err.print(f"warning: {warning}", style="yellow", highlight=False)
    tag = f"[shard {s.shard.label}] " if s.shard else ""
    with _Progress(len(s.points), tag, unit) as progress:
        try:
            progress.start(_label(s.points[0]))
            for i, result in enumerate(s):
                progress.done(_label(s.points[i]), result)
                if i + 1 < len(s.points):
                    progress.start(_label(s.points[i + 1]))
        except KeyboardInterrupt as exc:
            progress.stop()
            how = "terminated" if isinstance(exc, Terminated) else "interrupted"
            err.print(f"{how}: {len(s.written)} of {len(s.points)} rows kept in {s.path}", highlight=False,
                      soft_wrap=True)
            raise typer.Exit(143 if isinstance(exc, Terminated) else 130) from None


def _print_results(s: Sweep, unit: str | None, wide: bool, columns: str | None) -> None:
    """The table of the rows measured (memory in `unit`; `wide`, `columns` as `print_table`'s),
    then where they were written."""
    import torch

    from cebench.render.report import results_table
    from cebench.store.frame import to_frame

    rows = s.written
    title = (f"cebench sweep · {s.device.name} ({rows[0].device_name}) · {torch.get_num_threads()} threads · "
             f"torch {torch.__version__}" + (f" · shard {s.shard.label}" if s.shard else ""))
    print_table(results_table(to_frame(rows), title=title, unit=unit), wide, columns, checked=True)
    out.print(f"{len(rows)} rows → {s.path}", highlight=False)


def _announce(s: Sweep) -> None:
    """One line before the first point: what the sweep will measure, and a floor on how
    long that takes; a warning for a grid long enough to want shards."""
    from cebench.core.units import format_duration
    from cebench.run.plan import LONG_SWEEP, busy

    plan = s.plan
    parts = [f"{plan.total} points on {s.device.name}"]
    if plan.shard:
        parts.append(f"shard {plan.shard.label} ({plan.shard.source}): {plan.in_shard} of them")
    if plan.skipped:
        parts.append(f"--resume: {plan.skipped} already in {s.path}")
    cannot = plan.in_shard - plan.skipped - len(s.points)
    sharded = sum(p.world.sharded for p in s.points)
    parts.append(f"{len(s.points)} to measure" + (" each in a fresh process" if s.isolate else "")
                 + (f" ({cannot} of variants that cannot run here left out)" if cannot else "")
                 + (f" ({sharded} sharded, each in processes of its own, one per rank, {_ranks_bound(s)})"
                    if sharded else ""))
    users = s.unbounded()
    if users:
        parts.append(f"{users[0]}{' and others' * (len(users) > 1)} run here, unbounded: --point-timeout SECONDS "
                     "runs each point in a fresh process and stops it then")
    estimate = s.estimate()
    if estimate is not None:
        speeds = ", ".join(f"{r / 1e9:,.0f} GFLOP/s in {d}" for d, r in estimate.rates.items())
        parts.append(f"matmul work alone ≥ {format_duration(estimate.floor_s)} at the {speeds} a matmul reaches "
                     "here now" + f", plus {estimate.compilations} compilations" * bool(estimate.compilations))
    loaded = busy() if s.device.is_host else None
    if loaded:
        parts.append(f"this machine is busy (load {loaded[0]:.1f} on {loaded[1]} cores): every time measured now "
                     "is inflated")
    err.print("sweep: " + " · ".join(parts), highlight=False, soft_wrap=True)
    if plan.total > LONG_SWEEP and (plan.shard is None or plan.shard.count == 1):
        err.print(f"warning: {plan.total} points is a long sweep for one process: split it with torchrun, SLURM or "
                  "--shard (see the README), and --resume it if it stops", style="yellow", highlight=False)


def _ranks_bound(s: Sweep) -> str:
    """How long a sharded point's ranks may run: 'unbounded', or stopped after the default
    limit or --point-timeout's."""
    if s.ranks_timeout_s is None:
        return "unbounded"
    if s.default_timeout:
        return f"each stopped after {s.ranks_timeout_s:,g} s, the default limit (--point-timeout SECONDS sets it)"
    return f"each stopped after --point-timeout's {s.ranks_timeout_s:,g} s"


class _Progress:
    """A progress bar with an ETA on a terminal; one plain line per finished point when
    stderr is a log (CI, make, a batch job), so a long sweep is never silent."""

    def __init__(self, total: int, tag: str = "", unit: str | None = None) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.total, self.count, self.tag = total, 0, tag  # tag: '[shard I/N] ' in a shard
        self.unit = unit  # of memory (`--unit`)
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("eta"), TimeRemainingColumn(), console=err, transient=True,
                            disable=not err.is_terminal)
        self.task = self.bar.add_task("", total=total)

    def __enter__(self) -> _Progress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def start(self, label: str) -> None:
        self.bar.update(self.task, description=self.tag + label)

    def done(self, label: str, result: Result) -> None:
        from cebench.core.units import format_bytes, format_ms
        from cebench.store.schema import Status

        self.count += 1
        self.bar.advance(self.task)
        if err.is_terminal:
            if result.status != Status.OK:
                err.print(f"{self.tag}{result.status}: {label}: {result.error}", style="yellow", highlight=False)
            return
        detail = (f"ok, peak Δ {format_bytes(result.peak_delta_bytes, self.unit)}, {format_ms(result.time_ms_median)}"
                  if result.status == Status.OK else f"{result.status}: {result.error}")
        err.print(f"{self.tag}[{self.count}/{self.total}] {label}: {detail}", highlight=False, soft_wrap=True)

    def stop(self) -> None:
        self.bar.stop()
