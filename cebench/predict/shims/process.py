"""The process's own settings a fake world of ranks changes (`cebench.predict.fake_world`):
its garbage collector, off while a sharded step runs (FSDP's steps leave garbage in cycles,
collected at times that reorder the trace's frees), and `sys.excepthook`, which starting a
process group replaces for good."""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from cebench.core.patched import Replaced

CHECKED = {"torch": ("2.9.0", "2.13.0", "2.14.1")}
EXCEPTHOOK = Replaced("sys", ("excepthook",), "kept as it was: each process group's start prefixes tracebacks "
                      "with its rank, for good")


@contextlib.contextmanager
def without_gc() -> Iterator[None]:
    """Within: the garbage collector does not run (it runs again after, if it ran before)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@contextlib.contextmanager
def excepthook_kept() -> Iterator[None]:
    """Within: whatever replaces `sys.excepthook` is undone after."""
    import sys

    with EXCEPTHOOK({"excepthook": sys.excepthook}):
        yield
