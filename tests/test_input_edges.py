"""Input at the edges (issue #51): a model's suffix, a CSV's stray byte, a peer whose import
fails, a variant that cannot run here, and the ranks' temporary folder of a killed sweep."""
from __future__ import annotations

import multiprocessing.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import pytest

from cebench.core.world import World
from cebench.run import ranks
from cebench.run.isolate import Child
from conftest import SMALL, invoke, one_error, sweep_csv

TESTS = Path(__file__).parent


@pytest.fixture
def config_json(tmp_path) -> Path:
    path = tmp_path / "config.json"
    path.write_text((files("cebench.models") / "presets" / "gpt2.json").read_text(encoding="utf-8"))
    return path


def test_an_unknown_suffix_of_an_hf_model_is_named(config_json):
    for model in (f"hf:{config_json}:bogus", f"hf:{config_json}:no-cache:bogus", "hf:gpt2:bogus"):
        line = one_error(invoke("predict", "--model", model))
        assert line == (f"cebench: error: --model: {model}: unknown suffix 'bogus' (an hf: model takes "
                        ":no-dropout, :no-cache)")


def test_an_hf_only_suffix_on_a_decoder_model_says_so(config_json):
    line = one_error(invoke("predict", "--model", f"{config_json}:no-cache"))
    assert line == (f"cebench: error: --model: {config_json}:no-cache: :no-cache applies to hf: models only "
                    f"(hf:{config_json}:no-cache)")
    line = one_error(invoke("predict", "--model", f"{config_json}:bogus"))
    assert f"{config_json}:bogus: unknown suffix 'bogus' (a preset or config.json takes :repeat-kv" in line
    assert one_error(invoke("predict", "--model", "gpt2:no-dropout")).endswith(
        "gpt2:no-dropout: :no-dropout applies to hf: models only (hf:gpt2:no-dropout)")


@pytest.fixture(scope="module")
def latin1_csv(tmp_path_factory) -> tuple[Path, str]:
    """A real results CSV with one latin-1 byte (é, 0xe9) in its second row's first cell, and
    what `show` says of it: the byte and its place."""
    path = sweep_csv(tmp_path_factory.mktemp("latin1") / "results.csv", "--batch", "2", "--context", "16")
    data = path.read_bytes()
    second = data.index(b"\n", data.index(b"\n") + 1) + 1
    path.write_bytes(data[:second] + b"\xe9" + data[second:])
    shown = one_error(invoke("show", path))
    said = f"not a readable text file ('utf-8' codec can't decode byte 0xe9 in position {second}: invalid "
    assert shown == f"cebench: error: {path}: {said}continuation byte)"
    return path, shown.removeprefix(f"cebench: error: {path}: ")


def test_merge_names_the_byte_as_show_does(latin1_csv, tmp_path):
    path, shown = latin1_csv
    out = tmp_path / "merged.csv"
    line = one_error(invoke("merge", path, "--out", out))
    assert line == f"cebench: error: {path} exists and is not a cebench results CSV: {shown}"
    assert not out.exists()


def test_resume_names_the_byte_as_show_does(latin1_csv):
    path, shown = latin1_csv
    before = path.read_bytes()
    line = one_error(invoke("sweep", *SMALL, "--batch", "2", "--context", "16", "--resume", "--out", path))
    assert line == f"cebench: error: {path} exists and is not a cebench results CSV: {shown}; choose another --out"
    assert path.read_bytes() == before


@pytest.mark.slow
@pytest.mark.needs("triton")  # without it cebench names Triton and never imports liger_kernel
def test_a_peer_whose_import_fails_is_listed_as_not_runnable(tmp_path):
    fake = tmp_path / "liger_kernel"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('a broken build: no triton here')\n")
    cebench = Path(sys.executable).parent / "cebench"
    environ = {**os.environ, "COLUMNS": "300", "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                                         os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([str(cebench), "variants", "--device", "cpu"], capture_output=True, text=True,
                          timeout=300, env=environ)
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.split("\nliger-kernel ", 1)[1].split("\n    here (cpu): ", 1)[1].splitlines()[0]
    assert listed == ("liger_kernel is installed but its import fails (ImportError: a broken build: no triton "
                      "here)")


def test_a_sweep_of_cut_cross_entropy_on_cpu_says_why_not(tmp_path):
    out = tmp_path / "cce.csv"
    line = one_error(invoke("sweep", "--device", "cpu", "--vocab", "1000", "--d-model", "16", "--batch", "2",
                            "--context", "16", "--variant", "cut-cross-entropy", "--out", out))
    assert line.startswith("cebench: error: --variant: no variant of the sweep can run on cpu here "
                           "(cut-cross-entropy: needs CUDA (its kernels run on cuda only")
    assert not out.exists()


def stall(mesh) -> None:
    """A rank that waits to be killed."""
    time.sleep(600)


def rank(mesh) -> int:
    import torch.distributed as dist

    return dist.get_rank()


@pytest.fixture
def temp(monkeypatch) -> Iterator[Path]:
    """A temporary directory of its own for this process, its path short (a forkserver's
    socket goes there). This worker's own multiprocessing folder is made first, outside it:
    made inside, it would go with it, and the worker's forkserver and exit with it."""
    multiprocessing.util.get_temp_dir()
    folder = Path(tempfile.mkdtemp(prefix="cb-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_a_later_point_removes_the_rank_folders_of_a_killed_sweep(temp, tmp_path, monkeypatch):
    code = ("from cebench.run import ranks; from cebench.run.isolate import Child; import test_input_edges as t; "
            "from cebench.core.world import World; "
            "ranks.launch(t.stall, (), World(), Child(), 600)")
    environ = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": os.pathsep.join(
        filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    log = tmp_path / "stderr"
    with log.open("w") as stderr:
        proc = subprocess.Popen([sys.executable, "-c", code], env=environ, stderr=stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not any((temp / name).is_dir() for name in os.listdir(temp) if name.startswith("cebench-ranks-")):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its ranks, as a kill -9 of the job would
        proc.wait()
    stale = [name for name in os.listdir(temp) if name.startswith("cebench-ranks-")]
    assert len(stale) == 1  # left behind by the kill
    live = temp / f"cebench-ranks-{os.getpid()}-running"  # this process's own: not stale
    live.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    outcome = ranks.launch(rank, (), World(), Child(), 120)
    assert outcome.status == "ok" and outcome.value == [0], outcome.error
    assert [name for name in os.listdir(temp) if name.startswith("cebench-ranks-")] == [live.name]
