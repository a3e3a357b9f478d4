"""Work beyond what a machine or any cluster has is refused in one line, and long work says so
as it starts (issue #51): an --fsdp world above `MAX_WORLD` ranks, a CPU sweep with more
ranks than cores, a fake world of many ranks announced; and a loss that ends its isolated
smoke test's process is an error row, the sweep's other variants measured."""
from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from cebench import api
from cebench.cli import app
from cebench.core import devices
from cebench.core.axes import BY_NAME, MAX_WORLD, parse_world
from cebench.core.errors import UsageError
from cebench.run import ranks
from conftest import model_file

# 2 blocks, d_model 64, vocab 512: a step of milliseconds (tests/test_fsdp_measured.py's).
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False}
SHAPE = ["--batch", "1", "--context", "8", "--variant", "dense"]


def _no_launch(*args: object, **kwargs: object) -> None:
    raise AssertionError("a rank process was started")


def invoke(*args: object) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open()))


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return model_file(tmp_path_factory.mktemp("bounds"), TINY)


def test_the_world_size_is_bounded_beyond_any_cluster():
    assert MAX_WORLD == 65_536 and parse_world(f"1,{MAX_WORLD}", "fsdp") == (1, MAX_WORLD)
    assert f"at most {MAX_WORLD:,}" in BY_NAME["fsdp"].help and f"at most {MAX_WORLD:,}" in BY_NAME["fsdp"].one
    with pytest.raises(UsageError) as caught:
        parse_world("8,100_000", "fsdp")
    assert caught.value.param == "fsdp"
    assert str(caught.value) == f"fsdp: 100,000 ranks is more than any cluster has (at most {MAX_WORLD:,})"


@pytest.mark.parametrize("command", [["predict", "--target", "cpu"], ["predict", "--target", "h100-80gb"],
                                     ["sweep", "--device", "cpu"]], ids=lambda c: "-".join(c[::2]))
def test_a_world_beyond_the_bound_is_one_line_and_exit_2(model, tmp_path, monkeypatch, command):
    monkeypatch.setattr(ranks, "launch", _no_launch)  # should the bound ever go, no 65,537 processes start
    result = invoke(*command, "--model", model, "--fsdp", MAX_WORLD + 1, *SHAPE, "--out", tmp_path / "r.csv")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"cebench: error: --fsdp: {MAX_WORLD + 1:,} ranks is more than any cluster "
                                     f"has (at most {MAX_WORLD:,})")
    assert list(tmp_path.iterdir()) == []  # no file touched


@pytest.mark.parametrize("call", [api.predict, api.fit], ids=lambda f: f.__name__)
def test_a_world_beyond_the_bound_is_a_usage_error_in_the_api(model, tmp_path, call):
    with pytest.raises(UsageError) as caught:
        call(target="cpu", model=str(model), fsdp=10**6, context=8, variant="dense",
             **({"budget": "1GiB"} if call is api.fit else {"batch": 1}))
    assert caught.value.param == "fsdp" and "at most 65,536" in str(caught.value)


def test_the_cpu_takes_a_few_ranks_a_core_and_says_when_they_share(monkeypatch):
    monkeypatch.setattr(devices, "host_cores", lambda: 3)
    cpu = devices.get("cpu")
    assert cpu.ranks_reason(12) is None and cpu.ranks_note(3) == ""
    assert cpu.ranks_note(4) == ("4 ranks shared 3 CPU cores: the time is not a rank's with a core of its own (the "
                                 "memory is its own)")
    assert cpu.ranks_reason(13) == ("13 ranks on 3 CPU cores: at most 12 here (4 a core; each rank is a process of "
                                    "its own)")


def test_host_cores_are_this_process_s():
    assert 1 <= devices.host_cores() <= (os.cpu_count() or 1)


def test_a_cpu_sweep_with_more_ranks_than_it_takes_is_refused_without_starting_them(model, tmp_path, monkeypatch):
    """As on CUDA with more ranks than GPUs, beyond 4 ranks a core: the point's row is
    unsupported, saying why in one line, and no rank process starts."""
    monkeypatch.setattr(devices, "host_cores", lambda: 1)
    monkeypatch.setattr(ranks, "launch", _no_launch)
    out = tmp_path / "r.csv"
    result = invoke("sweep", "--device", "cpu", "--model", model, "--fsdp", 5, *SHAPE, "--repeats", 1, "--out", out)
    assert result.exit_code == 0, result.output
    [row] = rows(out)
    reason = "5 ranks on 1 CPU cores: at most 4 here (4 a core; each rank is a process of its own)"
    assert (row["fsdp"], row["status"], row["error"]) == ("5", "unsupported", reason)
    assert f"unsupported: {reason}" in result.stderr


def test_a_fake_world_of_many_ranks_is_announced_as_it_is_built(model, monkeypatch):
    """`predict` says on stderr, once, that it builds a fake world beyond `NOTICE_RANKS`
    ranks (lowered here to keep the prediction cheap); not at or below it."""
    from cebench.engine import fake_world

    result = invoke("predict", "--target", "cpu", "--model", model, "--fsdp", 2, *SHAPE)
    assert result.exit_code == 0, result.output
    assert "fake world" not in result.stderr
    monkeypatch.setattr(fake_world, "NOTICE_RANKS", 1)
    result = invoke("predict", "--target", "cpu", "--model", model, "--fsdp", 2, *SHAPE)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "fake world" in line]
    assert lines == ["warning: --fsdp 2: building a fake world of 2 ranks to predict rank 0's step, which may take "
                     "minutes (Ctrl-C stops it)"]
    # named as the user asked for it: --gpus, never an --fsdp not given
    result = invoke("predict", "--target", "cpu", "--model", model, "--gpus", 2, *SHAPE)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "fake world" in line]
    assert lines == ["warning: --gpus 2: building a fake world of 2 ranks to predict rank 0's step, which may take "
                     "minutes (Ctrl-C stops it)"]


EXITS = '''
import os


def my_ce(h, weight, targets):
    """Ends its process whenever it is called: the smoke test's tiny problem too."""
    os._exit(3)
'''


def test_an_isolated_loss_that_exits_in_its_smoke_test_is_an_error_row_beside_dense(tmp_path, registry):
    """Isolated, a loss whose smoke test ends its (child) process fails alone: its row is an
    error saying how, dense is measured; the sweep is not refused."""
    exits = tmp_path / "exits.py"
    exits.write_text(EXITS)
    out = tmp_path / "r.csv"
    result = invoke("sweep", "--device", "cpu", "--vocab", 100, "--d-model", 8, "--context", 8, "--batch", 1,
                    "--repeats", 1, "--variant", f"{exits}:my_ce,dense", "--isolate", "--out", out)
    assert result.exit_code == 0, result.output
    by_variant = {r["variant"]: r for r in rows(out)}
    assert by_variant[f"{exits}:my_ce"]["status"] == "error"
    assert by_variant[f"{exits}:my_ce"]["error"] == "the point's process exited with code 3 without a result"
    assert by_variant["dense"]["status"] == "ok"
    assert f"--variant {exits}:my_ce: on the smoke test's tiny problem, the point's process exited with code 3" \
        in result.stderr
