"""The installed entry point: a CSV with every documented column, clean errors on bad input."""
import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cebench.cli import app
from cebench.store.schema import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
CEBENCH = Path(sys.executable).parent / "cebench"
SMALL = ["--device", "cpu", "--batch", "1,2", "--context", "32", "--vocab", "1000", "--d-model", "16",
         "--ce-chunk", "16", "--variant", "dense,chunked", "--repeats", "2"]


def cebench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(CEBENCH), *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.slow
def test_entry_point_writes_every_documented_column(tmp_path):
    out = tmp_path / "r.csv"
    proc = cebench("sweep", *SMALL, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    with out.open() as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == COLUMNS
        rows = list(reader)
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    assert all(int(r["peak_delta_bytes"]) > 0 and float(r["time_ms_median"]) > 0 for r in rows)
    assert "dense" in proc.stdout and "peak Δ" in proc.stdout and str(out) in proc.stdout
    readme = (ROOT / "results" / "README.md").read_text()
    undocumented = [c for c in COLUMNS if not re.search(rf"`{c}`", readme)]
    assert not undocumented, f"results/README.md does not document {undocumented}"


def test_existing_csv_is_appended_to(tmp_path):
    out = tmp_path / "r.csv"
    for _ in range(2):  # in-process: the installed entry point is exercised above
        result = CliRunner().invoke(app, ["sweep", *SMALL, "--variant", "dense", "--batch", "1", "--out", str(out)])
        assert result.exit_code == 0, result.output
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and lines[0] == ",".join(COLUMNS)


def test_python_dash_m_works():
    proc = subprocess.run([sys.executable, "-m", "cebench", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("cebench ")


BAD = [
    (["--batch", "0"], "--batch: 0 must be a positive integer"),
    (["--context", "-4"], "--context: -4 must be a positive integer"),
    (["--vocab", "5k"], "--vocab: '5k' is not an integer"),
    (["--ce-chunk", "0"], "--ce-chunk: 0 must be a positive integer"),
    (["--variant", "dense,nope"], "--variant: unknown 'nope'"),
    (["--dtype", "fp8"], "--dtype: 'fp8' is not one of fp32, bf16, fp16"),
    (["--repeats", "0"], "--repeats: must be from 1 to 10,000"),
    (["--device", "tpu"], "--device: 'tpu' is not one of auto, cpu, cuda"),
    (["--unit", "parsecs"], "--unit: 'parsecs' is not a unit of memory (choose from B, KB, MB, GB, TB, KiB, MiB"),
]


@pytest.mark.parametrize("args,message", BAD)
def test_bad_input_is_one_line_exit_2_and_leaves_results_untouched(tmp_path, args, message):
    out = tmp_path / "r.csv"
    out.write_text("precious\n")
    result = CliRunner().invoke(app, ["sweep", *SMALL, *args, "--out", str(out)])  # the installed command: below
    assert result.exit_code == 2, result.output  # an unexpected exception is exit code 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert out.read_text() == "precious\n"


def test_foreign_csv_is_never_clobbered(tmp_path):
    out = tmp_path / "r.csv"
    out.write_text("a,b\n1,2\n")
    proc = cebench("sweep", *SMALL, "--out", str(out))
    assert proc.returncode == 2 and "not a cebench results CSV" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert out.read_text() == "a,b\n1,2\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_device_cuda_without_gpu_is_a_usage_error():
    result = CliRunner().invoke(app, ["sweep", "--device", "cuda"])  # in-process: the installed command is above
    assert result.exit_code == 2 and "no CUDA GPU is visible" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [[], ["sweep"]])
def test_help(command):
    proc = cebench(*command, "--help")
    assert proc.returncode == 0 and "Usage" in proc.stdout


@pytest.mark.parametrize("command", ["show", "plot", "check", "merge"])
def test_a_commands_csv_argument_is_named_as_its_options_name_theirs(command):
    usage = " ".join(CliRunner().invoke(app, [command, "--help"]).output.split())
    assert f"Usage: cebench {command} [OPTIONS] {{CSV}}" in usage and "{csv}" not in usage


FAST_START = """
import sys
from cebench.cli import main
sys.argv = ["cebench", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
print("torch imported:", "torch" in sys.modules, "pandas imported:", "pandas" in sys.modules, "exit", code)
"""


@pytest.mark.parametrize("args,code", [([], 2), (["--help"], 0), (["sweep", "--help"], 0), (["check", "--help"], 0),
                                       (["predict", "--help"], 0), (["sweep", "--batch", "0"], 2),
                                       (["sweep", "--variant", "nope"], 2), (["show", "--format", "x", "a.csv"], 2)])
def test_help_and_usage_errors_never_import_torch(args, code):
    proc = subprocess.run([sys.executable, "-c", FAST_START, *args], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip().endswith(f"torch imported: False pandas imported: False exit {code}"), proc


def test_a_torch_outside_the_supported_range_is_told_in_one_line(monkeypatch, capsys):
    """Read from torch's metadata before anything imports it: one line naming the range, exit 2."""
    from cebench import cli
    from cebench.core import version

    assert version.torch_outside_range("2.13.0+cpu") is None and version.torch_outside_range("2.8.0+cu128") is None
    assert version.torch_outside_range("2.14.1") is None
    line = version.torch_outside_range("2.7.1+cu126")
    assert line == ("cebench supports torch 2.8 to 2.14; this is torch 2.7.1+cu126: install one of those "
                    "(pip install 'torch>=2.8,<2.15')")
    assert version.torch_outside_range("2.15.0") is not None and version.torch_outside_range("3.0.0") is not None
    monkeypatch.setattr(cli, "torch_outside_range", lambda: line)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 2 and capsys.readouterr().err == f"cebench: {line}\n"


def test_pyproject_declares_the_supported_torch_range():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    from cebench.core.version import TORCH_RANGE

    deps = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    (torch_dep,) = [d for d in deps["dependencies"] if d.startswith("torch")]
    (low, high) = TORCH_RANGE
    assert torch_dep == f"torch>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}"
