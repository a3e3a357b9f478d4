"""Releases of a peer other than the installed one, for the tests that predict a published
figure with the release that measured it.

`installed(dist, version)` installs `dist==version` with `pip install --no-deps --target`
(never its requirements: torch and triton stay this environment's) into `CACHE`
($CEBENCH_PEER_CACHE, else `<tmp>/cebench-peers`), once per machine: the package registry is
asked the first time (seconds), later runs find the directory. An install goes to a
temporary directory first and is renamed into place, so two test processes installing the
same release at once both end with one complete copy. Where pip cannot install it (no
network), the test is skipped, saying why.

`predict_with(directory, package, calls)` runs `cebench.api.predict` for each call in one
fresh Python in which `package` is imported from `directory`: the test process has
imported the installed release already, and a release without an `__init__.py` (Liger
0.2.1 and 0.4.2 are namespace packages) would lose to the installed one on `sys.path`
anyway, so the child binds the package to the directory before anything imports it. A
call with `split_off` charges every request as the CUDA caching allocator does when it
splits it off a larger cached free block (its size rounded up to 512 B, `Device.block_bytes`),
not as a fresh segment would (`CUDA.block_bytes`): what a process that ran other benchmarks
before the measured one charges.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("CEBENCH_PEER_CACHE") or Path(tempfile.gettempdir()) / "cebench-peers")
# The child: bind the package to the release's directory, then predict each call (JSON in, JSON out).
_CHILD = """
import contextlib, importlib.machinery, importlib.util, json, sys
from unittest import mock
job = json.load(sys.stdin)
sys.path.insert(0, job["directory"])  # its dist-info first too: importlib.metadata reports the release
spec = importlib.machinery.PathFinder.find_spec(job["package"], [job["directory"]])
module = importlib.util.module_from_spec(spec)
sys.modules[job["package"]] = module
spec.loader.exec_module(module)
from cebench.api import predict
from cebench.core import devices
rows = []
for call in job["calls"]:
    with mock.patch.object(devices.CUDA, "block_bytes", devices.Device.block_bytes) if call["split_off"] \\
            else contextlib.nullcontext():
        (row,) = predict(**call["grid"])
    rows.append({k: getattr(row, k) for k in ("status", "error", "base_bytes", "peak_bytes", "peak_delta_bytes",
                                              "note")})
print(json.dumps(rows))  # the last line: what predict printed comes before it
"""


def installed(dist: str, version: str) -> Path:
    """The directory holding `dist==version` and nothing else (installed into `CACHE` the
    first time); skips the test where pip cannot install it."""
    final = CACHE / f"{dist}-{version}"
    if final.is_dir():
        return final
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dist}-{version}-", dir=CACHE))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
                           "--disable-pip-version-check", "--target", str(staging), f"{dist}=={version}"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        pytest.skip(f"{dist}=={version} could not be installed (pip install --no-deps --target; the package "
                    f"registry unreachable?): {last}")
    try:
        staging.rename(final)
    except OSError:  # another process installed it first
        shutil.rmtree(staging, ignore_errors=True)
    return final


def predict_with(directory: Path, package: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each call's row (status, error, base_bytes, peak_bytes, peak_delta_bytes, note), from
    `cebench.api.predict(**call["grid"])` in one Python where `package` is `directory`'s
    (`call["split_off"]`: charged as requests split off cached blocks)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(
        {"directory": str(directory), "package": package, "calls": calls}), env=env, capture_output=True,
        text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return rows
