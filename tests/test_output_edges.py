"""Output at its edges: JSON alone on stdout while user code prints, a terminal that cannot
encode what a table holds or is 0 columns wide, a skipped check the user asked for, and a
figure folder on a full disk."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch.nn.functional as F
from typer.testing import CliRunner

from cebench.cli import app
from cebench.core import interpreter
from cebench.losses.variants import ALL_FEATURES, Variant
from conftest import sweep_csv

CEBENCH = Path(sys.executable).parent / "cebench"


def cebench(*args: object, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The installed `cebench` run as a user runs it, with `env` added to the environment."""
    return subprocess.run([str(CEBENCH), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


@pytest.mark.slow
def test_explain_json_is_alone_on_stdout_while_the_users_loss_prints(tmp_path):
    (tmp_path / "loud.py").write_text(textwrap.dedent("""\
        import os

        import torch.nn.functional as F

        print("loud: imported")


        def loud(h, weight, targets, ce_chunk):
            print("loud: called")
            os.write(1, b"loud: written to file descriptor 1\\n")
            return F.cross_entropy(h @ weight.T, targets)
        """))
    done = cebench("explain", "--target", "cpu", "--variant", "loud.py:loud", "--batch", "1", "--context", "8",
                   "--vocab", "100", "--d-model", "8", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert {e["variant"] for e in json.loads(done.stdout)["explanations"]} == {"loud.py:loud"}
    assert "loud: imported" in done.stderr and "loud: called" in done.stderr
    assert "loud: written to file descriptor 1" in done.stderr


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return sweep_csv(tmp_path_factory.mktemp("edges") / "r.csv", "--batch", "1", "--context", "8")


def test_show_on_an_ascii_stream_prints_ascii_fallbacks(results):
    done = cebench("show", results, cwd=results.parent, PYTHONIOENCODING="ascii", COLUMNS="200")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.isascii()
    header = next(line for line in done.stdout.splitlines() if line.startswith("variant")).split()
    assert header[:4] == ["variant", "chunk", "peak", "D"]  # peak Δ
    assert "batch 1 x context 8" in done.stdout and "====" in done.stdout


@pytest.mark.parametrize("columns", ["0", "3"])
def test_show_at_zero_or_a_few_columns_prints_the_table_at_a_minimum_width(results, columns):
    done = cebench("show", results, cwd=results.parent, COLUMNS=columns)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("variant")).split()
    assert header == ["variant", "chunk", "peak", "Δ", "Δ", "vs", "base", "time", "status"]
    assert [line.split()[0] for line in lines if line.startswith(("dense", "chunked"))] == ["dense", "chunked"]
    assert "not shown at 60 columns: " in " ".join(done.stdout.split())


def _no_softcap_in_the_interpreter(h, weight, targets, ce_chunk, softcap=0.0, **features):
    """A Triton-interpreted loss on a CPU whose softcap the interpreter cannot run."""
    if softcap:
        raise type("InterpreterError", (Exception,), {})("softcap: 'float' object has no attribute 'to'")
    return F.cross_entropy(h.float() @ weight.float().T, targets, **features)


@pytest.fixture
def interpreted(registry, monkeypatch):
    """'interpreted': a loss variant run under Triton's interpreter on this CPU, which cannot run its softcap."""
    monkeypatch.setenv(interpreter.ENV, "1")
    monkeypatch.setattr(interpreter, "unavailable_reason", lambda: None)
    registry.register(Variant("interpreted", "loss", _no_softcap_in_the_interpreter, chunked=False, compiled=False,
                              summary="interpreted", supports=ALL_FEATURES, interpreted_on=("cpu",)))


def verify(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["verify", "--device", "cpu", "--variant", "interpreted", "--dtype", "fp32",
                                   "--ignore-frac", "0", "--label-smoothing", "0", "--z-loss", "0", "--reduction",
                                   "mean", *args], env={"COLUMNS": "250"})
    return res.exit_code, " ".join(res.output.split())


def test_verify_fails_when_the_check_asked_for_was_skipped(interpreted):
    code, output = verify("--softcap", "30")
    assert code == 1, output
    assert "all 3 applicable checks passed" not in output
    assert "3 applicable checks passed, 3 skipped" in output
    assert "skipped (Triton's interpreter cannot run them on this CPU): interpreted · softcap 30 at 3 shapes" in output
    assert output.endswith("not verified: interpreted · softcap 30 at 3 shapes, asked for with --softcap, was skipped")


def test_verify_names_a_skipped_default_check_and_passes(interpreted):
    code, output = verify()  # softcap at verify's default: not asked for
    assert code == 0, output
    assert output.endswith("3 applicable checks passed, 3 skipped skipped (Triton's interpreter cannot run them on "
                           "this CPU): interpreted · softcap 2 at 3 shapes")


def test_plot_onto_a_full_disk_leaves_no_folder_it_created(results, tmp_path, monkeypatch):
    import matplotlib.figure

    def full(self, f, **kwargs):
        f.write(b"\x89PNG half a figure")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    result = CliRunner().invoke(app, ["plot", str(results), "--out-dir", str(tmp_path / "new" / "figures")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().endswith(": cannot write there (No space left on device)")
    assert list(tmp_path.iterdir()) == []
