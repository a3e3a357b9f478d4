"""The Python API refuses arguments of the wrong type as the command line refuses bad
options: a `UsageError` naming the argument, never an error from inside cebench (issue #51);
`fit` refuses a budget of a few bytes as `--budget 80` is refused; the hints and the plan
line say what the commands will do; user code run under a very long limit, or none, says so as it starts."""
from __future__ import annotations

import warnings

import pandas as pd
import pytest
from typer.testing import CliRunner

from cebench import api
from cebench.cli.app import app
from cebench.core.errors import InputWarning
from conftest import model_file

SHAPE = {"context": 8, "vocab": 64, "d_model": 8}
# 2 blocks, every parameter dividing evenly over 2 ranks (tests/test_fsdp_measured.py's)
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False}
LOSS = "import torch.nn.functional as F\n\n\ndef loss(h, weight, targets):\n" \
       "    return F.cross_entropy((h @ weight.T).float(), targets)\n"


@pytest.fixture
def model(tmp_path):
    return str(model_file(tmp_path, TINY))


@pytest.mark.parametrize(("call", "param"), [
    (lambda: api.predict(target=None, batch=1, **SHAPE), "target"),
    (lambda: api.predict(target=5, batch=1, **SHAPE), "target"),
    (lambda: api.predict(target="cpu", out=123, batch=1, **SHAPE), "out"),
    (lambda: api.predict(target="cpu", point_timeout="60", batch=1, **SHAPE), "point_timeout"),
    (lambda: api.sweep(device="cpu", out=123, batch=1, **SHAPE), "out"),
    (lambda: api.sweep(device=None, batch=1, **SHAPE), "device"),
    (lambda: api.sweep(device="cpu", shard=3, batch=1, **SHAPE), "shard"),
    (lambda: api.sweep(device="cpu", repeats="3", batch=1, **SHAPE), "repeats"),
    (lambda: api.fit("1GiB", target=None, **SHAPE), "target"),
    (lambda: api.fit("1GiB", target="cpu", max_batch="8", **SHAPE), "max_batch"),
    (lambda: api.fit(1.5e9, target="cpu", **SHAPE), "budget"),
    (lambda: api.explain(device=5, **SHAPE), "device"),
    (lambda: api.verify(device=None), "device"),
    (lambda: api.load(123), "path"),
    (lambda: api.check(None, None), "results"),
    (lambda: api.check(pd.DataFrame(), pd.DataFrame()), "results"),
])
def test_a_wrong_type_is_a_usage_error_naming_the_argument(call, param, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(api.UsageError) as raised:
        call()
    assert raised.value.param == param
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_check_refuses_a_tolerance_of_the_wrong_type(tmp_path):
    with pytest.raises(api.UsageError) as raised:
        api.check(tmp_path / "a.csv", tmp_path / "b.csv", mem_tol=5)
    assert raised.value.param == "mem_tol"


def test_fit_refuses_a_few_bytes_as_the_command_line_does():
    with pytest.raises(api.UsageError, match="give a unit") as raised:
        api.fit(80, target="cpu", **SHAPE)
    assert raised.value.param == "budget"
    result = CliRunner().invoke(app, ["fit", "--budget", "600KiB", "--target", "cpu", "--context", "8", "--vocab",
                                      "64", "--d-model", "8", "--variant", "dense", "--max-batch", "64"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("target", "hint"), [("cpu", "cebench sweep --device cpu"),
                                              ("cuda", "cebench sweep on a machine with a GPU per rank")])
def test_a_sharded_compiled_step_is_sent_to_a_sweep_that_measures_it(model, target, hint):
    (row,) = api.predict(target=target, variant="dense-compiled", fsdp=2, model=model, batch=1, context=8)
    assert row.status == "unsupported" and row.error.endswith(hint), row.error


@pytest.mark.slow
def test_the_plan_line_names_the_default_limit_of_a_sharded_point(model, tmp_path):
    result = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--model", model, "--variant", "dense", "--fsdp",
                                      "2", "--batch", "2", "--context", "16", "--repeats", "1", "--warmup", "1",
                                      "--out", str(tmp_path / "r.csv")])
    assert result.exit_code == 0, result.output
    assert "1 sharded, each in processes of its own, one per rank, each stopped after 1,800 s, the default " \
           "limit (--point-timeout SECONDS sets it)" in result.stderr, result.stderr


def test_a_users_loss_run_under_a_long_limit_says_so_as_it_starts(tmp_path):
    (tmp_path / "mine.py").write_text(LOSS)
    spec = f"{tmp_path / 'mine.py'}:loss"
    with pytest.warns(InputWarning, match=r"predict: .*mine\.py:loss run here, unbounded"):
        api.predict(target="cpu", variant=spec, batch=1, point_timeout=1e9, **SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputWarning)
        api.predict(target="cpu", variant=spec, batch=1, point_timeout=60, **SHAPE)  # bounded, and briefly
        api.predict(target="cpu", variant=spec, batch=1, **SHAPE)  # no limit asked for
        api.predict(target="cpu", variant="dense", batch=1, point_timeout=1e9, **SHAPE)  # no user code
    with pytest.warns(InputWarning, match=r"fit: .*mine\.py:loss run here, bounded by --point-timeout's 3,600 s"):
        api.fit("1GiB", target="cpu", variant=spec, max_batch=8, point_timeout=3600, **SHAPE)
    result = CliRunner().invoke(app, ["predict", "--target", "cpu", "--variant", spec, "--batch", "1",
                                      "--point-timeout", "1e9", "--context", "8", "--vocab", "64", "--d-model", "8"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("run here, unbounded: --point-timeout above 1,000,000 s is no limit") == 1, \
        result.stderr
