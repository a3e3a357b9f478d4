"""Shared helpers: small configs that run in milliseconds on a 2-core CPU, and real
results CSVs to edit row by row."""
from __future__ import annotations

import functools
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

# One compute thread per test process: the suite's two xdist workers with torch's default of one thread per core
# would run four busy threads on a 2-core machine, whose OpenMP waits then steal from each other (model step,
# limits and memory tests: 71 s with two threads each, 33 s with one). Set before torch is imported; the
# processes the tests start inherit it. A test that asks for threads (--threads) still gets them.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, so Python
# installs no KeyboardInterrupt handler, in this process or in those it starts: the tests of a Ctrl-C would then
# test the shell. Python's own handler, as an interactive start gives it (the processes started inherit the default
# disposition, and install the same).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import matplotlib.pyplot  # noqa: F401  (imported here so that its objects are frozen below)
import pandas as pd
import pytest
import torch  # noqa: F401  (as matplotlib)
from typer.testing import CliRunner, Result

from cebench.cli import app
from cebench.core import devices, interpreter
from cebench.core.config import Config
from cebench.run.runner import Settings

# The suite runs Liger's kernels on a CPU, and some tests import triton themselves
# (torch.utils.flop_counter): Triton's interpreter is chosen before any of them does.
interpreter.enable()

# Every point collects garbage before it is measured (`Device.free_cache`). A full
# collection walks every object the imports made (~370,000 with torch, pandas and
# matplotlib): 0.1-0.2 s a call, half the time of a tiny sweep. Freezing them for good (they
# live as long as the process anyway) leaves the collections only the objects the tests make;
# what a point measures does not change (the allocator sees the same tensors). A sweep or
# `run` freezes what is alive when it starts (`devices.frozen_heap`) and, the heap being
# frozen for good here, leaves it frozen: each later collection walks only what was made since.
devices.freeze_for_good()

FAST = Settings(warmup=1, repeats=2)


@pytest.fixture(scope="session", autouse=True)
def matmul_rate_once():
    """Every in-process sweep announces a time estimate from the rate a square matmul
    reaches (`plan.matmul_rate`: ~0.2-0.5 s of a 1024² fp32 matmul on a busy 2-core CPU,
    seconds the first time). Measured once per device and dtype per test process here: the
    probe runs for real the first time, and what the estimate prints is checked the same way
    (an --isolate sweep's children still measure it afresh)."""
    from cebench.run import plan

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan, "matmul_rate", functools.cache(plan.matmul_rate))
        yield


@pytest.fixture
def at_width(monkeypatch, tmp_path) -> Callable[[list[str], int], Result]:
    """`cebench ARGV` in this process as a reader's terminal of `width` columns shows it, run
    from a scratch folder (where a sweep's CSV and explain's figure go): its click `Result`,
    its exit code 0 or 1 (check and verify exit 1 on a finding)."""
    from cebench.cli.app import out

    monkeypatch.chdir(tmp_path)

    def run(argv: list[str], width: int) -> Result:
        monkeypatch.setattr(out, "width", width)
        result = CliRunner().invoke(app, argv)
        assert result.exit_code in (0, 1), result.output
        return result

    return run


def invoke(*args: object) -> Result:
    """`cebench ARGS` through typer's runner (each argument as text)."""
    return CliRunner().invoke(app, [str(a) for a in args])


def one_error(result: Result) -> str:
    """The one line of a usage error (exit 2)."""
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr.strip()


def cli(argv: list[str]) -> tuple[int, str, str]:
    """`cebench ARGV` in this process, as the installed command runs it: (exit code, stdout,
    stderr). What `in_child` runs in a fresh process."""
    import contextlib
    import io
    import sys

    from cebench.cli import main

    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    sys.argv = ["cebench", *argv]
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, stdout.getvalue(), stderr.getvalue()


def in_child(argv: list[str]) -> tuple[int, str, str]:
    """`cli(argv)` in a fresh process forked from one that imported torch (`cebench.run.isolate`),
    in this process's working directory and environment: a command as a user's shell runs it,
    without the seconds of importing torch again."""
    from cebench.run import isolate

    outcome = isolate.call(cli, (argv,), isolate.Child(), 300)
    assert outcome.status == "ok", outcome.error
    return outcome.value


def model_file(folder: Path, config: dict[str, object]) -> Path:
    """`config` (a config.json's fields) written as `folder`/tiny.json: a file a test passes as --model."""
    path = folder / "tiny.json"
    path.write_text(json.dumps(config))
    return path


def cpu_config(variant: str = "dense", batch: int = 2, context: int = 64, vocab: int = 2000,
               d_model: int = 32, ce_chunk: int | None = None, workload: str = "loss",
               dtype: str = "fp32") -> Config:
    """A small fp32 CPU point."""
    return Config(variant=variant, workload=workload, device="cpu", dtype=dtype,
                  batch=batch, context=context, vocab=vocab, d_model=d_model, ce_chunk=ce_chunk)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks into the node ids
def pytest_collection_modifyitems(config, items):
    """The tests of a module that share one of its module-scoped fixtures (a real sweep, an
    isolated run: seconds each) go to one xdist worker (`--dist loadgroup`), so that the
    fixture is built once, not once per worker that happens to draw one of them. The tests
    marked `compile` go to one worker too: the first compilation in a process imports and
    warms up Inductor (~10 s on a 2-core CPU), which the others then reuse."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if item.get_closest_marker("compile"):
            item.add_marker(pytest.mark.xdist_group("compile"))
        elif any(d and d[-1].scope == "module" for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    if hasattr(config, "workerinput"):  # an xdist worker: the end-to-end tests (10-50 s each) are handed out first,
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # not last to a worker left alone


# The optional packages `make install` installs beside cebench (import names; cebench/core/pins.py), for `needs`.
OPTIONAL = ("triton", "liger_kernel", "cut_cross_entropy", "transformers")
REFERENCE_TORCH = (2, 13)  # the pinned CPU build CI runs whole (Makefile: TORCH_CPU)
CHECKED_TRITON = "3.9.0"  # the Triton whose interpreter the Liger-on-CPU byte counts were checked with (TRITON)


def _skip_reason(item) -> str | None:
    """Why `item` cannot run in this environment, from its marks (None: it can)."""
    import importlib.util

    from cebench.shims import torch_names

    for mark in item.iter_markers("needs"):
        absent = [m for m in (mark.args or OPTIONAL) if importlib.util.find_spec(m) is None]
        if absent:
            return f"needs {', '.join(absent)} (make install installs {'them' if absent[1:] else 'it'}, keeping torch)"
    release = tuple(int(x) for x in torch_names.RELEASE.split(".")[:2])
    if item.get_closest_marker("reference_torch") and release != REFERENCE_TORCH:
        return (f"asserts torch {REFERENCE_TORCH[0]}.{REFERENCE_TORCH[1]}'s figures, which torch "
                f"{torch_names.RELEASE} changes (README: the torch builds)")
    if item.get_closest_marker("fsdp_predicted") and not torch_names.fake_collectives():
        return f"torch {torch_names.RELEASE} cannot have a sharded step predicted (2.9 on)"
    if item.get_closest_marker("torch_lce") and not hasattr(torch.nn.functional, "linear_cross_entropy"):
        return f"torch-lce needs torch 2.13 or newer (this is {torch_names.RELEASE})"
    if item.get_closest_marker("checked_triton"):
        import importlib.metadata

        found = importlib.metadata.version("triton") if importlib.util.find_spec("triton") else None
        if found != CHECKED_TRITON:
            return f"Triton {CHECKED_TRITON}'s interpreter checked these bytes; this is Triton {found}"
    return None


def pytest_runtest_setup(item):
    """Skip, saying why, a test this environment cannot run (its marks: `pyproject.toml`)."""
    reason = _skip_reason(item)
    if reason:
        pytest.skip(reason)


@pytest.fixture
def registry(monkeypatch):
    """The variant registry, restored after the test (register test-only variants here)."""
    from cebench.losses import variants

    monkeypatch.setattr(variants, "REGISTRY", dict(variants.REGISTRY))
    return variants


# Tiny eager CPU points: the whole sweep takes about a second in-process.
SMALL = ["--device", "cpu", "--vocab", "1000", "--d-model", "16", "--ce-chunk", "16", "--variant", "dense,chunked",
         "--repeats", "1"]
MEASURED = ("peak_bytes", "base_bytes", "peak_delta_bytes", "time_ms_median", "time_ms_p25", "time_ms_p75",
            "time_ms_min", "tokens_per_s", "flops", "tflops_per_s", "matmul_floor_ms")


def sweep_csv(path: Path, *grid: str) -> Path:
    """A real results CSV from `cebench sweep` over the SMALL grid plus `grid`."""
    result = CliRunner().invoke(app, ["sweep", *SMALL, *grid, "--out", str(path)])
    assert result.exit_code == 0, result.output
    return path


def rewrite(src: Path, dst: Path, edit: Callable[[pd.DataFrame], pd.DataFrame | None]) -> Path:
    """Copy a results CSV, cells as text, through `edit` (in place, or returning a new frame)."""
    frame = pd.read_csv(src, dtype=str, keep_default_na=False)
    edited = edit(frame)
    (frame if edited is None else edited).to_csv(dst, index=False)
    return dst


def fail(frame: pd.DataFrame, mask: pd.Series, status: str, error: str = "OutOfMemoryError: out of memory") -> None:
    """Turn the `mask` rows into non-ok rows as the runner writes them: no measurements, a reason."""
    frame.loc[mask, list(MEASURED)] = ""
    frame.loc[mask, ["status", "error"]] = [status, error]
