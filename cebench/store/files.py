"""The results CSV on disk: incremental writing, the header of an existing file, reading
rows back as written, and the points a file already holds.

One row per measured point, written as soon as it is measured, so an interrupted sweep
keeps every finished row. Files are append-only, and one process at a time writes one
(`Lock`). Every row carries the `schema_version` it was written with; an existing file keeps
its own header (see `ResultWriter`). Every reader parses a file with `parse`, which leaves
out a cut-off last row with a warning. The columns are declared in `cebench.store.schema`.
"""
from __future__ import annotations

import contextlib
import csv
import io
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from cebench.core.errors import InputWarning, UsageError
from cebench.store.schema import ADDED, BEFORE, COLUMNS, DONE, KEY_COLUMNS, PREDICTED, Result

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import BinaryIO

    from cebench.core.config import Config

try:
    import fcntl
except ImportError:  # not POSIX: no lock
    fcntl = None  # type: ignore[assignment]

READ_ENCODING = "utf-8-sig"  # how a CSV is read: UTF-8, a byte-order mark (a spreadsheet's "CSV UTF-8") skipped
FILE_MODE = 0o666  # every file cebench writes: read-write for all, less the umask (0644 with the usual 022)


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


class Lock:
    """This process's exclusive hold on the results CSV at `path` (`fcntl.flock`), opened for
    appending (created when missing, mode `FILE_MODE`), so that no two cebench processes
    write one file at once: a second one is refused with a `UsageError`, never queued. The
    kernel releases it when the process ends, however it ends. `created`: there was no file
    at `path` before."""

    def __init__(self, path: Path, at: Path | None = None) -> None:
        """`at`: open and hold that file instead (a new one, to be renamed to `path`)."""
        self.path = path
        self.created = not path.exists()
        try:
            self.file = (at or path).open("ab", buffering=0)  # unbuffered: a failed write leaves nothing behind
        except OSError as exc:
            raise UsageError(f"{path}: cannot write there ({exc.strerror or exc})") from None
        if fcntl is None:
            return
        try:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.close()
            raise UsageError(f"{path}: another cebench process is writing it (a sweep still running?); wait for "
                             "it to end, or choose another --out") from None

    def close(self) -> None:
        self.file.close()


class ResultWriter:
    """Appends rows to a CSV, each in one write, holding its `Lock` (taken here unless
    `lock` is one already held). A new file gets this release's header. An existing cebench
    CSV keeps its own: rows are written in its columns (a column it lacks, listed in
    `dropped`, is not written; one this release does not know is left empty); a cut-off
    or ragged last row is cut from it first, with an `InputWarning` (unless `quiet`: the
    caller read the file, which warned). Anything else at
    `path` is a `UsageError`, and the file is untouched. A write that fails (a full disk)
    is a `UsageError`, the file cut back to its last whole row. A file made here that gets no
    row (its header failed, or what was to measure was refused) is removed on `close`.

    `replace`: the file at `path` is replaced, not appended to, and only by the first row: that
    row and this release's header go to a new file beside it, which is renamed over it (and
    held from then on). Until then the old file is as it was, whatever ends the process."""

    def __init__(self, path: Path, lock: Lock | None = None, quiet: bool = False, replace: bool = False) -> None:
        self.path = path
        self.written = 0
        self.columns: tuple[str, ...] = COLUMNS
        self.dropped: tuple[str, ...] = ()
        if replace:
            if lock is None:
                raise ValueError("replacing a CSV needs its lock held")
            self._lock, self._made, self._replace = lock, False, True
            return
        self._replace = False
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"{path}: cannot write there ({exc.strerror or exc})") from None
        self._lock = lock or Lock(path)
        try:
            header = existing_header(path)
            if header:
                _drop_cut_off_row(path, self._lock, quiet)
        except BaseException:
            self._lock.close()
            raise
        self.columns = header or COLUMNS
        self.dropped = tuple(c for c in COLUMNS if c not in self.columns)
        self._made = self._lock.created and header is None
        if header is None:
            try:
                self._put(COLUMNS)
            except BaseException:
                self.close()
                raise

    def _put(self, cells: tuple[object, ...] | list[object]) -> None:
        fd = self._lock.file.fileno()
        size = None
        try:
            size = os.fstat(fd).st_size
            line = io.StringIO()
            csv.writer(line).writerow(cells)
            data = memoryview(line.getvalue().encode())
            while data:
                data = data[os.write(fd, data):]
        except OSError as exc:  # a full disk, a lost mount: stop, every earlier row intact
            if size is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # no half row left behind
            raise UsageError(f"{self.path}: writing failed ({exc.strerror or exc}); the {self.written} rows "
                             "before it are kept") from None

    def write(self, result: Result) -> None:
        cells = {k: cell(v) for k, v in asdict(result).items()}
        row = [cells.get(c, "") for c in self.columns]
        if self._replace:
            self._replace_with(row)
        else:
            self._put(row)
        self.written += 1

    def _replace_with(self, row: list[object]) -> None:
        """The header and `row` into a new file beside `path`, held, then renamed over it."""
        tmp = _beside(self.path)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot write there ({exc.strerror or exc}); the file is as it was") \
                from None
        old = self._lock
        try:
            self._lock = Lock(self.path, at=tmp)
            self._put(COLUMNS)
            self._put(row)
            os.replace(tmp, self.path)
        except BaseException as exc:
            if self._lock is not old:
                self._lock.close()
            self._lock = old
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, (OSError, UsageError)):
                raise UsageError(f"{self.path}: replacing it failed ({exc}); the file is as it was") from None
            raise
        old.close()
        self._replace = False

    def close(self) -> None:
        if self._made and not self.written:  # no header-only or empty file left behind
            with contextlib.suppress(OSError):
                self.path.unlink()
        self._lock.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drop_cut_off_row(path: Path, lock: Lock, quiet: bool = False) -> None:
    """Cut a last row that was cut off or is ragged (see `parse`) off the file, with an
    `InputWarning` (unless `quiet`), so that the next row never joins it."""
    data = path.read_bytes()
    rows = parse(path, data.decode(errors="surrogateescape"), warn=False)
    if not rows.cut_line:
        return
    keep = 0
    for _ in range(rows.cut_line - 1):
        keep = data.index(b"\n", keep) + 1
    os.ftruncate(lock.file.fileno(), keep)
    if not quiet:
        warnings.warn(InputWarning(rows.cut_message("cut from the file before appending")), stacklevel=3)


def _beside(path: Path) -> Path:
    """This process's new file beside `path`, to be renamed over it."""
    return path.with_name(f".{path.name[:200]}.{os.getpid()}.tmp")


def write_new(path: Path, content: str | Callable[[BinaryIO], None], param: str | None = None) -> None:
    """Write `content` (text, or what a function writes to a binary file: a figure) to the
    file `path` whole or not at all: into a new file beside it (mode `FILE_MODE`, as every
    file cebench writes), renamed into place. `UsageError` (naming `param`) when it cannot
    be written, nothing left behind: neither the new file nor the folders made for it."""
    tmp = _beside(path)
    # deepest first; os.path.exists: False, not an error, for a name the system refuses (too long)
    made = [p for p in (path.parent, *path.parent.parents) if not os.path.exists(p)]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as f:
                if isinstance(content, str):
                    f.write(content.encode("utf-8"))
                else:
                    content(f)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except BaseException as exc:
        for folder in made:
            with contextlib.suppress(OSError):  # not empty (another process wrote there), or gone
                folder.rmdir()
        if isinstance(exc, OSError):
            raise UsageError(f"{path}: cannot write there ({exc.strerror or exc})", param) from None
        raise


def existing_header(path: Path, advice: str = "; choose another --out") -> tuple[str, ...] | None:
    """The header of the cebench CSV at `path`, or None when there is no file (or an empty
    one). `UsageError` when `path` is a directory, cannot be read, or is not a cebench CSV
    (the message ends with `advice`)."""
    try:
        if path.is_dir():
            raise UsageError(f"{path} is a directory, not a CSV file")
        if not path.exists() or path.stat().st_size == 0:
            return None
        with path.open(newline="", encoding=READ_ENCODING) as f:
            header = tuple(next(csv.reader(f), []))
    except OSError as exc:  # a name too long, a folder that cannot be searched
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:  # a byte that is not UTF-8, in the header or a row below it
        raise UsageError(f"{path} exists and is not a cebench results CSV: {not_text(exc)}{advice}") from None
    except csv.Error:
        header = ()
    if any(c not in header for c in COLUMNS if c not in ADDED):
        raise UsageError(f"{path} exists and is not a cebench results CSV{advice}")
    return header


def check_out(path: Path) -> tuple[str, ...] | None:
    """`existing_header(path)`, after making sure rows could be written there (`writable`)."""
    header = existing_header(path)
    writable(path)
    return header


def writable(path: Path) -> None:
    """`UsageError` unless the file `path` could be written, found without creating or
    changing anything: an existing file must open for update, else the nearest existing
    folder above it must be a folder this process can create a file in (tried with a
    temporary file, removed at once)."""
    try:
        if path.exists():
            path.open("rb+").close()
            return
        folder = path.parent
        while not folder.exists():
            folder = folder.parent
        if len(path.name.encode()) > os.pathconf(folder, "PC_NAME_MAX"):
            raise OSError(36, os.strerror(36))
    except OSError as exc:
        raise UsageError(f"{path}: cannot write there ({exc.strerror or exc})") from None
    if not folder.is_dir():
        raise UsageError(f"{path}: cannot write there ({folder} is a file, not a folder)")
    try:
        tempfile.TemporaryFile(dir=folder).close()  # nameless where the OS allows, and gone at once
    except OSError as exc:
        raise UsageError(f"{path}: cannot write there ({exc.strerror or exc}: {folder})") from None


def point_key(config: Config) -> tuple[str, ...]:
    """`config`'s `KEY_COLUMNS` as their CSV cells."""
    return tuple(str(cell(config.value(c))) for c in KEY_COLUMNS)


@dataclass(frozen=True)
class Rows:
    """A CSV as written: its header, its rows as text cells and the line each ends on, and
    its last row where that was cut off or is ragged: left out, its text in `cut_off` and
    its line in `cut_line` (0 when the file ends with a whole row)."""

    path: Path
    header: tuple[str, ...]
    rows: list[dict[str, str]]
    lines: list[int] = field(default_factory=list)
    cut_off: str = ""
    cut_line: int = 0
    cells: int = 0  # of a ragged row left out (0: cut off mid-line)

    def cut_message(self, done: str = "left out") -> str:
        """One line on the row left out: the file, the line, why, what was `done` with it."""
        why = ("was cut off (a crash or a full disk?)" if self.cells < len(self.header)
               else f"has {self.cells} cells where the header has {len(self.header)}")
        text = self.cut_off if len(self.cut_off) <= 80 else self.cut_off[:79] + "…"
        return f"{self.path}: line {self.cut_line}: its last row {why} and is {done}: {text}"


def parse(path: Path, text: str, warn: bool = True, required: tuple[str, ...] = ()) -> Rows:
    """The rows of the CSV `text` (the file `path`, named in messages) under its first line,
    the header, as text cells; blank lines are skipped. The last row is left out when it was
    cut off (no line end) or is ragged (another number of cells than the header), with an
    `InputWarning` naming the file and line (with `warn`); a ragged row anywhere else is a
    `UsageError` naming its line, as is text that is not CSV, or a header without the
    `required` columns."""
    cut_off, cut_line = "", 0
    end = text.rfind("\n") + 1
    if end and text[end:].strip():  # a last line without its line end: cut off mid-write
        text, cut_off, cut_line = text[:end], text[end:], text.count("\n", 0, end) + 1
    reader = csv.reader(io.StringIO(text))
    records: list[tuple[int, list[str]]] = []
    try:
        for record in reader:
            if any(c.strip() for c in record):
                records.append((reader.line_num, record))
    except csv.Error as exc:
        raise UsageError(f"{path}: not a readable CSV (line {reader.line_num}: {exc})") from None
    header = tuple(records[0][1]) if records else ()
    missing = [c for c in required if c not in header]
    if missing:
        raise UsageError(f"{path}: missing column(s) {', '.join(missing)}")
    body = records[1:]
    cells = 0
    if not cut_off and body and len(body[-1][1]) != len(header):
        cut_line, last = body.pop()
        cut_off, cells = text.splitlines()[cut_line - 1], len(last)
    for line, row in body:
        if len(row) != len(header):
            raise UsageError(f"{path}: line {line} has {len(row)} cells where the header has {len(header)}")
    rows = Rows(path, header, [dict(zip(header, row, strict=True)) for _, row in body], [line for line, _ in body],
                cut_off.rstrip("\r"), cut_line, cells)
    if rows.cut_line and warn:
        warnings.warn(InputWarning(rows.cut_message()), stacklevel=2)
    return rows


def read_rows(path: Path, warn: bool = True) -> Rows:
    """The rows of the cebench CSV at `path`, cells exactly as written (nothing is changed
    on disk; see `parse`). `UsageError` for anything that is not a readable cebench CSV."""
    header = existing_header(path, advice="")
    if header is None:
        raise UsageError(f"{path}: no such file, or an empty one")
    return parse(path, read_text(path), warn)


def read_text(path: Path) -> str:
    """The text of the CSV at `path`. `UsageError` (`not_text`) when it cannot be read or is
    not UTF-8."""
    try:
        return path.read_text(encoding=READ_ENCODING)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: {not_text(exc)}") from None


def not_text(exc: OSError | UnicodeDecodeError) -> str:
    """Why a CSV cannot be read as text: for a byte that is not UTF-8, the byte and its offset
    in the file."""
    return f"not a readable text file ({str(exc).splitlines()[0]})"


def written_with(row: dict[str, str]) -> int | None:
    """The schema a row (text cells) was written with: 1 where the cell is blank or absent
    (files from before the column), None where it is not a number."""
    version = row.get("schema_version", "").strip() or "1"
    return int(version) if version.isdigit() else None


def predicted(row: dict[str, str]) -> bool:
    """Whether a row (text cells) was predicted (`cebench predict`), not measured."""
    return row.get("mem_method") == PREDICTED or row.get("device_name", "").startswith("predicted for ")


def one_kind(rows: Rows, predictions: bool) -> None:
    """`UsageError` unless every row of `rows` is a prediction (`predictions`) or none is: a
    results CSV holds one kind of rows, so that no view shows a prediction for a measurement."""
    line = next((n for n, r in zip(rows.lines, rows.rows, strict=True) if predicted(r) != predictions), None)
    if line is not None:
        held, given = (("measurements", "predictions") if predictions
                       else ("predictions (cebench predict)", "measurements"))
        raise UsageError(f"{rows.path} holds {held} (line {line}): {given} go in a CSV of their own", "out")


def done_keys(rows: Rows, statuses: tuple[str, ...] = DONE) -> set[tuple[str, ...]]:
    """Keys (`point_key`) of the points measured in `rows` with a status in `statuses`
    (default `DONE`; predicted rows do not count)."""
    return {tuple(r.get(c, BEFORE.get(c, "")) for c in KEY_COLUMNS) for r in rows.rows
            if r["status"] in statuses and not predicted(r)}
