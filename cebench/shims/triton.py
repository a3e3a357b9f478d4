"""Triton's kernel launchers, made to launch nothing in a step traced on `meta`
(`cebench.engine.triton_launches`): `run` of each launcher class that defines one, and the
interpreter's `[grid]` where Triton 3.4 runs the grid without `run`."""
from __future__ import annotations

from cebench.core.patched import Replaced

CHECKED = {"triton": ("3.4.0", "3.8.0", "3.9.0")}
_WHY = "a kernel launch that records the kernel and does nothing"
JIT_RUN = Replaced("triton.runtime.jit.JITFunction", ("run",), _WHY, needs="triton")
AUTOTUNER_RUN = Replaced("triton.runtime.autotuner.Autotuner", ("run",), _WHY, needs="triton")
HEURISTICS_RUN = Replaced("triton.runtime.autotuner.Heuristics", ("run",), _WHY, needs="triton")
# Triton's interpreter: 3.8 on launch through its `run`; 3.4 has none, and runs `kernel[grid]` itself.
INTERPRETED_RUN = Replaced("triton.runtime.interpreter.InterpretedFunction", (), _WHY, added=("run",), needs="triton")
GRID = Replaced("triton.runtime.interpreter.InterpretedFunction", (), "Triton 3.4's interpreter runs `kernel[grid]` "
                "itself: made to launch through the recording `run`", added=("__getitem__",), needs="triton")
LAUNCHERS = (JIT_RUN, AUTOTUNER_RUN, HEURISTICS_RUN, INTERPRETED_RUN)
