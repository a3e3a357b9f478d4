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

import numpy as np
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
    """`rows` (`parse`d from a results CSV) as `load` returns them, every value checked.
    Checked and typed cell by cell in Python (a results file holds hundreds of rows, not
    millions: a pandas operation per check and column took 0.1 s for a file of 4 rows)."""
    path = rows.path
    if len(set(rows.header)) < len(rows.header):
        raise UsageError(f"{path}: a column name appears twice in its header")
    missing = [c for c in COLUMNS if c not in rows.header and c not in ADDED]
    if missing:
        raise UsageError(f"{path}: missing column(s) {', '.join(missing)}")
    header = list(rows.header) + [c for c in ADDED if c not in rows.header]  # written before they existed
    text = {c: [r[c] for r in rows.rows] if c in rows.header else [BEFORE[c]] * len(rows.rows) for c in header}
    if not rows.rows:
        raise UsageError(f"{path}: the file has a header but no rows")
    for column in REQUIRED_VALUES:
        blank = next((i for i, cell in enumerate(text[column]) if not cell.strip()), None)
        if blank is not None:
            raise UsageError(f"{path}: row {blank + 2}: column '{column}' is empty")
    columns: dict[str, object] = dict(text)
    numbers: dict[str, list[float | int | None]] = {}
    for column in INT_COLUMNS + FLOAT_COLUMNS:
        cells = [cell.strip() for cell in text[column]]
        values = [_number(cell) for cell in cells]
        for i, (cell, value) in enumerate(zip(cells, values, strict=True)):
            if cell:
                _check_number(path, i, column, cell, value)
        if column in INT_COLUMNS and any(v is not None and v % 1 for v in values):
            raise UsageError(f"{path}: column '{column}' must hold whole numbers")
        numbers[column] = values
        columns[column] = _column(values, whole=column in INT_COLUMNS)
    for column in SAMPLES_COLUMNS:  # numbers too, space-separated
        for i, cell in enumerate(text[column]):
            for word in cell.split():
                _check_number(path, i, column, word, _number(word))
    statuses = text["status"]
    unknown = sorted(set(statuses) - set(STATUSES))
    if unknown:
        raise UsageError(f"{path}: column 'status' has unknown value(s) {', '.join(unknown)} "
                         f"(expected {', '.join(s.value for s in STATUSES)})")
    ok = [s == Status.OK.value for s in statuses]
    timed = [o and m != PREDICTED for o, m in zip(ok, text["mem_method"], strict=True)]
    for column, which in [(c, ok) for c in OK_MEMORY] + [(c, timed) for c in OK_TIME]:
        blank = next((i for i, (w, v) in enumerate(zip(which, numbers[column], strict=True)) if w and v is None), None)
        if blank is not None:
            raise UsageError(f"{path}: row {blank + 2}: status is ok but column '{column}' is empty")
    return pd.DataFrame(columns, columns=header)


def _check_number(path: Path, index: int, column: str, cell: str, value: int | float | None) -> None:
    """Raise `UsageError` unless the non-empty `cell` of row `index` (0: the first after the
    header) is a number `value` that a row can hold: finite, not negative."""
    if value is None:
        raise UsageError(f"{path}: row {index + 2}: column '{column}' has non-numeric value '{cell}'")
    if math.isinf(value) or value < 0:
        raise UsageError(f"{path}: row {index + 2}: column '{column}' has value '{cell}', which it cannot hold "
                         "(finite, not negative)")


def _number(cell: str) -> int | float | None:
    """A stripped CSV cell's number, as `pd.to_numeric` reads it (ASCII digits, no `_`; an
    integer exactly), or None: empty, not a number, or NaN."""
    if not cell or not cell.isascii() or "_" in cell:
        return None
    try:
        return int(cell)
    except ValueError:
        pass
    try:
        value = float(cell)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _column(values: list[int | float | None], *, whole: bool) -> pd.api.extensions.ExtensionArray | np.ndarray:
    """A column's numbers (None: empty), as `load` and `to_frame` type them: `whole` ones as
    nullable Int64 (float64 where one is beyond int64: the FLOPs of a prediction at N = 10¹⁰
    rows, say), the rest as float64 (NaN where empty)."""
    if whole and all(v is None or abs(v) <= INT64_MAX for v in values):
        return pd.array([None if v is None else int(v) for v in values], dtype="Int64")
    return np.array([math.nan if v is None else float(v) for v in values], dtype=np.float64)


def distinct(frame: pd.DataFrame, column: str) -> str:
    """The distinct values of `column`, as text, sorted and comma-joined (for titles and warnings)."""
    return ", ".join(sorted(set(frame[column].astype(str))))


def latest(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration (`KEY_COLUMNS`): the last one, since sweeps append to a CSV."""
    return frame.drop_duplicates(list(KEY_COLUMNS), keep="last")


INT64_MAX = 2**63 - 1


def to_frame(results: list[Result]) -> pd.DataFrame:
    """Results as the DataFrame `load` would return for their CSV."""
    # Samples as their cell (as loaded), a Status or an axis's word as its plain string; the rest as they are.
    rows = [{k: (csv_cell(v) if k in SAMPLES_COLUMNS or isinstance(v, Enum) else v) for k, v in asdict(r).items()}
            for r in results]
    columns: dict[str, object] = {c: [row[c] for row in rows] if rows else pd.Series([], dtype=object) for c in COLUMNS}
    for column in INT_COLUMNS + FLOAT_COLUMNS:
        columns[column] = _column(columns[column], whole=column in INT_COLUMNS)  # type: ignore[arg-type]
    return pd.DataFrame(columns, columns=list(COLUMNS))
