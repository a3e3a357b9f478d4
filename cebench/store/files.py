"""The results CSV on disk: incremental writing, the header of an existing file, reading
rows back as written, and the points a file already holds.

One row per measured point, written and flushed as soon as it is measured, so an
interrupted sweep keeps every finished row. Files are append-only. Every row carries the
`schema_version` it was written with; an existing file keeps its own header (see
`ResultWriter`). The columns are declared in `cebench.store.schema`.
"""
from __future__ import annotations

import csv
import io
import tempfile
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from cebench.core.errors import UsageError
from cebench.store.schema import ADDED, BEFORE, COLUMNS, DONE, KEY_COLUMNS, PREDICTED, Result

if TYPE_CHECKING:
    from cebench.core.config import Config


def cell(value: object) -> object:
    """`value` as its CSV cell: None empty, floats to 6 significant digits, samples
    space-separated in measurement order, a `Status` as its string."""
    if value is None:
        return ""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, tuple):  # time_ms_samples: space-separated, in measurement order
        return " ".join(f"{v:.6g}" for v in value)
    return value


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
        cells = {k: cell(v) for k, v in asdict(result).items()}
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
    return tuple(str(cell(getattr(config, c))) for c in KEY_COLUMNS)


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
        rows.append(dict(zip(header, cells, strict=True)))
    return Rows(header, rows, cut_off)


def done_keys(path: Path) -> set[tuple[str, ...]]:
    """Keys (`point_key`) of the points measured in the CSV at `path` with a status in
    `DONE` (predicted rows do not count); empty when there is no file."""
    if existing_header(path) is None:
        return set()
    return {tuple(r.get(c, BEFORE.get(c, "")) for c in KEY_COLUMNS) for r in read_rows(path).rows
            if r["status"] in DONE and r.get("mem_method") != PREDICTED}
