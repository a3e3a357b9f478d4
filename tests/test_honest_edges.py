"""Edges a new user meets (issue #64), each said honestly in one line: a coefficient fp32
cannot hold, options fit and explain take one value of refused before any work, a fit that
writes no row, what a footer leaves out on each target, what check compared, and torch's
refusals said in cebench's words."""
from __future__ import annotations

import re

import pytest

from cebench import api
from cebench.core import devices
from cebench.core.axes import FP32_MAX
from cebench.core.errors import UsageError
from cebench.engine import support
from cebench.models import model as model_mod
from conftest import invoke, one_error

SHAPE = ("--vocab", "64", "--d-model", "8", "--variant", "dense")


@pytest.mark.parametrize("option", ["--softcap", "--z-loss"])
def test_a_coefficient_fp32_cannot_hold_is_refused_in_one_line(option):
    """The loss computes with it in fp32, where 1e308 is inf: refused, not a failed check."""
    for command in (["verify", "--variant", "dense"], ["predict", "--target", "cpu", *SHAPE]):
        assert one_error(invoke(*command, option, "1e308")) == (
            f"cebench: error: {option}: 1e+308 is beyond what fp32, where the loss computes with it, holds (at most "
            "3.403e+38)")
    with pytest.raises(UsageError, match="beyond what fp32"):
        api.predict(target="cpu", batch=1, context=8, vocab=64, d_model=8, softcap=FP32_MAX * 1.01)
    (row,) = api.predict(target="cpu", variant="dense", batch=1, context=8, vocab=64, d_model=8, softcap=FP32_MAX)
    assert row.status == "ok"


def test_fit_refuses_a_list_before_any_model_is_resolved(monkeypatch):
    def never(text: str) -> None:
        raise AssertionError(f"{text} resolved before the refusal")

    monkeypatch.setattr(model_mod, "resolve_model", never)
    message = one_error(invoke("fit", "--model", "hf:llama-3.2-1b", "--context", "2048,4096", "--target", "h100-80gb"))
    assert message == "cebench: error: --context: fit takes one value, not 2048,4096 (sweep measures a grid)"
    help_text = " ".join(re.sub("[│─╭╮╰╯]", " ", invoke("fit", "--help").output).split())  # out of its box
    assert "Default: 128; with --model, the model's own longest (its config's max_position_embeddings)" in help_text


def test_a_fit_that_writes_no_row_says_so(tmp_path):
    out = tmp_path / "f.csv"
    result = invoke("fit", "--budget", "1KiB", "--out", out, "--target", "cpu", *SHAPE, "--context", "8")
    said = "".join(result.output.split())  # a long path wraps anywhere
    assert result.exit_code == 0 and "".join(f"0 rows: nothing written to {out} (not one setting fits)".split()) in said
    assert not out.exists()


def test_a_footer_says_what_its_target_leaves_out():
    fitted = invoke("fit", "--budget", "1GiB", "--target", "cpu", *SHAPE, "--context", "8")
    said = " ".join(fitted.output.split())
    assert "CUDA context" not in said and "NCCL" not in said and devices.get("cpu").uncounted in said
    on_gpu = " ".join(invoke("fit", "--target", "h100-80gb", *SHAPE, "--context", "8").output.split())
    assert "the CUDA context and kernels (outside the caching allocator), NCCL's own buffers" in on_gpu


def test_check_says_when_no_time_was_compared(tmp_path):
    predicted = tmp_path / "p.csv"
    api.predict(target="cpu", variant="dense", batch=1, context=8, vocab=64, d_model=8, out=predicted)
    result = invoke("check", predicted, "--baseline", predicted, "--time-tol", "10%")
    assert result.exit_code == 0
    assert "no point was timed on both sides: no time compared" in " ".join(result.output.split())


def test_torchs_refusal_of_a_second_backward_is_said_in_cebenchs_words():
    raw = RuntimeError("This backward function was compiled with non-empty donated buffers which requires "
                       "create_graph=False and retain_graph=False.")
    said = support.torch_refused(raw)
    assert said is not None and "--retain-graph applies to eager variants" in said
    assert support.refusal(raw) == support.Refusal(said)  # unsupported, not an error
    assert support.torch_refused(RuntimeError("something else")) is None
    assert support.refusal(RuntimeError("something else")).status == "error"


def test_show_reads_standard_input_and_shows_any_column_of_the_csv(tmp_path):
    from typer.testing import CliRunner

    from cebench.cli import app

    out = tmp_path / "p.csv"
    api.predict(target="cpu", variant="dense", batch=1, context=8, vocab=64, d_model=8, out=out)
    result = CliRunner().invoke(app, ["show", "-", "--columns", "tp,fsdp,n_params"], input=out.read_text(),
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if line.startswith("variant"))
    assert header.split()[-4:] == ["tp", "fsdp", "n_params", "status"] and "1 rows from standard input" in result.output
    assert "unknown column(s) nope" in one_error(invoke("show", out, "--columns", "nope"))


def test_a_resumed_sweep_holds_an_unsupported_point_once(tmp_path):
    """A point its verdict refuses is written once; --resume passes over it while it is still
    refused (it would only append the same row again)."""
    import csv

    model = tmp_path / "odd.json"
    model.write_text('{"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, '
                     '"num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 64}')
    out = tmp_path / "r.csv"
    grid = ("sweep", "--device", "cpu", "--model", model, "--batch", "2", "--context", "6", "--variant", "dense",
            "--tp", "3", "--repeats", "1", "--out", out)
    assert invoke(*grid).exit_code == 0
    for _ in range(2):
        assert invoke(*grid, "--resume").exit_code == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["status"] for r in rows] == ["unsupported"] and "does not divide" in rows[0]["error"]
