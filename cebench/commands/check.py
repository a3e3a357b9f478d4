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
