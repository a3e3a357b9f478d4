"""The results CSV: its schema (a public interface), incremental writing, loading, and
building a row for a measured point.

One row per measured point, written and flushed as soon as it is measured, so an
interrupted sweep keeps every finished row. Files are append-only. Every row carries the
`schema_version` it was written with. Loading is tolerant in both directions: a column a
newer release added is filled in empty for an older file, and a column this release does
not know (written by a later one) is kept and ignored, so no file becomes unreadable
because its columns changed.
"""
from __future__ import annotations

import csv
import io
import tempfile
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from cebench.core.config import Config
from cebench.core.errors import UsageError

SCHEMA_VERSION = 3  # 1: cebench 0.1.0 (no schema_version, no time_ms_samples); 2: no flops, tflops_per_s,
# matmul_floor_ms, shard
STATUSES = ("ok", "oom", "error", "timeout", "unsupported")
FAILED = ("oom", "error", "timeout")  # a point that ran and failed; `unsupported` never ran
DONE = ("ok", "oom")  # a point `sweep --resume` does not run again (an oom would fail again)


@dataclass
class Result:
    """One CSV row. Bytes are bytes, times milliseconds (`compile_s` seconds); None is an
    empty cell (a measurement that was not taken, or `ce_chunk` of a non-chunking variant)."""

    variant: str
    workload: str
    device: str
    device_name: str
    dtype: str
    batch: int
    context: int
    tokens: int
    vocab: int
    d_model: int
    ce_chunk: int | None
    status: str
    error: str
    peak_bytes: int | None
    base_bytes: int | None
    peak_delta_bytes: int | None
    mem_method: str
    time_ms_median: float | None
    time_ms_p25: float | None
    time_ms_p75: float | None
    time_ms_min: float | None
    repeats: int | None
    time_ms_samples: tuple[float, ...] | None
    tokens_per_s: float | None
    compile_s: float | None
    flops: int | None
    tflops_per_s: float | None
    matmul_floor_ms: float | None
    logits_fp32_bytes: int
    lower_bound_bytes: int
    torch_version: str
    cebench_version: str
    threads: int
    timestamp: str
    shard: str
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def blank(cls, config: Config, device_name: str) -> Result:
        """A row for `config` with status ok, its reference quantities and environment
        filled in, and every measurement empty."""
        import torch

        import cebench

        return cls(
            variant=config.variant, workload=config.workload, device=config.device,
            device_name=device_name, dtype=config.dtype, batch=config.batch,
            context=config.context, tokens=config.tokens, vocab=config.vocab, d_model=config.d_model,
            ce_chunk=config.ce_chunk, status="ok", error="", peak_bytes=None, base_bytes=None,
            peak_delta_bytes=None, mem_method="", time_ms_median=None, time_ms_p25=None,
            time_ms_p75=None, time_ms_min=None, repeats=None, time_ms_samples=None, tokens_per_s=None,
            compile_s=None, flops=None, tflops_per_s=None, matmul_floor_ms=None, logits_fp32_bytes=config.logits_fp32_bytes,
            lower_bound_bytes=config.lower_bound_bytes, torch_version=torch.__version__,
            cebench_version=cebench.__version__, threads=torch.get_num_threads(),
            timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"), shard="",
        )


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Result))
KEY_COLUMNS = ("variant", "workload", "device", "dtype", "batch", "context", "vocab", "d_model", "ce_chunk")
# What a configuration is besides the variant and its ce_chunk: the rows compared side by side.
SHAPE_COLUMNS = tuple(c for c in KEY_COLUMNS if c not in ("variant", "ce_chunk"))
INT_COLUMNS = ("batch", "context", "tokens", "vocab", "d_model", "ce_chunk", "peak_bytes", "base_bytes",
               "peak_delta_bytes", "repeats", "flops", "logits_fp32_bytes", "lower_bound_bytes", "threads",
               "schema_version")
# Columns later releases added, with the schema version that added them: an older file
# without them loads with them empty (schema_version: 1).
ADDED = {"time_ms_samples": 2, "schema_version": 2,
         "flops": 3, "tflops_per_s": 3, "matmul_floor_ms": 3, "shard": 3}
FLOAT_COLUMNS = ("time_ms_median", "time_ms_p25", "time_ms_p75", "time_ms_min", "tokens_per_s", "compile_s",
                 "tflops_per_s", "matmul_floor_ms")
REQUIRED_VALUES = ("variant", "workload", "device", "dtype", "batch", "context", "tokens", "vocab", "d_model", "status")
# Measurements every `ok` row has (the views draw and compare them); predicted rows
# (mem_method "predicted", from `cebench predict`) have memory but no time.
OK_MEMORY = ("peak_bytes", "base_bytes", "peak_delta_bytes")
OK_TIME = ("time_ms_median", "time_ms_p25", "time_ms_p75")
PREDICTED = "predicted"


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, tuple):  # time_ms_samples: space-separated, in measurement order
        return " ".join(f"{v:.6g}" for v in value)
    return value


def samples(cell: object) -> tuple[float, ...]:
    """A `time_ms_samples` cell → its step times in ms; () for an empty cell."""
    return () if not isinstance(cell, str) else tuple(float(v) for v in cell.split())


class ResultWriter:
    """Appends rows to a CSV, flushing each one. A new file gets this release's header. An
    existing cebench CSV keeps its own: rows are written in its columns (a column it lacks,
    listed in `dropped`, is not written; one this release does not know is left empty).
    Anything else at `path` is a `UsageError`, and the file is untouched."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.written = 0
        header = existing_header(path)
        self.columns: tuple[str, ...] = header or COLUMNS
        self.dropped = tuple(c for c in COLUMNS if c not in self.columns)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.repaired = _drop_cut_off_row(path) if header else ""
            self._file = path.open("a", newline="")
        except OSError as exc:
            raise UsageError(f"{path}: cannot write there ({exc.strerror or exc})") from None
        self._writer = csv.writer(self._file)
        if header is None:
            self._put(COLUMNS)

    def _put(self, cells: tuple[object, ...] | list[object]) -> None:
        try:
            self._writer.writerow(cells)
            self._file.flush()
        except OSError as exc:  # a full disk, a lost mount: stop, every earlier row intact
            raise UsageError(f"{self.path}: writing failed ({exc.strerror or exc}); the {self.written} rows "
                             "before it are kept") from None

    def write(self, result: Result) -> None:
        cells = {k: _cell(v) for k, v in asdict(result).items()}
        self._put([cells.get(c, "") for c in self.columns])
        self.written += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop_cut_off_row(path: Path) -> str:
    """Cut a last row that has no line end (a crash or a full disk mid-write) off the file,
    so the next row never joins it; returns the text dropped ('' when there was none)."""
    with path.open("rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return ""
        keep = data.rfind(b"\n") + 1
        f.truncate(keep)
    return data[keep:].decode(errors="replace")


def existing_header(path: Path, advice: str = "; choose another --out") -> tuple[str, ...] | None:
    """The header of the cebench CSV at `path`, or None when there is no file (or an empty
    one). `UsageError` when `path` is a directory, cannot be read, or is not a cebench CSV
    (the message ends with `advice`)."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a CSV file")
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        with path.open(newline="") as f:
            header = tuple(next(csv.reader(f), []))
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, csv.Error):
        header = ()
    if any(c not in header for c in COLUMNS if c not in ADDED):
        raise UsageError(f"{path} exists and is not a cebench results CSV{advice}")
    return header


def check_out(path: Path) -> tuple[str, ...] | None:
    """`existing_header(path)`, after making sure rows could be written there without
    creating or changing anything: an existing file must open for update, else the nearest
    existing folder above it must be a folder this process can create a file in (tried
    with a temporary file, removed at once)."""
    header = existing_header(path)
    try:
        if path.exists():
            path.open("rb+").close()
            return header
        folder = path.parent
        while not folder.exists():
            folder = folder.parent
    except OSError as exc:
        raise UsageError(f"{path}: cannot write there ({exc.strerror or exc})") from None
    if not folder.is_dir():
        raise UsageError(f"{path}: cannot write there ({folder} is a file, not a folder)")
    try:
        tempfile.TemporaryFile(dir=folder).close()  # nameless where the OS allows, and gone at once
    except OSError as exc:
        raise UsageError(f"{path}: cannot write there ({exc.strerror or exc}: {folder})") from None
    return header


def point_key(config: Config) -> tuple[str, ...]:
    """`config`'s `KEY_COLUMNS` as their CSV cells."""
    return tuple("" if (v := getattr(config, c)) is None else str(v) for c in KEY_COLUMNS)


@dataclass(frozen=True)
class Rows:
    """A cebench CSV as written: its header, its rows as text cells, and the text of a
    cut-off last row left out ('' when the file ends with a whole row)."""

    header: tuple[str, ...]
    rows: list[dict[str, str]]
    cut_off: str


def read_rows(path: Path) -> Rows:
    """The rows of the cebench CSV at `path`, cells exactly as written (nothing is changed
    on disk). `UsageError` for anything that is not a readable cebench CSV."""
    header = existing_header(path, advice="")
    if header is None:
        raise UsageError(f"{path}: no such file, or an empty one")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a readable text file ({str(exc).splitlines()[0]})") from None
    whole, _, cut_off = text.rpartition("\n") if not text.endswith("\n") else (text, "", "")
    reader = csv.reader(io.StringIO(whole))
    next(reader, None)
    rows = []
    for number, cells in enumerate(reader, start=2):
        if len(cells) != len(header):
            raise UsageError(f"{path}: row {number} has {len(cells)} cells, the header {len(header)}")
        rows.append(dict(zip(header, cells)))
    return Rows(header, rows, cut_off)


def done_keys(path: Path) -> set[tuple[str, ...]]:
    """Keys (`point_key`) of the points measured in the CSV at `path` with a status in
    `DONE` (predicted rows do not count); empty when there is no file."""
    if existing_header(path) is None:
        return set()
    return {tuple(r[c] for c in KEY_COLUMNS) for r in read_rows(path).rows
            if r["status"] in DONE and r.get("mem_method") != PREDICTED}


def load(path: Path) -> pd.DataFrame:
    """Read and validate a results CSV: integer columns as nullable Int64, floats as
    float64. Raises `UsageError` naming the problem for a missing, empty or malformed file."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a CSV file")
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a readable text file ({str(exc).splitlines()[0]})") from None
    if not text.strip():
        raise UsageError(f"{path}: the file is empty")
    try:
        # A short (truncated) row reads as NaN cells: treat them as empty like any blank cell.
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).fillna("")
    except pd.errors.ParserError as exc:
        raise UsageError(f"{path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    missing = [c for c in COLUMNS if c not in frame.columns and c not in ADDED]
    if missing:
        raise UsageError(f"{path}: missing column(s) {', '.join(missing)}")
    for column in ADDED:
        if column not in frame.columns:  # written before this column existed
            frame[column] = "1" if column == "schema_version" else ""
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
        if column in INT_COLUMNS and ((numbers.dropna() % 1) != 0).any():
            raise UsageError(f"{path}: column '{column}' must hold whole numbers")
        frame[column] = numbers
    unknown = sorted(set(frame["status"]) - set(STATUSES))
    if unknown:
        raise UsageError(f"{path}: column 'status' has unknown value(s) {', '.join(unknown)} "
                         f"(expected {', '.join(STATUSES)})")
    ok = frame["status"] == "ok"
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


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Integer columns as nullable Int64, float columns as float64, the rest as text."""
    frame = frame.copy()
    for column in INT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column]).astype("Int64")
    for column in FLOAT_COLUMNS:
        frame[column] = pd.to_numeric(frame[column]).astype("float64")
    return frame


def to_frame(results: list[Result]) -> pd.DataFrame:
    """Results as the DataFrame `load` would return for their CSV."""
    rows = [{k: (_cell(v) if k == "time_ms_samples" else v) for k, v in asdict(r).items()} for r in results]
    return _typed(pd.DataFrame(rows, columns=list(COLUMNS)))
