"""Command-line interface: parses options, calls the library, renders what it returns.

Exit codes: 0 success, 1 a check failed (regression, verification), 2 bad input.
"""
from __future__ import annotations

import sys

from cebench.cli import analyze as _analyze  # noqa: F401  (registers show, plot, check)
from cebench.cli import explain as _explain  # noqa: F401
from cebench.cli import listing as _listing  # noqa: F401  (registers variants)
from cebench.cli import merge as _merge  # noqa: F401
from cebench.cli import predict as _predict  # noqa: F401  (registers predict, fit)
from cebench.cli import sweep as _sweep  # noqa: F401  (registers the command)
from cebench.cli import verify as _verify  # noqa: F401
from cebench.cli.app import app
from cebench.core import interpreter
from cebench.core.version import torch_outside_range


def main() -> None:
    """Console-script entry point. A torch outside the releases cebench supports is told in
    one line (exit 2). The command runs Triton kernels (Liger's) under Triton's
    interpreter on a machine without a GPU, and in the children it starts
    (`cebench.core.interpreter`): chosen before anything imports triton."""
    outside = torch_outside_range()  # read from torch's metadata: this package imports no torch
    if outside:
        print(f"cebench: {outside}", file=sys.stderr)
        sys.exit(2)
    interpreter.enable()
    app()


__all__ = ["app", "main"]
