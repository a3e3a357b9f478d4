"""Reading a results CSV back: `cebench show`, and malformed files as one-line errors with exit 2."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner, Result

from cebench.cli import app
from cebench.store.schema import COLUMNS
from conftest import SMALL, rewrite

HEADER = ",".join(COLUMNS)


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[Path, str]:
    """A real 2-row CSV and what `cebench sweep` printed while writing it."""
    path = tmp_path_factory.mktemp("load") / "results.csv"
    result = CliRunner().invoke(app, ["sweep", *SMALL, "--batch", "2", "--context", "16", "--out", str(path)])
    assert result.exit_code == 0, result.output
    return path, result.stdout


def invoke(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def body(output: str, upto: str) -> list[str]:
    """The table's variant rows (the lines between the header rule and the notes), each cut
    after the column headed `upto` (right-justified, so its cells end where it ends)."""
    lines = output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("variant"))
    end = lines[header].index(upto) + len(upto)
    rows = []
    for line in lines[header + 2:]:
        if line.startswith("──"):
            continue
        if not line[:1].isalnum() or " " not in line or line.startswith(("peak Δ =", "~ noisy")):
            break
        rows.append(line[:end])
    return rows


def test_show_prints_the_table_sweep_printed(measured):
    path, sweep_output = measured
    result = invoke("show", path)
    assert result.exit_code == 0, result.output
    shown, swept = body(result.stdout, "peak"), body(sweep_output, "peak")
    assert [r.split()[0] for r in shown] == ["dense", "chunked"]
    # Variant, ce_chunk and the memory columns are exact; times went through the CSV's 6 digits.
    assert shown == swept
    assert "batch 2 × context 16 · vocab 1,000 · d_model 16" in result.stdout
    assert f"2 rows from {path}" in result.stdout


def test_a_csv_saved_with_a_byte_order_mark_reads_as_it_was(measured, tmp_path):
    """A spreadsheet's "CSV UTF-8" starts with a byte-order mark: show, check and merge read
    it as the file it was saved from."""
    path, _ = measured
    marked = tmp_path / "marked.csv"
    marked.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert body(invoke("show", marked).stdout, "peak") == body(invoke("show", path).stdout, "peak")
    check = invoke("check", marked, "--baseline", path, "--mem-tol", "0%")
    assert check.exit_code == 0 and "2 points matched" in check.stdout, check.output
    merged = invoke("merge", marked, "--out", tmp_path / "merged.csv")
    assert merged.exit_code == 0, merged.output


def test_show_uses_the_last_row_of_a_repeated_configuration(measured, tmp_path):
    path, _ = measured
    def append(frame: pd.DataFrame) -> pd.DataFrame:
        again = frame[frame["variant"] == "dense"].assign(peak_delta_bytes="1073741824")
        return pd.concat([frame, again])

    twice = rewrite(path, tmp_path / "twice.csv", append)
    result = invoke("show", twice)
    assert result.exit_code == 0, result.output
    dense = [r for r in body(result.stdout, "peak Δ") if r.split()[0] == "dense"]
    assert len(dense) == 1 and dense[0].endswith("1.00 GiB")
    assert "1 repeated row(s) hidden, the last of each shown" in result.stdout
    values = json.loads(invoke("show", twice, "--format", "json").stdout)
    assert {r["variant"]: r["peak_delta_bytes"] for r in values}["dense"] == 1073741824


def _cells(column: str, value: str, row: int = 0) -> Callable[[Path], str]:
    """The measured CSV with one cell replaced (row 0 is the CSV's second line)."""
    def make(src: Path) -> str:
        frame = pd.read_csv(src, dtype=str, keep_default_na=False)
        frame.loc[row, column] = value
        return frame.to_csv(index=False)
    return make


def _without(*columns: str) -> Callable[[Path], str]:
    def make(src: Path) -> str:
        return pd.read_csv(src, dtype=str, keep_default_na=False).drop(columns=list(columns)).to_csv(index=False)
    return make


def _truncated(src: Path) -> str:
    """The first row cut off right after its status, with rows after it (a cut-off last row
    is left out with a warning: tests/test_faults.py)."""
    lines = src.read_text().splitlines()
    cut = ",".join(lines[1].split(",")[: COLUMNS.index("status") + 1])
    return "\n".join(lines[:1] + [cut] + lines[2:]) + "\n"


def _ragged(src: Path) -> str:
    """A row with a cell too many before the last row."""
    lines = src.read_text().splitlines()
    return "\n".join(lines[:-1] + ["x," * len(COLUMNS) + "x", lines[-1]]) + "\n"


MALFORMED: list[tuple[str, Callable[[Path], str | bytes], str]] = [
    ("empty", lambda src: "", "the file is empty"),
    ("blank lines", lambda src: "\n  \n\n", "the file is empty"),
    ("header only", lambda src: HEADER + "\n", "the file has a header but no rows"),
    ("missing columns", _without("error", "peak_delta_bytes"), "missing column(s) error, peak_delta_bytes"),
    ("not a cebench csv", lambda src: "a,b\n1,2\n", "missing column(s) variant, workload"),
    ("non-numeric bytes", _cells("peak_delta_bytes", "lots", row=1),
     "row 3: column 'peak_delta_bytes' has non-numeric value 'lots'"),
    ("non-numeric size", _cells("batch", "two"), "row 2: column 'batch' has non-numeric value 'two'"),
    ("non-numeric time", _cells("time_ms_median", "fast"),
     "row 2: column 'time_ms_median' has non-numeric value 'fast'"),
    ("non-numeric step time", _cells("time_ms_samples", "1.25 fast 1.5"),
     "row 2: column 'time_ms_samples' has non-numeric value 'fast'"),
    ("negative step time", _cells("time_ms_samples", "1.25 -2", row=1),
     "row 3: column 'time_ms_samples' has value '-2', which it cannot hold (finite, not negative)"),
    ("fractional size", _cells("vocab", "1000.5"), "column 'vocab' must hold whole numbers"),
    ("unknown status", _cells("status", "fine"), "column 'status' has unknown value(s) fine"),
    ("empty key", _cells("variant", ""), "row 2: column 'variant' is empty"),
    ("ok row without memory", _cells("peak_delta_bytes", ""),
     "row 2: status is ok but column 'peak_delta_bytes' is empty"),
    ("truncated row", _truncated, f"line 2 has {COLUMNS.index('status') + 1} cells where the header has "
                                  f"{len(COLUMNS)}"),
    ("ragged row", _ragged, f"line 3 has {len(COLUMNS) + 1} cells where the header has {len(COLUMNS)}"),
    ("binary", lambda src: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not a readable text file"),
]


@pytest.mark.parametrize("make,message", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
@pytest.mark.parametrize("command", ["show", "plot", "check", "check --baseline"])
def test_malformed_csv_is_one_line_and_exit_2(measured, tmp_path, make, message, command):
    path, _ = measured
    bad = tmp_path / "bad.csv"
    content = make(path)
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    args = {"show": ["show", bad], "plot": ["plot", bad, "--out-dir", tmp_path / "out"],
            "check": ["check", bad, "--baseline", path], "check --baseline": ["check", path, "--baseline", bad]}
    result = invoke(*args[command])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and f"cebench: error: {bad}: {message}" in result.stderr
    assert not (tmp_path / "out").exists()


def test_missing_file(tmp_path):
    result = invoke("show", tmp_path / "nope.csv")
    assert result.exit_code == 2 and f"{tmp_path / 'nope.csv'}: no such file" in result.stderr


def test_a_directory_is_not_a_csv(tmp_path):
    result = invoke("show", tmp_path)
    assert result.exit_code == 2 and f"{tmp_path} is a directory, not a CSV file" in result.stderr


def test_installed_entry_point_exits_2_without_traceback(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    cebench = Path(sys.executable).parent / "cebench"
    proc = subprocess.run([str(cebench), "plot", str(empty)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"cebench: error: {empty}: the file is empty"
    assert proc.stdout == "" and not (tmp_path / "empty").exists()
