"""The regression gate: compare a results CSV with a baseline CSV, point by point.

Points are matched on their configuration (`results.KEY_COLUMNS`); where a CSV holds a
configuration more than once (sweeps append), its last row is the one compared. A matched
point regresses when its `peak_delta_bytes` grew by more than the memory tolerance, when
it was `ok` in the baseline and is `oom`, `error` or `timeout` now, or (only when a time tolerance is
given) when its median step time grew by more than that tolerance *and* the slowdown is
statistically significant: a one-sided Mann-Whitney U test of its step-time samples
against the baseline's samples scaled by (1 + tolerance) gives p < `ALPHA`. Points whose
samples cannot tell (none on a side, or too few) are compared on their medians alone,
with a warning. Points measured on one side only are reported as missing: warnings, or
failures with `strict`.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import pandas as pd

from cebench.analyze.stats import mann_whitney_greater
from cebench.core.errors import UsageError
from cebench.store.frame import distinct, latest, samples
from cebench.store.schema import FAILED, KEY_COLUMNS, PREDICTED, Status

ALPHA = 0.05  # significance threshold of the time gate's one-sided Mann-Whitney U test

MEMORY = "peak_delta_bytes"
TIME = "time_ms_median"
STATUS = "status"

Key = dict[str, str | int | float | None]  # a point's configuration: KEY_COLUMNS → value


@dataclass(frozen=True)
class Finding:
    """One matched point whose metric changed beyond the tolerance. `baseline` and
    `current` are bytes (`peak_delta_bytes`), milliseconds (`time_ms_median`) or a status;
    `change` is (current − baseline) / baseline, None for a status or a zero baseline.
    `p_value`: for time, the Mann-Whitney U p-value of the change beyond the tolerance
    (None when a side had no samples)."""

    config: Key
    metric: str
    baseline: int | float | str
    current: int | float | str
    change: float | None
    p_value: float | None = None


@dataclass(frozen=True)
class Missing:
    """A point measured on one side only: `only_in` is 'baseline' or 'results'; `detail`
    says why when the other side has an `unsupported` row for it."""

    config: Key
    only_in: str
    detail: str = ""


@dataclass
class CheckReport:
    """What `compare` found. Tolerances are fractions (0.01 = 1 %); `time_tol` None means
    time was not gated. `timed`: the matched points whose step times were compared (measured
    on both sides)."""

    mem_tol: Fraction
    time_tol: Fraction | None
    strict: bool
    matched: int = 0
    timed: int = 0
    regressed: list[Finding] = field(default_factory=list)
    improved: list[Finding] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No regression, and with `strict` no missing point either."""
        return not self.regressed and not (self.strict and self.missing)

    def to_json(self) -> str:
        """The report as JSON (tolerances in percent), for machines."""
        return json.dumps({
            "passed": self.passed,
            "mem_tol_pct": float(self.mem_tol * 100),
            "time_tol_pct": None if self.time_tol is None else float(self.time_tol * 100),
            "alpha": ALPHA,
            "strict": self.strict,
            "matched": self.matched,
            "timed": self.timed,
            "regressed": [asdict(f) for f in self.regressed],
            "improved": [asdict(f) for f in self.improved],
            "missing": [asdict(m) for m in self.missing],
            "warnings": self.warnings,
        }, indent=2)


def _config(row: pd.Series) -> Key:
    """The key columns of a merged row as plain Python values (None for an empty ce_chunk)."""
    def plain(value: object) -> str | int | float | None:
        return None if pd.isna(value) else value if isinstance(value, str) else _number(value)
    return {c: plain(row[c]) for c in KEY_COLUMNS}


def _number(value: Any) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _compare_metric(report: CheckReport, config: Key, metric: str, base: object, cur: object,
                    tol: Fraction) -> None:
    """File a finding when `cur` grew (regressed) or shrank (improved) by more than `tol` × `base`."""
    base_n, cur_n = _number(base), _number(cur)
    growth = Fraction(cur_n) - Fraction(base_n)
    if abs(growth) <= Fraction(base_n) * tol:
        return
    change = float(growth / Fraction(base_n)) if base_n else None
    (report.regressed if growth > 0 else report.improved).append(Finding(config, metric, base_n, cur_n, change))


def _compare_time(report: CheckReport, config: Key, row: pd.Series, tol: Fraction) -> bool:
    """File a time finding when the median grew beyond `tol` and, where the samples can
    tell, the growth beyond `tol` is significant (p < ALPHA); an improvement is filed on
    the medians alone. Returns whether the samples could not tell: missing on a side, or
    too few for any p-value below ALPHA (fewer than 4 + 4, say)."""
    base, cur = float(row[f"{TIME}_b"]), float(row[f"{TIME}_r"])
    base_s, cur_s = samples(row["time_ms_samples_b"]), samples(row["time_ms_samples_r"])
    testable = bool(base_s and cur_s) and 1 / math.comb(len(base_s) + len(cur_s), len(cur_s)) < ALPHA
    change = (cur - base) / base if base else None
    if cur > base * (1 + float(tol)):
        p = mann_whitney_greater([v * (1 + float(tol)) for v in base_s], cur_s) if testable else None
        if p is None or p < ALPHA:
            report.regressed.append(Finding(config, TIME, base, cur, change, p))
    elif cur < base * (1 - float(tol)):
        report.improved.append(Finding(config, TIME, base, cur, change))
    return not testable


def compare(results: pd.DataFrame, baseline: pd.DataFrame, mem_tol: Fraction = Fraction(1, 100),
            time_tol: Fraction | None = None, strict: bool = False,
            names: tuple[str, str] = ("results", "baseline")) -> CheckReport:
    """Compare `results` with `baseline` (frames as `results.load` returns them).

    Raises `UsageError` when the two share no measured configuration: a gate that
    compares nothing would pass vacuously."""
    report = CheckReport(mem_tol=mem_tol, time_tol=time_tol, strict=strict)
    keys = list(KEY_COLUMNS)
    for frame, name in ((results, names[0]), (baseline, names[1])):
        repeated = int(frame.duplicated(keys).sum())
        if repeated:
            report.warnings.append(f"{name}: {repeated} row(s) repeat an earlier configuration; "
                                   "the last row of each is compared")
        guessed = int((frame["mem_method"] == PREDICTED).sum())
        if guessed:
            report.warnings.append(f"{name}: {guessed} row(s) are predictions (cebench predict), not measurements: "
                                   "their peaks are what meta tensors predict, and their time (predicted_time_ms), "
                                   "where given, is the time model's: --time-tol gates measured step times only")
    unsampled = 0
    merged = latest(baseline).merge(latest(results), on=keys, how="outer", suffixes=("_b", "_r"),
                                    indicator=True, sort=False)
    for _, row in merged.iterrows():
        config = _config(row)
        base_status, cur_status = row["status_b"], row["status_r"]
        base_measured = row["_merge"] != "right_only" and base_status != Status.UNSUPPORTED
        cur_measured = row["_merge"] != "left_only" and cur_status != Status.UNSUPPORTED
        if not (base_measured and cur_measured):
            if base_measured or cur_measured:
                other = row["error_r"] if base_measured else row["error_b"]
                detail = f"unsupported: {other}" if isinstance(other, str) and other else ""
                report.missing.append(Missing(config, "baseline" if base_measured else "results", detail))
            continue
        report.matched += 1
        if base_status == Status.OK and cur_status in FAILED:
            report.regressed.append(Finding(config, STATUS, base_status, cur_status, None))
        elif base_status != Status.OK and cur_status == Status.OK:
            report.improved.append(Finding(config, STATUS, base_status, cur_status, None))
        elif base_status == cur_status == Status.OK:
            _compare_metric(report, config, MEMORY, row[f"{MEMORY}_b"], row[f"{MEMORY}_r"], mem_tol)
            if time_tol is not None and pd.notna(row[f"{TIME}_b"]) and pd.notna(row[f"{TIME}_r"]):
                # predicted rows have no measured time: only their memory is compared
                report.timed += 1
                unsampled += _compare_time(report, config, row, time_tol)
    if not report.matched:
        raise UsageError(f"{names[0]} and {names[1]} have no measured configuration in common "
                         f"(matched on {', '.join(KEY_COLUMNS)}); nothing to check")
    if distinct(results, "torch_version") != distinct(baseline, "torch_version"):
        report.warnings.append(f"torch differs: {names[1]} {distinct(baseline, 'torch_version')}, "
                               f"{names[0]} {distinct(results, 'torch_version')}; memory may differ "
                               "for that reason alone")
    if unsampled:
        report.warnings.append(f"{unsampled} point(s) have too few step-time samples for a significance test "
                               "(none on a side, as in CSVs from before cebench kept them, or under 4 + 4 "
                               "repeats): their time is gated on the medians alone")
    if time_tol is not None:
        for column in ("device_name", "threads"):
            if distinct(results, column) != distinct(baseline, column):
                report.warnings.append(f"{column} differs: {names[1]} {distinct(baseline, column)}, "
                                       f"{names[0]} {distinct(results, column)}; times are compared "
                                       "across different setups")
    return report
