"""Triton's interpreter (`TRITON_INTERPRET`) is cebench's choice only when cebench runs
Triton code on a CPU: importing the package leaves the user's environment alone."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from cebench.core import interpreter


def fresh(code: str) -> str:
    """What `code` prints in a new interpreter whose environment does not set TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if k != interpreter.ENV}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_cebench_does_not_choose_the_interpreter():
    assert fresh("import cebench, os; print(os.environ.get('TRITON_INTERPRET'))") == "None"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
@pytest.mark.skipif(interpreter.has_gpu_nodes(), reason="with a GPU, Triton kernels run compiled")
def test_cebench_chooses_it_before_it_imports_triton_on_a_cpu():
    # Counting FLOPs imports triton (torch.utils.flop_counter): it runs interpreted from then on.
    assert fresh("import os, cebench.engine.trace as m; m.flop_counter(); import triton; "
                 "print(os.environ.get('TRITON_INTERPRET'), triton.knobs.runtime.interpret)") == "1 True"
    # A variant whose kernels run interpreted on a CPU (Liger's) is asked first whether it can.
    assert fresh("import os; from cebench.losses import variants; ok = variants.get('liger-kernel')"
                 ".unsupported_reason('cpu') is None; print(os.environ.get('TRITON_INTERPRET'), ok)") == (
        f"1 {importlib.util.find_spec('liger_kernel') is not None}")
