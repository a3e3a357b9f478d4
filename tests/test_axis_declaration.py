"""An axis is one declaration plus its use: a throwaway axis, added to a copy of the package
as one `Axis(...)` and nothing else, reaches the command line, the CSV, the table's group
heading, the Python API and `explain --json`; and what is derived from the declarations
(the typed class statements of `Config` and `Result`) is current in this package."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cebench
from cebench.cli import app
from cebench.core import generated

# The throwaway axis: a loss semantics (a keyword of the variants that take it), schema 7.
DECLARATION = '''
    Axis(name="logit_scale", type=float, role=Role.SEMANTICS, parse=parse_nonnegative, defaults={"*": "1"}, off=1.0,
         help="Logit scales s (the loss sees s × logits).", one="Logit scale s.", doc="logits × s before the loss",
         added=10, keyword=True, label="scale {:g}", short="s {:g}", verify="2"),'''

USER_LOSS = '''
import torch.nn.functional as F


def scaled_ce(h, weight, targets, ce_chunk=None, *, logit_scale=1.0):
    return F.cross_entropy((h @ weight.T).float() * logit_scale, targets)
'''

# Run in the copy, in one interpreter: the command line (in process), the CSV, the API, explain --json.
SCRIPT = '''
import json, sys
from typer.testing import CliRunner
import cebench
from cebench.cli import app
from cebench.core import generated

grid = ["--device", "cpu", "--batch", "1", "--context", "8", "--vocab", "64", "--d-model", "8", "--ce-chunk", "4",
        "--threads", "1"]
runner = CliRunner()
swept = runner.invoke(app, ["sweep", "--variant", "scaled_ce.py:scaled_ce,dense", *grid, "--logit-scale", "1,2",
                            "--repeats", "1", "--warmup", "1", "--wide", "--out", "swept.csv"])
helps = {c: runner.invoke(app, [c, "--help"], env={"COLUMNS": "200"}).output for c in ("sweep", "predict", "verify")}
(row,) = cebench.predict(variant="scaled_ce.py:scaled_ce", target="cpu", batch=1, context=8, vocab=64, d_model=8,
                         ce_chunk=4, logit_scale=2)
explained = runner.invoke(app, ["explain", "--variant", "scaled_ce.py:scaled_ce", *grid[:-2], "--logit-scale", "3",
                                "--json"])
print(json.dumps({"sweep": [swept.exit_code, swept.output], "helps": helps,
                  "predicted": [row.status, row.logit_scale, row.peak_delta_bytes],
                  "explain": [explained.exit_code, explained.output],
                  "stale": sorted(p.name for p in generated.stale())}))
'''


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A copy of the package with the throwaway axis declared: one `Axis(...)`, nothing else."""
    root = tmp_path_factory.mktemp("declared")
    shutil.copytree(Path(cebench.__file__).parent, root / "cebench", ignore=shutil.ignore_patterns("__pycache__"))
    axes = root / "cebench" / "core" / "axes.py"
    text = axes.read_text()
    end = "\n)\nBY_NAME: dict[str, Axis]"
    assert text.count(end) == 1
    axes.write_text(text.replace(end, DECLARATION + end))
    (root / "scaled_ce.py").write_text(USER_LOSS)
    return root


@pytest.fixture(scope="module")
def ran(copy) -> dict:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_declared_axis_is_an_option_of_every_command_that_takes_its_role(ran):
    for command in ("sweep", "predict", "verify"):
        assert "--logit-scale" in ran["helps"][command], command
    assert "Default: 2." in ran["helps"]["verify"]  # verify's default from the declaration


@pytest.mark.slow
def test_a_declared_axis_is_a_csv_column_and_a_group_heading(ran, copy):
    code, output = ran["sweep"]
    assert code == 0, output
    header, *rows = (copy / "swept.csv").read_text().splitlines()
    columns = header.split(",")
    assert columns[-1] == "logit_scale"  # appended after every column of the schemas before it
    cells = [dict(zip(columns, r.split(","), strict=True)) for r in rows]
    assert sorted((c["variant"], c["logit_scale"], c["status"], c["schema_version"]) for c in cells) == [
        ("dense", "1", "ok", "10"), ("dense", "2", "unsupported", "10"),
        ("scaled_ce.py:scaled_ce", "1", "ok", "10"), ("scaled_ce.py:scaled_ce", "2", "ok", "10")]
    headings = [line for line in output.splitlines() if line.startswith("──")]
    assert len(headings) == 2 and "scale 2" in headings[1] and "scale" not in headings[0]
    assert "dense does not support --logit-scale 2" in output  # dense does not implement it: its row says so


@pytest.mark.slow
def test_a_declared_axis_reaches_the_api_and_explain_json(ran):
    status, scale, peak = ran["predicted"]
    assert (status, scale) == ("ok", 2.0) and peak > 0
    code, output = ran["explain"]
    assert code == 0, output
    (explanation,) = json.loads(output)["explanations"]
    assert explanation["logit_scale"] == 3.0


@pytest.mark.slow
def test_the_typed_class_statements_follow_the_declarations(ran):
    assert ran["stale"] == ["config.py", "schema.py"]  # the copy's: `make types` would rewrite both
    assert generated.stale() == []  # this package's are current (`make types` rewrites them)


@pytest.mark.parametrize("grads", ["none,keep", "keep,none"])
def test_each_steady_state_has_its_own_group_heading(tmp_path, grads):
    result = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--variant", "dense", "--batch", "1", "--context",
                                      "8", "--vocab", "64", "--d-model", "8", "--grads", grads, "--repeats", "1",
                                      "--out", str(tmp_path / "g.csv")], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    headings = [line.strip("─ ") for line in result.output.splitlines() if line.startswith("──")]
    assert len(headings) == 2 and len(set(headings)) == 2
    assert [("grads keep" in h) for h in headings] == [g == "keep" for g in grads.split(",")]
