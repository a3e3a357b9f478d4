"""Honest mistakes with what was added since the robustness issue (#51 item 6): the logits
workload beside a model or a hidden size, the time columns of a CSV, a world size past any
cluster, a headroom near 100 %: one line, exit 2, no file; or what the row says is right."""
from __future__ import annotations

import csv
from fractions import Fraction
from pathlib import Path

import pytest

from cebench import api
from cebench.core.units import format_percent
from conftest import invoke, one_error

TINY = ('{"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, '
        '"num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 64}')
SHAPE = ["--batch", "1", "--context", "8"]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(TINY)
    return path


@pytest.mark.parametrize("command", [["sweep", "--device", "cpu"], ["predict", "--target", "h100-80gb"]],
                         ids=["sweep", "predict"])
def test_the_logits_workload_with_a_model_is_refused(tiny, tmp_path, command):
    """A model's step is the loss workload's: with --workload logits a sweep wrote error rows (its logits the
    model's hidden size wide) and predict rows of nothing the user meant."""
    out = tmp_path / "rows.csv"
    line = one_error(invoke(*command, *SHAPE, "--workload", "logits", "--model", tiny, "--out", out))
    assert line == ("cebench: error: --model: a model's step is a loss's: the logits workload has no projection "
                    "and no model (use --workload loss)")
    assert not out.exists()


def test_a_hidden_size_for_the_logits_workload_alone_is_refused(tmp_path):
    out = tmp_path / "rows.csv"
    line = one_error(invoke("sweep", "--device", "cpu", *SHAPE, "--vocab", "64", "--d-model", "8,16", "--workload",
                            "logits", "--variant", "dense", "--out", out))
    assert line.startswith("cebench: error: --d-model: does not apply to the logits workload") and not out.exists()
    rows = api.predict(target="cpu", batch=1, context=8, vocab=64, d_model=8, workload="logits,loss", variant="dense")
    assert sorted((r.workload, r.d_model) for r in rows) == [("logits", 0), ("loss", 8)]


@pytest.fixture
def predicted_csv(tmp_path: Path) -> Path:
    out = tmp_path / "predicted.csv"
    api.predict(target="h100-80gb", batch=1, context=8, vocab=64, d_model=8, variant="dense", out=out)
    return out


def _edited(path: Path, column: str, value: str) -> Path:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    rows[0][column] = value
    edited = path.with_name(f"{column}-{value}.csv")
    with edited.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return edited


@pytest.mark.parametrize(("column", "value"), [("predicted_time_ms", "-1"), ("predicted_tokens_per_s", "inf"),
                                               ("peak_bytes", "-5"), ("predicted_time_ms", "-inf"),
                                               ("compile_s", "-0.25"), ("softcap", "-30")])
def test_a_number_no_row_can_hold_is_refused_where_the_csv_is_read(predicted_csv, tmp_path, column, value):
    edited = _edited(predicted_csv, column, value)
    for command in (["show", edited], ["merge", edited, "--out", tmp_path / "merged.csv"], ["plot", edited]):
        line = one_error(invoke(*command))
        assert line == (f"cebench: error: {edited}: row 2: column '{column}' has value '{value}', which it cannot "
                        "hold (finite, not negative)")
    assert not (tmp_path / "merged.csv").exists()


def test_show_takes_the_predicted_time_columns_it_prints(predicted_csv):
    result = invoke("show", predicted_csv, "--columns", "predicted_time_ms,predicted_tokens_per_s")
    assert result.exit_code == 0, result.output
    assert "pred. time" in result.stdout and "pred. tokens/s" in result.stdout


def test_check_of_predictions_says_their_time_is_not_gated(predicted_csv):
    result = invoke("check", predicted_csv, "--baseline", predicted_csv, "--time-tol", "5")
    assert result.exit_code == 0, result.output
    assert "--time-tol gates measured step times only" in result.output
    assert "they have no time" not in result.output


def test_a_world_past_any_cluster_names_the_bound_it_passed(tiny):
    line = one_error(invoke("predict", "--target", "cpu", "--model", tiny, "--fsdp", "99999999999"))
    assert line == "cebench: error: --fsdp: 99,999,999,999 ranks is more than any cluster has (at most 65,536)"


def test_a_headroom_is_shown_as_given_never_rounded_to_what_was_refused():
    assert [format_percent(Fraction(n, 10_000)) for n in (500, 9_999, 125)] == ["5%", "99.99%", "1.25%"]
    result = invoke("fit", "--target", "h100-80gb", "--context", "8", "--vocab", "64", "--d-model", "8", "--variant",
                    "dense", "--max-batch", "16", "--headroom", "99.99%")
    assert result.exit_code == 0, result.output
    assert "less 99.99% headroom" in result.stdout
