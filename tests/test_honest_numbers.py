"""No impossible number is printed: a loss share outside [0, 100 %] is noise, not data; a
budget without a unit that would be a few bytes is refused with a hint; the API takes the
budget text the command line takes; `show --format json` gives the rows themselves."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from cebench import api
from cebench.analyze.compare import loss_share, share_is_noise, view
from cebench.cli import app
from cebench.render.report import results_table
from conftest import sweep_csv

TINY = ["--target", "cpu", "--context", "8", "--vocab", "64", "--d-model", "8", "--variant", "dense"]


@pytest.mark.parametrize("step,body,share,noise", [(100.0, 25.0, 0.75, False), (100.0, 100.0, 0.0, False),
                                                   (100.0, 408.0, None, True), (0.0, 5.0, None, False),
                                                   (None, 5.0, None, False)])
def test_a_share_outside_0_and_1_is_noise(step, body, share, noise):
    assert loss_share(step, body) == share and share_is_noise(step, body) is noise


def test_the_table_says_noise_where_the_body_step_took_longer(tmp_path):
    frame = api.load(sweep_csv(tmp_path / "s.csv", "--batch", "1"))
    frame["model"], frame["optimizer"] = "small.json", "adamw"
    frame["step_peak_bytes"], frame["body_peak_bytes"] = 1000, 400
    frame["body_time_ms"] = frame["time_ms_median"] * 4.08  # the body alone "slower" than the whole step
    rows = view(frame)
    assert rows["loss_time_share"].isna().all() and rows["loss_time_noise"].all()
    assert rows["loss_share"].tolist() == [0.6] * len(rows) and not rows["loss_share_noise"].any()
    table = results_table(frame)
    cells = [str(c) for row in table.rows if not isinstance(row, str) for c in row]
    assert "noise" in cells and not any(c.startswith("-") and c.endswith("%") for c in cells)
    assert any("no share to show" in n for n in table.notes if isinstance(n, str))


@pytest.mark.parametrize("budget", ["80", "512", "0.4"])
def test_a_budget_of_a_few_bytes_is_refused_with_a_hint(budget):
    result = CliRunner().invoke(app, ["fit", "--budget", budget, *TINY])
    assert result.exit_code == 2
    assert "--budget:" in result.stderr and ("give a unit" in result.stderr or "(at least 1 B)" in result.stderr)


def test_the_api_takes_the_budget_as_the_command_line_does():
    shape = dict(target="cpu", context=8, vocab=64, d_model=8, variant="dense", max_batch=64)
    as_text, as_bytes = api.fit("1MiB", **shape), api.fit(2**20, **shape)
    assert as_text.budget == as_bytes.budget == 2**20
    assert [f.batch for f in as_text.fits] == [f.batch for f in as_bytes.fits]
    with pytest.raises(api.UsageError, match="give a unit"):
        api.fit("80", **shape)


def test_show_json_gives_every_column_of_each_row(tmp_path):
    csv = sweep_csv(tmp_path / "s.csv", "--batch", "1", "--repeats", "3")
    records = json.loads(CliRunner().invoke(app, ["show", str(csv), "--format", "json"]).stdout)
    columns = set(pd.read_csv(csv).columns)
    for record in records:
        assert columns <= set(record) and {"mem_vs_base", "time_vs_base"} <= set(record)
        assert len(record["time_ms_samples"]) == 3 and all(isinstance(t, float) for t in record["time_ms_samples"])
        assert record["torch_version"] and record["threads"] >= 1


@pytest.mark.parametrize("cores,load,said", [(2, 3.5, True), (2, 1.5, False), (16, 30.0, False)])
def test_the_plan_line_says_when_other_processes_load_a_small_machine(monkeypatch, tmp_path, cores, load, said):
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    monkeypatch.setattr("os.getloadavg", lambda: (load, load, load))
    result = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--variant", "dense", "--batch", "1", "--context",
                                      "8", "--vocab", "64", "--d-model", "8", "--repeats", "1", "--out",
                                      str(tmp_path / "s.csv")])
    assert result.exit_code == 0, result.output
    assert (f"this machine is busy (load {load:.1f} on {cores} cores)" in result.stderr) is said


@pytest.mark.needs("triton")
def test_a_chunk_reads_as_a_whole_number_beside_a_row_without_one():
    rows = api.predict(variant="chunked,dense-compiled", target="h100-80gb", batch=1, context=64, vocab=1000,
                       d_model=16, dtype="bf16", ce_chunk=4096)
    assert {r.variant: r.status for r in rows} == {"chunked": "ok", "dense-compiled": "ok"}
    from cebench.store.frame import to_frame

    table = results_table(to_frame(rows))
    chunks = [row[1] for row in table.rows if not isinstance(row, str)]
    assert chunks == ["4,096", ""]
