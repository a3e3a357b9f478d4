"""The process's own settings a fake world of ranks changes (`cebench.engine.fake_world`):
its garbage collector, off while a sharded step runs (FSDP's steps leave garbage in cycles,
collected at times that reorder the trace's frees), and `sys.excepthook`, which starting a
process group replaces for good; and a forkserver child's copy of the server's "alive" pipe,
let go of (`cebench.run.isolate`: the server then ends with the sweep's process)."""
from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

from cebench.core.patched import Replaced
from cebench.core.version import TORCH_CHECKED

CHECKED = {"torch": TORCH_CHECKED, "python": ("3.11",)}
FORKSERVER = Replaced("multiprocessing.forkserver.ForkServer", ("_forkserver_alive_fd",),
                      "a child's copy of the server's alive pipe, closed: only the sweep's process then keeps the "
                      "server alive", instance=True)
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


def let_go_of_forkserver() -> None:
    """In a forkserver's child: close its copy of the server's "alive" pipe (the server exits
    once every holder closed it); nothing in any other process."""
    import sys

    forkserver = sys.modules.get("multiprocessing.forkserver")  # a forkserver's child runs in it: imported
    server = getattr(forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        os.close(alive)
        FORKSERVER.set_on(server, {"_forkserver_alive_fd": None})
