"""`fit` as a user acts on it: a headroom kept free under the budget, a model's own context
when none is given (said), each answer's row written with --out, a group that failed named
with its setting, and what a peak does not count said under the table."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cebench import api
from cebench.cli import app
from cebench.core.errors import UsageError
from cebench.engine import points
from cebench.engine.trace import predict_peak
from cebench.store.frame import load
from conftest import model_file

LOSS = {"target": "cpu", "variant": "dense,chunked", "ce_chunk": 16, "context": 16, "vocab": 300, "d_model": 8}
# 1 block, an odd vocabulary and 40 learned positions at most (max_position_embeddings)
TINY = {"model_type": "llama", "vocab_size": 97, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "intermediate_size": 24, "max_position_embeddings": 40}


@pytest.fixture
def tiny(tmp_path: Path) -> str:
    return str(model_file(tmp_path, TINY))


def invoke(*args: object) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("headroom,limit", [("0%", 1_000_000), ("10%", 900_000), ("12.5", 875_000)])
def test_every_answer_stays_under_the_budget_less_its_headroom_and_one_more_sequence_does_not(headroom, limit):
    fitted = api.fit("1000000B", headroom=headroom, **LOSS)
    assert fitted.budget == 1_000_000 and fitted.limit == limit
    for f in fitted.fits:
        assert 0 < f.batch and f.peak_bytes == predict_peak(replace(f.config, batch=f.batch)).peak_bytes <= limit
        assert predict_peak(replace(f.config, batch=f.batch + 1)).peak_bytes > limit


def test_the_default_headroom_is_five_percent_and_fewer_sequences_fit_with_it():
    kept, none = api.fit("1000000B", **LOSS), api.fit("1000000B", headroom="0%", **LOSS)
    assert kept.limit == 950_000
    assert [f.batch for f in kept.fits] < [f.batch for f in none.fits]  # dense 19 against 20 at this size


@pytest.mark.parametrize("headroom,message", [("100%", "leaves nothing of the budget"),
                                              ("five", "is not a percentage")])
def test_a_headroom_that_leaves_nothing_or_is_no_number_is_one_line(headroom, message):
    with pytest.raises(UsageError, match=message) as info:
        api.fit("1000000B", headroom=headroom, **LOSS)
    assert info.value.param == "headroom"
    result = invoke("fit", "--budget", "1MiB", "--target", "cpu", "--variant", "dense", "--headroom", headroom)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("cebench: error: --headroom: ")


def test_a_model_without_a_context_is_fitted_at_its_own_longest_and_says_so(tiny):
    fitted = api.fit("64MiB", target="cpu", model=tiny, variant="dense")
    assert {f.config.context for f in fitted.fits} == {40}
    assert fitted.context_from == f"{tiny}'s max_position_embeddings, its longest; --context sets another"
    given = api.fit("64MiB", target="cpu", model=tiny, variant="dense", context=8)
    assert {f.config.context for f in given.fits} == {8} and given.context_from is None
    result = invoke("fit", "--budget", "64MiB", "--target", "cpu", "--model", tiny, "--variant", "dense")
    assert result.exit_code == 0, result.output
    said = f"context 40 ({tiny}'s max_position_embeddings, its longest; --context sets another)"
    assert "".join(said.split()) in "".join(result.stdout.split())  # wrapped at 80 columns, the path too


def test_a_build_declares_no_length_and_keeps_the_default_context_saying_so(tmp_path, monkeypatch):
    (tmp_path / "build.py").write_text(
        "from torch import nn\n\n\ndef build():\n    body = nn.Embedding(64, 8)\n    return body, body.weight\n")
    monkeypatch.chdir(tmp_path)
    fitted = api.fit("64MiB", target="cpu", model="build.py:build", variant="dense")
    assert {f.config.context for f in fitted.fits} == {128}  # the context axis's default
    assert fitted.context_from == "the default (build.py:build declares no length; --context sets one)"


def test_out_writes_each_answers_row_as_predict_writes_it(tmp_path):
    csv = tmp_path / "fit.csv"
    result = invoke("fit", "--budget", "1MB", "--target", "cpu", "--variant", "dense,chunked", "--ce-chunk", "16",
                    "--context", "16", "--vocab", "300", "--d-model", "8", "--out", csv)
    assert result.exit_code == 0, result.output
    assert f"2 rows → {csv}" in " ".join(result.stdout.split())
    frame = load(csv)
    fitted = api.fit("1MB", **LOSS)
    assert list(frame["batch"]) == [f.batch for f in fitted.fits]
    assert list(frame["peak_bytes"]) == [f.peak_bytes for f in fitted.fits]
    assert set(frame["mem_method"]) == {"predicted"}
    again = invoke("fit", "--budget", "1MB", "--target", "cpu", "--variant", "dense", "--context", "16", "--vocab",
                   "300", "--d-model", "8", "--out", csv)
    assert again.exit_code == 0 and len(load(csv)) == 3  # appended, as predict appends


def test_out_onto_a_measured_csv_is_refused_before_any_work(tmp_path):
    csv = tmp_path / "measured.csv"
    made = invoke("sweep", "--device", "cpu", "--variant", "dense", "--batch", "1", "--context", "8", "--vocab", "64",
                  "--d-model", "8", "--repeats", "1", "--warmup", "1", "--out", csv)
    assert made.exit_code == 0, made.output
    before = csv.read_bytes()
    result = invoke("fit", "--budget", "1MB", "--target", "cpu", "--variant", "dense", "--context", "16", "--out", csv)
    assert result.exit_code == 2 and csv.read_bytes() == before


def test_a_group_that_fails_is_named_with_its_setting(tiny, monkeypatch):
    fit = points.fit

    def failing(point, *args, **kwargs):
        if point.has_model and point.activation_checkpointing.value == "blocks":
            raise RuntimeError("no meta kernel for this op")
        return fit(point, *args, **kwargs)

    monkeypatch.setattr(points, "fit", failing)
    fitted = api.fit("64MiB", target="cpu", model=tiny, variant="dense", context=8,
                     activation_checkpointing="none,blocks")
    assert fitted.not_fitted == {"dense · activation_checkpointing blocks": "RuntimeError: no meta kernel for this op"}
    assert [f.config.activation_checkpointing.value for f in fitted.fits] == ["none"]


def test_the_table_says_the_headroom_and_what_is_not_counted_and_of_budget_shows_at_80_columns(at_width):
    result = at_width(["fit", "--target", "h100-80gb", "--variant", "dense", "--context", "1024", "--vocab", "128256",
                       "--d-model", "4096", "--headroom", "10%"], 80)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "budget 79.2 GiB less 10% headroom: peaks ≤ 71.3 GiB" in text
    assert "of budget" in result.stdout.splitlines()[2]  # the header row, at 80 columns
    assert "Not counted: the CUDA context" in text and "10% of the budget is kept free for them" in text
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_where_not_one_sequence_fits_anywhere_the_note_says_what_would(tiny):
    """At a context too long for the budget every row is 'none fits': the note names what lets one sequence fit
    (with a model: checkpointing its blocks, sharding), and says nothing where a row fits."""
    result = invoke("fit", "--budget", "16KiB", "--target", "cpu", "--model", tiny, "--context", "40", "--variant",
                    "dense", "--headroom", "0")
    assert result.exit_code == 0, result.output
    note = " ".join(result.stdout.split())
    assert ("Not one sequence of 40 tokens fits in 16.0 KiB in any row: try a shorter --context, "
            "--activation-checkpointing blocks, --fsdp N (per rank) or a larger --budget.") in note
    alone = invoke("fit", "--budget", "64KiB", "--target", "cpu", "--vocab", "64", "--d-model", "8", "--context",
                   "4096", "--variant", "dense", "--headroom", "0")
    assert "try a shorter --context or a larger --budget." in " ".join(alone.stdout.split())
    fits = invoke("fit", "--budget", "1GiB", "--target", "cpu", "--model", tiny, "--context", "8", "--variant", "dense")
    assert fits.exit_code == 0 and "Not one sequence" not in fits.stdout


def test_a_users_build_is_not_told_to_checkpoint_blocks_cebench_cannot(tmp_path):
    """cebench checkpoints the blocks of a preset or config.json, not a build's body (it refuses the option there):
    where nothing fits, a build's note leaves that way out."""
    (tmp_path / "build.py").write_text(
        "from torch import nn\n\n\ndef build():\n    body = nn.Embedding(64, 8)\n    return body, body.weight\n")
    result = invoke("fit", "--budget", "1KiB", "--target", "cpu", "--model", f"{tmp_path / 'build.py'}:build",
                    "--context", "8", "--variant", "dense", "--headroom", "0")
    assert result.exit_code == 0, result.output
    assert "try a shorter --context, --fsdp N (per rank) or a larger --budget." in " ".join(result.stdout.split())


def test_columns_names_any_column_fit_can_show_and_leaves_out_those_an_answer_lacks(tiny):
    from cebench.render.fit import COLUMN_KEYS, fit_table

    # with a model on a named GPU: the loss alone's columns, the time's and the loss share are all there
    fitted = api.fit(target="h100-80gb", model=tiny, context=16, variant="dense", budget="256MiB", headroom="0%")
    keys = [c.key for c in fit_table(fitted).columns]
    assert {"alone", "time", "tokens_per_s", "loss_share"} <= set(keys)
    assert keys == [k for k in COLUMN_KEYS if k in keys]
    # without a model on a named GPU: the time's columns where they stand with one (after the batch)
    alone = api.fit(target="h100-80gb", context=16, vocab=300, d_model=8, variant="dense", budget="1GiB")
    assert [c.key for c in fit_table(alone).columns][:6] == ["variant", "ce_chunk", "batch", "time", "tokens_per_s",
                                                             "tokens"]
    # without a model, on cpu: none of those, yet naming them is no error
    lacking = invoke("fit", "--target", "cpu", "--budget", "8MiB", "--context", "16", "--vocab", "300",
                     "--d-model", "8", "--variant", "dense", "--columns", "loss_share,time,alone")
    assert lacking.exit_code == 0, lacking.output
    assert "loss share" not in lacking.output and "max batch" in lacking.output
    unknown = invoke("fit", "--target", "cpu", "--budget", "8MiB", "--context", "16", "--variant", "dense",
                     "--columns", "no_such")
    assert unknown.exit_code == 2 and "unknown column(s) no_such" in unknown.output
