"""`cebench check` as a library call: two results CSVs (or frames) compared point by point
(`cebench.analyze.check.compare`). pandas is imported when it runs."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from cebench.analyze.check import CheckReport


def load(path: Path | str) -> pd.DataFrame:
    """A results CSV (any schema cebench wrote), validated and typed: what `check` reads."""
    from cebench.commands import arguments
    from cebench.store.frame import load as load_frame

    return load_frame(arguments.path(path, "path"))


def check(results: Path | str | pd.DataFrame, baseline: Path | str | pd.DataFrame, *,
          mem_tol: str | Fraction = "1%", time_tol: str | Fraction | None = None, strict: bool = False) -> CheckReport:
    """Compare `results` with `baseline` point by point (CSV paths or `load`ed frames):
    a `CheckReport` whose `passed` is False when a point's peak Δ grew beyond `mem_tol`, a
    point that was ok failed, or (with `time_tol`) its step time grew significantly."""
    from cebench.analyze.check import compare
    from cebench.commands import arguments

    mem = arguments.tolerance(mem_tol, "mem_tol")
    time = None if time_tol is None else arguments.tolerance(time_tol, "time_tol")
    return compare(arguments.results(results, "results"), arguments.results(baseline, "baseline"),
                   mem_tol=mem, time_tol=time, strict=strict,
                   names=(str(results) if not hasattr(results, "columns") else "results",
                          str(baseline) if not hasattr(baseline, "columns") else "baseline"))
