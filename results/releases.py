"""Releases of a peer other than the installed one, for the tests that predict a published
figure with the release that measured it.

`installed(dist, version)` installs `dist==version` with `pip install --no-deps --target`
(never its requirements: torch and triton stay this environment's) into `CACHE`
($CEBENCH_PEER_CACHE, else `<tmp>/cebench-peers`), once per machine: the package registry is
asked the first time (seconds), later runs find the directory. An install goes to a
temporary directory first and is renamed into place, so two test processes installing the
same release at once both end with one complete copy. Where pip cannot install it (no
network), it raises `Unavailable`, saying why (a test skips: `tests/peer_releases.py`).
Used by the tests that predict published figures and by `results/calibrate_time.py` and
`results/judge_time.py`, which trace each published timing row with the release that ran it.

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

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("CEBENCH_PEER_CACHE") or Path(tempfile.gettempdir()) / "cebench-peers")
# The child: bind the package to the release's directory, then answer the calls (JSON in, JSON out).
_CHILD = """
import importlib.machinery, importlib.util, json, sys
job = json.load(sys.stdin)
sys.path.insert(0, job["directory"])  # its dist-info first too: importlib.metadata reports the release
spec = importlib.machinery.PathFinder.find_spec(job["package"], [job["directory"]])
module = importlib.util.module_from_spec(spec)
sys.modules[job["package"]] = module
spec.loader.exec_module(module)
import releases
print(json.dumps(releases.answer(job["calls"])))  # the last line: what predict printed comes before it
"""
FIELDS = ("status", "error", "base_bytes", "peak_bytes", "peak_delta_bytes", "note", "predicted_time_ms")


def answer(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each call's row (`FIELDS`) from `cebench.api.predict(**call["grid"])`, here: with
    `call["split_off"]`, every request charged as one split off a cached block; with
    `call["ops"]`, also the ops its step ran (`OpCost` fields and count, `cebench.engine.costs`)."""
    import contextlib
    from dataclasses import astuple
    from unittest import mock

    from cebench.api import predict
    from cebench.core import devices
    from cebench.engine import trace
    from cebench.engine.costs import Costs
    from cebench.run.grid import GridOptions

    rows = []
    for call in calls:
        with mock.patch.object(devices.CUDA, "block_bytes", devices.Device.block_bytes) if call.get("split_off") \
                else contextlib.nullcontext():
            (row,) = predict(**call["grid"])
        found = {k: getattr(row, k) for k in FIELDS}
        if call.get("ops") and row.status == "ok":
            grid = dict(call["grid"])
            target = str(grid.pop("target"))
            (config,) = GridOptions(**grid).grid(target).expand()
            costs = Costs()
            trace.trace(config, costs=costs)
            found["ops"] = [[*astuple(op), n] for op, n in costs.ops.items()]
        rows.append(found)
    return rows


class Unavailable(RuntimeError):
    """A release pip could not install here (no network, say)."""


def installed(dist: str, version: str) -> Path:
    """The directory holding `dist==version` and nothing else (installed into `CACHE` the
    first time); `Unavailable` where pip cannot install it."""
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
        raise Unavailable(f"{dist}=={version} could not be installed (pip install --no-deps --target; the package "
                          f"registry unreachable?): {last}")
    try:
        staging.rename(final)
    except OSError:  # another process installed it first
        shutil.rmtree(staging, ignore_errors=True)
    return final


def from_commit(repo: Path, commit: str, package: str = "liger_kernel", under: str = "src") -> Path:
    """The directory holding `package` as `commit` of the git repository `repo` has it (its
    `under/package` tree, extracted into `CACHE` the first time): the code a published row
    ran where that was no release (a branch, a nightly build of main). `Unavailable` where
    `repo` lacks the commit."""
    final = CACHE / f"{package}-{commit}"
    if final.is_dir():
        return final
    CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{package}-{commit}-", dir=CACHE))
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit, f"{under}/{package}"],
                             capture_output=True, timeout=120)
    if archive.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise Unavailable(f"{repo} has no {under}/{package} at {commit}: {archive.stderr.decode()[-300:]}")
    subprocess.run(["tar", "-x", "-C", str(staging), "--strip-components=1"], input=archive.stdout, check=True)
    try:
        staging.rename(final)
    except OSError:  # another process extracted it first
        shutil.rmtree(staging, ignore_errors=True)
    return final


def predict_with(directory: Path, package: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`answer(calls)` in one fresh Python where `package` is `directory`'s."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "results"),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(
        {"directory": str(directory), "package": package, "calls": calls}), env=env, capture_output=True,
        text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return rows
