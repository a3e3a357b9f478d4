"""Command-line interface: parses options, calls the library, renders what it returns.

Exit codes: 0 success, 1 a check failed (regression, verification), 2 bad input.
"""
from __future__ import annotations

import os
import sys
import threading

from cebench.cli import analyze as _analyze  # noqa: F401  (registers show, plot, check)
from cebench.cli import explain as _explain  # noqa: F401
from cebench.cli import listing as _listing  # noqa: F401  (registers variants)
from cebench.cli import merge as _merge  # noqa: F401
from cebench.cli import predict as _predict  # noqa: F401  (registers predict, fit)
from cebench.cli import sweep as _sweep  # noqa: F401  (registers the command)
from cebench.cli import verify as _verify  # noqa: F401
from cebench.cli.app import app
from cebench.core import interpreter
from cebench.core.guard import USER_MODULE
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
    try:
        app()
    except SystemExit as exc:
        _leave(exc.code)
        raise
    _leave(0)


def _leave(code: object) -> None:
    """Once the command has written what it writes: a thread user code started and left
    running (not a daemon, other than the main one), which Python would wait for without end,
    is told in one line on stderr, and the process exits with the command's `code` at once."""
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()
            and _starter(t) != "concurrent.futures.thread"]  # an executor's idle workers end as Python exits
    if not left:
        return
    for line in dict.fromkeys(f"warning: {_starter(t)} left thread {t.name!r} running; exiting" for t in left):
        print(line, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def _starter(thread: threading.Thread) -> str:
    """The module whose code `thread` runs (a user's file, by its path), or 'user code'."""
    run = getattr(thread, "_target", None) or type(thread).run
    module = sys.modules.get(getattr(run, "__module__", None) or "")
    name = getattr(module, "__name__", None)
    if module is None or name is None:
        return "user code"
    return (getattr(module, "__file__", None) or name) if name.startswith(USER_MODULE) else name


__all__ = ["app", "main"]
