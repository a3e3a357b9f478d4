"""The CSV keeps every step time, carries its schema version, and reads across versions:
files of the previous release (the committed baseline) and files with columns a later
release may add."""
from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cebench.cli import app
from cebench.store.results import ADDED, COLUMNS, SCHEMA_VERSION, load, samples
from conftest import SMALL, rewrite, sweep_csv

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "results" / "baseline.csv"  # written by cebench 0.1.0: schema 1


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    return sweep_csv(tmp_path_factory.mktemp("schema") / "r.csv", "--batch", "1,2", "--context", "16",
                     "--repeats", "5")


def test_rows_keep_every_step_time_and_their_schema_version(measured):
    rows = list(csv.DictReader(measured.open()))
    assert rows and all(r["schema_version"] == str(SCHEMA_VERSION) for r in rows)
    for r in rows:
        times = [float(v) for v in r["time_ms_samples"].split()]
        assert len(times) == int(r["repeats"]) == 5
        # The statistics are those of the samples (both rounded to 6 significant digits).
        assert float(r["time_ms_median"]) == pytest.approx(statistics.median(times), rel=1e-5)
        assert float(r["time_ms_min"]) == pytest.approx(min(times), rel=1e-5)
    frame = load(measured)
    assert [len(samples(c)) for c in frame["time_ms_samples"]] == [5] * len(rows)


def test_the_previous_release_csv_loads_everywhere(tmp_path):
    header = BASELINE.read_text().splitlines()[0].split(",")
    assert "time_ms_samples" not in header and "schema_version" not in header
    frame = load(BASELINE)
    assert set(frame["schema_version"]) == {1} and set(frame["time_ms_samples"]) == {""}
    runner = CliRunner()
    for args in (["show", BASELINE], ["plot", BASELINE, "--out-dir", tmp_path / "fig"],
                 ["check", BASELINE, "--baseline", BASELINE, "--time-tol", "5%"]):
        result = runner.invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, (args, result.output)
    assert (tmp_path / "fig" / "memory-vs-batch.png").is_file()


def test_new_results_check_against_an_old_baseline(tmp_path):
    out = tmp_path / "new.csv"
    runner = CliRunner()
    grid = ["--device", "cpu", "--variant", "dense,chunked", "--batch", "1,4", "--context", "64", "--vocab", "4096",
            "--d-model", "32", "--ce-chunk", "64", "--repeats", "1", "--threads", "1", "--out", str(out)]
    assert runner.invoke(app, ["sweep", *grid]).exit_code == 0
    result = runner.invoke(app, ["check", str(out), "--baseline", str(BASELINE), "--mem-tol", "0%"])
    assert result.exit_code == 0, result.output


def test_a_column_from_a_later_release_is_kept_and_ignored(measured, tmp_path):
    future = rewrite(measured, tmp_path / "future.csv", lambda f: f.assign(joules="1.5", schema_version="9"))
    frame = load(future)
    assert "joules" in frame.columns and len(frame) == len(load(measured))
    assert CliRunner().invoke(app, ["show", str(future)]).exit_code == 0
    # Appending keeps the file's own header: the unknown column is left empty.
    result = CliRunner().invoke(app, ["sweep", *SMALL, "--variant", "dense", "--batch", "1", "--context", "16",
                                      "--out", str(future)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(future.open()))
    assert list(rows[0]) == list(pd.read_csv(measured, nrows=0).columns) + ["joules"]
    assert rows[-1]["joules"] == "" and rows[-1]["schema_version"] == str(SCHEMA_VERSION)


def test_appending_to_a_previous_release_csv_keeps_its_columns_and_warns(tmp_path):
    old = tmp_path / "old.csv"
    old.write_bytes(BASELINE.read_bytes())
    result = CliRunner().invoke(app, ["sweep", *SMALL, "--variant", "dense", "--batch", "1", "--context", "16",
                                      "--out", str(old)])
    assert result.exit_code == 0, result.output
    assert "written by an older cebench" in result.stderr and "time_ms_samples" in result.stderr
    lines = old.read_text().splitlines()
    assert lines[0] == BASELINE.read_text().splitlines()[0] and len(lines) == len(BASELINE.read_text().splitlines()) + 1
    assert len(load(old)) == len(lines) - 1
    assert set(COLUMNS) - set(lines[0].split(",")) == set(ADDED)
