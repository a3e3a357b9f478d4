"""The README's findings table: each row names one command, quotes what it prints, and (the
rows of `findings.IN_SUITE`, which take seconds) prints it now. `results/findings.py` runs
every row, the sweeps too, and writes the rows' times."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "results"))

import findings  # noqa: E402

ROWS = findings.rows(findings.README.read_text())


def test_every_row_names_one_command_and_quotes_what_it_prints():
    assert len(ROWS) >= 10
    for row in ROWS:
        assert row.command.startswith(("cebench ", "make ", "python results/")), row.command
        assert row.figures(), f"{row.command}: quotes nothing it prints"
        assert row.time, row.line
    for timed in findings.TIMED:  # each time the script fills in stands in exactly one row
        assert sum(t is timed for r in ROWS for t, _ in r.timed()) == 1, timed
    assert set(findings.IN_SUITE) <= {r.command for r in ROWS}
    text = findings.README.read_text()
    for match in findings.INLINE_TIME.finditer(text):  # each time in the prose names an output block
        assert findings.blocks_command(text, match["slug"]).startswith("cebench ")


def test_a_cell_is_read_under_its_header_in_its_group():
    output = ("cebench sweep · cpu\n"
              "variant  chunk  peak Δ     time  time/row  status\n"
              "━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━\n"
              "── batch 16 × context 128 ──────────────────────────\n"
              "dense          9.0 MiB  1.00 s    500 µs  ok\n"
              "chunked  128  8.82 MiB  105 ms~   51.4 µs  ok\n"
              "── batch 128 × context 128 ─────────────────────────\n"
              "chunked  128  65.4 MiB  4.13 s     252 µs  ok\n")
    timed = findings.Timed("", "", "time/row", "chunked", "128", "batch 128 ×")
    assert findings.cell(output, timed) == "252 µs"
    assert findings.cell(output, findings.Timed("", "", "time", "chunked", "128", "batch 16 ×")) == "105 ms"
    assert findings.cell(output, findings.Timed("", "", "time", "dense")) == "1.00 s"
    with pytest.raises(LookupError, match="no column headed"):
        findings.cell(output, findings.Timed("", "", "TFLOP/s", "dense"))


def test_a_figure_wrapped_at_80_columns_still_counts():
    row = findings.Row("", "", "`peak Δ 589 MiB = 617,558,024 B`", "`cebench explain`", "–")
    assert findings.missing(row, "peak Δ 589 MiB =\n617,558,024 B at event 9") == []
    assert findings.missing(row, "peak Δ 590 MiB = 617,558,024 B") == ["peak Δ 589 MiB = 617,558,024 B"]


@pytest.mark.needs()
@pytest.mark.parametrize("row", [pytest.param(r, marks=[pytest.mark.slow] if "--model" in r.command else [])
                                 for r in ROWS if r.command in findings.IN_SUITE],
                         ids=lambda r: shlex.split(r.command)[1])
def test_a_row_prints_what_it_quotes(row, at_width):
    if row.command.startswith("python "):  # a results script: run as the script runs it
        output = findings.run(row.command)[0]
    else:
        output = at_width(shlex.split(row.command)[1:], findings.WIDTH).output  # verify exits 1: the finding
    assert findings.missing(row, output) == [], output


def test_help_and_a_bad_option_run_no_row(capsys, monkeypatch):
    monkeypatch.setattr(findings, "run", lambda command: pytest.fail(f"ran {command}"))
    assert findings.main(["--help"]) == 0 and "findings.py --check" in capsys.readouterr().out
    assert findings.main(["--chek"]) == 2 and "unknown option --chek" in capsys.readouterr().err
