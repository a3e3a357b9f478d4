"""The peers' releases `make install` installs beside torch, declared once: the Makefile reads
them from here (`python3 cebench/core/pins.py` prints them as pip specs), and a variant whose
peer is missing names the command that installs the same release (`install`).

Liger-Kernel and Cut Cross-Entropy are installed with ``--no-deps``: their own requirements
name torch, and pip would replace the torch already installed (a CUDA build, say) to satisfy
them. What they need besides torch is named instead (`NEEDS`: Triton, where none is importable;
a CUDA torch brings its own), and Triton too is installed with ``--no-deps`` (it needs nothing
else on Python >= 3.10). transformers is installed with its requirements, none of which is
torch (its metadata names torch in extras only).

A leaf module: it imports nothing of cebench's, nor torch, so that the Makefile can run it
before cebench is installed."""
from __future__ import annotations

import importlib.util

# distribution → the release installed (triton only where none is importable)
PINS = {
    "triton": "3.9.0",
    "liger-kernel": "0.8.5",
    "cut-cross-entropy": "25.1.1",
    "transformers": "5.25.0",
}
MODULES = {"triton": "triton", "liger-kernel": "liger_kernel", "cut-cross-entropy": "cut_cross_entropy",
           "transformers": "transformers"}  # distribution → the module it installs
NO_DEPS = frozenset({"triton", "liger-kernel", "cut-cross-entropy"})  # installed --no-deps
NEEDS = {"liger-kernel": ("triton",), "cut-cross-entropy": ("triton",)}  # what they import besides torch
KEEPS_TORCH = "--no-deps keeps the torch installed"


def spec(dist: str) -> str:
    """`dist` at its pin, as pip names it (``liger-kernel==0.8.5``)."""
    return f"{dist}=={PINS[dist]}"


def absent(dist: str) -> bool:
    """Whether `dist`'s module cannot be found here (nothing is imported)."""
    return importlib.util.find_spec(MODULES.get(dist, dist)) is None


def install(dist: str) -> str:
    """The pip command that installs `dist` as `make install` does, with what it needs that is
    absent here (``pip install --no-deps liger-kernel==0.8.5 triton==3.9.0``) and, where that is
    ``--no-deps``, why; a distribution not pinned here: ``pip install <dist>``."""
    if dist not in PINS:
        return f"pip install {dist}"
    dists = [dist, *(need for need in NEEDS.get(dist, ()) if absent(need))]
    if not any(d in NO_DEPS for d in dists):
        return f"pip install {' '.join(spec(d) for d in dists)}"
    return f"pip install --no-deps {' '.join(spec(d) for d in dists)} ({KEEPS_TORCH})"


if __name__ == "__main__":  # the Makefile's pins
    print(" ".join(spec(dist) for dist in PINS))
