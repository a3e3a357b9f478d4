"""The CSV keeps every step time, carries its schema version, and reads across versions:
files of the previous release (the committed baseline) and files with columns a later
release may add."""
from __future__ import annotations

import csv
import dataclasses
import pickle
import statistics
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cebench.cli import app
from cebench.store import schema
from cebench.store.files import ResultWriter
from cebench.store.frame import load, samples, to_frame
from cebench.store.schema import ADDED, COLUMNS, SCHEMA_VERSION
from conftest import SMALL, cpu_config, rewrite, sweep_csv

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
    future = rewrite(measured, tmp_path / "future.csv", lambda f: f.assign(joules="1.5", schema_version="99"))
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


# The declarations and what is derived from them: fast, nothing measured.

def test_a_columns_kind_puts_it_among_the_int_or_float_columns():
    assert COLUMNS == tuple(c.name for c in schema.DECLARED) and len(set(COLUMNS)) == len(COLUMNS)
    for column in schema.DECLARED:
        assert (column.name in schema.INT_COLUMNS) == (column.kind == "int")
        assert (column.name in schema.FLOAT_COLUMNS) == (column.kind == "float")
        assert (column.name in schema.SAMPLES_COLUMNS) == (column.kind == "samples")
    assert schema.SAMPLES_COLUMNS == ("time_ms_samples",)
    assert {"batch", "peak_delta_bytes", "flops", "schema_version"} <= set(schema.INT_COLUMNS)
    assert {"time_ms_median", "tflops_per_s", "matmul_floor_ms"} <= set(schema.FLOAT_COLUMNS)


def test_added_columns_and_the_schema_version_come_from_the_declarations():
    assert ADDED == {"time_ms_samples": 2, "schema_version": 2, "flops": 3, "tflops_per_s": 3,
                     "matmul_floor_ms": 3, "shard": 3, "ignore_frac": 4, "softcap": 5, "label_smoothing": 5,
                     "z_loss": 5, "reduction": 5, "note": 5, "grads": 5, "retain_graph": 5, "target": 5,
                     "predicted_floor_ms": 5, "grid": 5, "model": 6, "optimizer": 6, "activation_checkpointing": 6,
                     "n_params": 6, "model_state_bytes": 6, "step_peak_bytes": 6, "body_peak_bytes": 6,
                     "body_time_ms": 6, "fsdp": 7, "compile": 8, "predicted_time_ms": 9,
                     "predicted_tokens_per_s": 9, "tp": 10}
    assert SCHEMA_VERSION == 10 == max(c.added for c in schema.DECLARED)
    assert ADDED == {c.name: c.added for c in schema.DECLARED if c.added > 1}
    assert set(schema.BEFORE) == set(ADDED) and schema.BEFORE["schema_version"] == "1"
    # every row written before these axes existed had them off: no padding, plain mean CE, fresh gradients, the
    # loss alone
    semantics = {"ignore_frac": "0", "softcap": "0", "label_smoothing": "0", "z_loss": "0", "reduction": "mean",
                 "grads": "none", "retain_graph": "no", "model": "none", "optimizer": "none",
                 "activation_checkpointing": "none", "fsdp": "1", "compile": "none", "tp": "1"}
    assert {k: schema.BEFORE[k] for k in semantics} == semantics
    assert {v for k, v in schema.BEFORE.items() if k not in ("schema_version", *semantics)} == {""}


def test_an_axis_column_is_derived_from_the_axis_and_keys_every_point():
    from cebench.core.axes import AXES

    for axis in AXES:
        column = schema.BY_NAME[axis.name]
        assert (column.kind, column.doc, column.added) == (axis.kind, axis.doc, axis.added)
    assert schema.KEY_COLUMNS[3:] == tuple(a.name for a in AXES)


def test_what_a_row_needs_exists_in_every_schema():
    # a column an older file lacks can key a point only where it reads as a value there
    for names in (schema.KEY_COLUMNS, schema.SHAPE_COLUMNS, schema.REQUIRED_VALUES, schema.OK_MEMORY,
                  schema.OK_TIME):
        assert set(names) <= set(COLUMNS)
        assert all(schema.BEFORE[c] != "" for c in set(names) & set(ADDED))


def test_status_values_are_the_csv_cells():
    Status = schema.Status
    assert [s.value for s in Status] == ["ok", "oom", "error", "timeout", "unsupported"]
    assert Status.OK == "ok" and "oom" in schema.FAILED and "ok" in schema.DONE and "unsupported" not in schema.FAILED
    assert set(schema.FAILED) == {"oom", "error", "timeout"} and set(schema.DONE) == {"ok", "oom"}
    assert str(Status.TIMEOUT) == f"{Status.TIMEOUT}" == "timeout" and hash(Status.OK) == hash("ok")
    assert Status("oom") is Status.OOM and schema.STATUSES == tuple(Status)


def test_result_is_generated_from_the_columns(tmp_path):
    assert tuple(f.name for f in dataclasses.fields(schema.Result)) == COLUMNS
    result = schema.Result.blank(cpu_config(ce_chunk=None), "a cpu")
    config_columns = [c.name for c in schema.DECLARED if c.source == "config"]
    assert {c: getattr(result, c) for c in config_columns} == {c: getattr(cpu_config(), c) for c in config_columns}
    assert result.status is schema.Status.OK and result.device_name == "a cpu"
    assert result.schema_version == SCHEMA_VERSION and result.torch_version and result.threads >= 1
    measured = [c for c in schema.DECLARED if c.source == "measured"]
    assert all(getattr(result, c.name) == ("" if c.kind == "text" else None) for c in measured)
    assert pickle.loads(pickle.dumps(result)) == result  # it crosses process boundaries (isolate)
    with pytest.raises(TypeError):
        schema.Result(variant="dense")  # the config and run columns are required
    # Written and read back: the Status is its string, the samples one cell.
    result.status, result.time_ms_samples = schema.Status.OOM, (1.5, 2.0)
    with ResultWriter(tmp_path / "r.csv") as writer:
        writer.write(result)
    row = next(csv.DictReader((tmp_path / "r.csv").open()))
    assert row["status"] == "oom" and row["time_ms_samples"] == "1.5 2" and row["peak_bytes"] == ""
    frame = to_frame([result])
    assert type(frame["status"][0]) is str and frame["time_ms_samples"][0] == "1.5 2"


def test_the_readme_holds_the_generated_column_reference():
    readme = (ROOT / "results" / "README.md").read_text()
    assert schema.between(readme) == schema.reference(), (
        "results/README.md's column table is out of date: run `python -m cebench.store.schema --readme "
        "results/README.md`")
    assert schema.splice(readme) == readme
    lines = schema.reference().splitlines()
    assert len(lines) == 2 + len(COLUMNS) and all(f"`{c}`" in line for c, line in zip(COLUMNS, lines[2:], strict=True))


def test_the_reference_prints_and_splices(capsys, tmp_path):
    assert schema.main([]) == 0 and capsys.readouterr().out == schema.reference()
    stale = tmp_path / "README.md"
    stale.write_text(f"intro\n{schema.START}\n| old |\n{schema.END}\noutro\n")
    assert schema.main(["--readme", str(stale)]) == 0
    assert stale.read_text() == f"intro\n{schema.START}\n{schema.reference()}{schema.END}\noutro\n"
    with pytest.raises(ValueError):
        schema.between("no markers")


def test_a_count_beyond_int64_is_kept_as_a_float():
    """A prediction at N = 10¹⁰ rows, vocab 256,000, d_model 8,192 counts 1.3·10²⁰ FLOPs."""
    row = schema.Result.blank(cpu_config("dense"), "predicted")
    row.flops, row.peak_bytes = 6 * 10**10 * 256_000 * 8192, 7
    uncounted = schema.Result.blank(cpu_config("chunked"), "predicted")  # flops empty
    frame = to_frame([row, uncounted])
    assert frame["flops"].dtype == "float64" and frame["flops"].iloc[0] == pytest.approx(1.258e20, rel=1e-3)
    assert frame["peak_bytes"].dtype == "Int64"


def test_a_whole_number_beyond_int64_in_a_file_loads_as_a_float(tmp_path):
    """2⁶³ in a column of whole numbers beside an empty cell loads as float64 (pandas could not
    cast it to int64 and raised from inside)."""
    def edit(frame: pd.DataFrame) -> None:
        frame.loc[0, "flops"], frame.loc[1, "flops"] = str(2**63), ""

    frame = load(rewrite(Path(__file__).resolve().parents[1] / "results" / "baseline.csv", tmp_path / "big.csv", edit))
    assert frame["flops"].dtype == "float64" and frame["flops"].iloc[0] == 2.0**63 and pd.isna(frame["flops"].iloc[1])
    assert frame["peak_bytes"].dtype == "Int64" and frame["peak_bytes"].notna().all()
