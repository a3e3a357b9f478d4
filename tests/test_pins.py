"""The peers' releases, declared once (`cebench/core/pins.py`): `make install` installs them, and a
variant whose peer is missing names the command that installs the same release while keeping the
torch installed (`--no-deps` for every peer whose own requirements name torch)."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cebench.core import devices, pins
from cebench.engine import compiled, support
from cebench.losses import variants
from cebench.shims import peers as peers_shim
from cebench.shims import transformers as transformers_shim
from cebench.shims import triton as triton_shim
from conftest import CHECKED_TRITON

ROOT = Path(__file__).resolve().parents[1]
H100 = devices.get("h100-80gb")
KEEPS = f"({pins.KEEPS_TORCH})"


def _found(monkeypatch, absent: tuple[str, ...] = (), present: tuple[str, ...] = ()) -> None:
    """`importlib.util.find_spec` as if the modules `absent` were not installed and `present` were."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name in absent:
            return None
        if name in present:
            return object()
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_a_missing_peer_is_named_with_its_pinned_release_installed_without_its_deps(monkeypatch):
    """What `cebench fit --variant liger-kernel` says where Liger (and Triton) are missing: the
    command `make install` runs, not a plain `pip install liger-kernel` that can replace torch."""
    _found(monkeypatch, absent=("liger_kernel", "triton"))
    reason = support.variant_reason("liger-kernel", H100, predicted=True)
    assert reason == "needs liger_kernel: pip install --no-deps liger-kernel==0.8.5 triton==3.9.0 " + KEEPS
    assert pins.PINS["liger-kernel"] == "0.8.5" and pins.PINS["triton"] == "3.9.0"  # what this test reads
    _found(monkeypatch, absent=("cut_cross_entropy",), present=("triton",))  # a CUDA torch brings its Triton
    assert (support.variant_reason("cut-cross-entropy", H100, predicted=True)
            == f"needs cut_cross_entropy: pip install --no-deps {pins.spec('cut-cross-entropy')} {KEEPS}")


def test_an_installed_peer_without_triton_is_told_to_install_it_alone(monkeypatch):
    _found(monkeypatch, absent=("triton",), present=("liger_kernel",))
    assert (variants.get("liger-kernel").requires.missing()
            == [f"liger_kernel needs triton: pip install --no-deps {pins.spec('triton')} {KEEPS}"])


def test_transformers_is_named_pinned_with_its_requirements(monkeypatch):
    """transformers requires no torch (`test_transformers_requires_no_torch`): installed as pip
    installs it, pinned."""
    _found(monkeypatch, absent=("transformers",))
    assert variants.get("hf-loss").requires.missing() == [
        f"needs transformers: pip install {pins.spec('transformers')}"]


def test_triton_missing_for_a_compiled_gpu_step_is_named_pinned(monkeypatch):
    _found(monkeypatch, absent=("triton",))
    assert compiled.unsupported_reason(H100).endswith(f": pip install --no-deps {pins.spec('triton')} {KEEPS}")


def test_a_distribution_not_pinned_is_named_as_it_is():
    assert pins.install("some-loss") == "pip install some-loss"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_install_installs_the_pinned_peers_each_keeping_torch(tmp_path):
    """`make install` (and its alias `install-peers`, which .ci/torch-builds runs) installs every
    pinned release, the peers whose requirements name torch with --no-deps."""
    for target in ("install", "install-peers"):
        lines = subprocess.run(["make", "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.replace("\\\n", " ").splitlines()
        installs = [line for line in lines if "pip install" in line]
        for dist in pins.PINS:
            (line,) = [line for line in installs if f'"{pins.spec(dist)}"' in line]
            assert ("--no-deps" in line) == (dist in pins.NO_DEPS), line
        named = {m for line in installs for m in re.findall(r'"([A-Za-z0-9_.-]+)==[^"]*"', line)}
        assert named == {"torch", *pins.PINS}, named  # the CPU torch (where none is) and the peers


def test_the_pins_are_printed_by_the_module_alone():
    """The Makefile runs `python3 cebench/core/pins.py` before cebench is installed: no site-packages."""
    out = subprocess.run([sys.executable, "-I", "-S", "cebench/core/pins.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    assert out.split() == [pins.spec(dist) for dist in pins.PINS]


def test_each_pin_is_a_release_cebench_was_checked_against():
    assert pins.PINS["liger-kernel"] in variants.get("liger-kernel").peer.checked
    assert pins.PINS["cut-cross-entropy"] in variants.get("cut-cross-entropy").peer.checked
    assert pins.PINS["cut-cross-entropy"] in peers_shim.CHECKED["cut-cross-entropy"]
    assert pins.PINS["triton"] in triton_shim.CHECKED["triton"]
    assert pins.PINS["triton"] == CHECKED_TRITON  # the interpreter the Liger-on-CPU bytes were counted under
    assert pins.PINS["transformers"] in transformers_shim.CHECKED["transformers"]
    assert set(pins.MODULES) == set(pins.PINS)


@pytest.mark.needs("transformers")
def test_transformers_requires_no_torch():
    """Why `make install` installs transformers with its requirements: none of them, nor theirs
    (as installed here), is torch."""
    from packaging.requirements import Requirement

    seen, todo = set(), ["transformers"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            required = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in required:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name.lower().replace("_", "-"))
    assert "torch" not in seen and "triton" not in seen, sorted(seen)
