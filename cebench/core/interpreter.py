"""Triton kernels on a CPU: Triton's interpreter (`TRITON_INTERPRET=1`) runs them there,
with correct values but not a GPU's memory or time. The variable only takes effect when
it is set before `triton` is first imported (`torch.utils.flop_counter` and
`torch.compile` import it), so cebench chooses it (`enable`) just before it imports
triton itself: the command line when it starts (`cebench.cli.main`), the library before
it counts FLOPs, compiles, or runs or checks a variant whose kernels run interpreted.
`import cebench` leaves the environment alone.

A leaf module: it imports nothing (torch included) but `cebench.core.pins`, itself a leaf."""
from __future__ import annotations

import glob
import importlib.util
import os
import sys

from cebench.core import pins

ENV = "TRITON_INTERPRET"
GPU_NODES = ("/dev/nvidia*", "/dev/kfd", "/dev/dxg")  # NVIDIA, AMD ROCm, WSL: where Triton can compile for a GPU


def has_gpu_nodes() -> bool:
    """Whether this machine has a GPU's device files (without importing torch)."""
    return any(glob.glob(pattern) for pattern in GPU_NODES)


def enable() -> None:
    """Choose Triton's interpreter for this process and the children it starts, unless the
    environment already says, triton is already imported, or the machine has a GPU."""
    if ENV not in os.environ and "triton" not in sys.modules and not has_gpu_nodes():
        os.environ[ENV] = "1"


def unavailable_reason() -> str | None:
    """Why Triton kernels cannot run on this CPU now, or None: triton is missing, or runs
    compiled (it was imported without the interpreter, or the environment says so)."""
    if importlib.util.find_spec("triton") is None:
        return f"needs triton (its interpreter runs Triton kernels on a CPU): {pins.install('triton')}"
    if "triton" in sys.modules:
        import triton

        interpreted = bool(triton.knobs.runtime.interpret)
    else:
        interpreted = os.environ.get(ENV) == "1"
    if not interpreted:
        return f"Triton kernels run on a CPU only under its interpreter: set {ENV}=1 in the environment"
    return None
