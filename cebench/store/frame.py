"""The results CSV as a pandas DataFrame: loading and validating a file (any schema from 1
on), rows as the frame a file would load as, and small helpers the views share.

Loading is tolerant in both directions: a column a newer release added is filled in as
its declaration says (empty; `schema_version` 1) for an older file, and a column this
release does not know (written by a later one) is kept and ignored, so no file becomes
unreadable because its columns changed.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict
from enum import Enum
from pathlib import Path

import pandas as pd

from cebench.core.errors import InputWarning, UsageError
from cebench.store.files import Rows, not_text, parse, read_text, written_with
from cebench.store.files import cell as csv_cell
from cebench.store.schema import (
    ADDED,
    BEFORE,
    COLUMNS,
    FLOAT_COLUMNS,
    INT_COLUMNS,
    KEY_COLUMNS,
    OK_MEMORY,
    OK_TIME,
    PREDICTED,
    REQUIRED_VALUES,
    SAMPLES_COLUMNS,
    SCHEMA_VERSION,
    STATUSES,
    Result,
    Status,
)


def samples(cell: object) -> tuple[float, ...]:
    """A `time_ms_samples` cell → its step times in ms; () for an empty cell."""
    return () if not isinstance(cell, str) else tuple(float(v) for v in cell.split())


def load(path: Path) -> pd.DataFrame:
    """Read and validate a results CSV: integer columns as nullable Int64, floats as
    float64. Raises `UsageError` naming the problem for a missing, empty or malformed file;
    a cut-off or ragged last row is left out with a warning (`cebench.store.files.parse`)."""
    try:
        if path.is_dir():
            raise UsageError(f"{path} is a directory, not a CSV file")
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
        text = read_text(path)
    except OSError as exc:  # a name too long, from the checks above
        raise UsageError(f"{path}: {not_text(exc)}") from None
    if not text.strip():
        raise UsageError(f"{path}: the file is empty")
    rows = parse(path, text, required=tuple(c for c in COLUMNS if c not in ADDED))
    newest = max((v for r in rows.rows if (v := written_with(r)) is not None), default=1)
    if newest > SCHEMA_VERSION:  # read as far as this release knows (merge, which writes, refuses it)
        warnings.warn(InputWarning(f"{path}: written by a newer cebench (schema {newest}; this one reads up to "
                                   f"{SCHEMA_VERSION}): what that release added is left out"), stacklevel=2)
    return validated(rows)


def validated(rows: Rows) -> pd.DataFrame:
    """`rows` (`parse`d from a results CSV) as `load` returns them, every value checked."""
    path = rows.path
    if len(set(rows.header)) < len(rows.header):
        raise UsageError(f"{path}: a column name appears twice in its header")
    frame = pd.DataFrame([list(r.values()) for r in rows.rows], columns=list(rows.header), dtype=str)
    missing = [c for c in COLUMNS if c not in frame.columns and c not in ADDED]
    if missing:
        raise UsageError(f"{path}: missing column(s) {', '.join(missing)}")
    for column in ADDED:
        if column not in frame.columns:  # written before this column existed
            frame[column] = BEFORE[column]
    if frame.empty:
        raise UsageError(f"{path}: the file has a header but no rows")
    for column in REQUIRED_VALUES:
        blank = frame.index[frame[column].str.strip() == ""]
        if len(blank):
            raise UsageError(f"{path}: row {blank[0] + 2}: column '{column}' is empty")
    for column in INT_COLUMNS + FLOAT_COLUMNS:
        raw = frame[column].str.strip()
        numbers = pd.to_numeric(raw.replace("", None), errors="coerce")
        bad = raw[(raw != "") & numbers.isna()]
        if len(bad):
            raise UsageError(f"{path}: row {bad.index[0] + 2}: column '{column}' has non-numeric value "
                             f"'{bad.iloc[0]}'")
        impossible = raw[(numbers.abs() == math.inf) | (numbers < 0)]  # no number a row holds can be
        if len(impossible):
            raise UsageError(f"{path}: row {impossible.index[0] + 2}: column '{column}' has value "
                             f"'{impossible.iloc[0]}', which it cannot hold (finite, not negative)")
        if column in INT_COLUMNS and ((numbers.dropna() % 1) != 0).any():
            raise UsageError(f"{path}: column '{column}' must hold whole numbers")
        frame[column] = numbers
    unknown = sorted(set(frame["status"]) - set(STATUSES))
    if unknown:
        raise UsageError(f"{path}: column 'status' has unknown value(s) {', '.join(unknown)} "
                         f"(expected {', '.join(s.value for s in STATUSES)})")
    ok = frame["status"] == Status.OK.value
    timed = ok & (frame["mem_method"] != PREDICTED)
    for column, rows in [(c, ok) for c in OK_MEMORY] + [(c, timed) for c in OK_TIME]:
        blank = frame.index[rows & frame[column].isna()]
        if len(blank):
            raise UsageError(f"{path}: row {blank[0] + 2}: status is ok but column '{column}' is empty")
    return _typed(frame)


def distinct(frame: pd.DataFrame, column: str) -> str:
    """The distinct values of `column`, as text, sorted and comma-joined (for titles and warnings)."""
    return ", ".join(sorted(set(frame[column].astype(str))))


def latest(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (`KEY_COLUMNS`): the last one, since sweeps append to a CSV."""
    return frame.drop_duplicates(list(KEY_COLUMNS), keep="last")


INT64_MAX = 2**63 - 1


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Integer columns as nullable Int64 (float64 where a value is beyond int64: the FLOPs of
    a prediction at N = 10¹⁰ rows, say), float columns as float64, the rest as text."""
    frame = frame.copy()
    for column in INT_COLUMNS:
        numbers = pd.to_numeric(frame[column])
        beyond = numbers.abs().max() > INT64_MAX if numbers.notna().any() else False
        frame[column] = numbers.astype("float64" if beyond else "Int64")
    for column in FLOAT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column]).astype("float64")
    return frame


def to_frame(results: list[Result]) -> pd.DataFrame:
    """Results as the DataFrame `load` would return for their CSV."""
    # Samples as their cell (as loaded), a Status or an axis's word as its plain string; the rest as they are.
    rows = [{k: (csv_cell(v) if k in SAMPLES_COLUMNS or isinstance(v, Enum) else v) for k, v in asdict(r).items()}
            for r in results]
    return _typed(pd.DataFrame(rows, columns=list(COLUMNS)))
