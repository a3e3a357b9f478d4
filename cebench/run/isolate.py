"""Work in a fresh child process, bounded by a timeout.

A point measured this way cannot take the sweep down with it: a segfault, an abort, a
hang or an illegal memory access that poisons the CUDA context ends only the child, and
the next point starts in a clean process with an empty caching allocator.

Children are forked from a server process that imported torch once (multiprocessing's
`forkserver`, torch preloaded; torch's import initializes no GPU), so a child starts in
milliseconds rather than the seconds of importing torch; where there is no forkserver
(Windows) each child is spawned. A child runs with the parent's environment as it is
when the child starts, not as it was when the server started.

None of these processes outlives the parent, however it ends (`_orphan_proof`): the parent
ends its children itself when it can (a timeout, an answer, Ctrl-C, SIGTERM), and when it
cannot (SIGKILL), the server sees the parent gone and exits, and each child dies with the
server (Linux: the kernel's parent-death signal, set before any of the child's work; else
a thread that waits for the parent's end); multiprocessing's resource tracker exits once
they are all gone.
"""
from __future__ import annotations

import ctypes
import functools
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import multiprocessing.process
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cebench.core.devices import HOST, Device
from cebench.core.errors import UsageError, describe
from cebench.core.guard import NO_LIMIT_S
from cebench.shims.process import let_go_of_forkserver
from cebench.store.schema import Status

JOIN_S = 10.0  # how long a child that sent its answer may take to exit before it is killed (s)


@dataclass(frozen=True)
class Child:
    """What a child needs to stand where its parent stands: the `--variant` values to
    resolve again (a user's variants live only in the process that loaded them), the
    intra-op thread count, and the index of the `device` to select (None: leave the
    default)."""

    specs: tuple[str, ...] = ()
    threads: int | None = None
    device: Device = HOST
    device_index: int | None = None


@dataclass(frozen=True)
class Outcome:
    """A child's return value, or why there is none: `status` 'ok', 'error' (it raised or
    died) or 'timeout' (it was killed after the timeout), `error` saying how; `usage`: what
    it raised was a `UsageError` (bad input, not a crash), whose message `error` is."""

    status: str
    value: Any = None
    error: str = ""
    usage: bool = False


def setup(child: Child) -> None:
    """Bring this process to where the parent stood (see `Child`). torch is imported only
    to set the thread count (or by what the rest needs): a child that does not use it does
    not pay its seconds of start-up."""
    from cebench.losses import variants

    if child.threads is not None:
        import torch

        torch.set_num_threads(child.threads)
    if child.device_index is not None:
        child.device.select(child.device_index)
    for spec in child.specs:
        variants.resolve(spec)


@functools.cache
def _context() -> multiprocessing.context.SpawnContext | multiprocessing.context.ForkServerContext:
    """Where children come from: a forkserver that preloads torch and freezes its heap
    (`cebench.run.server_heap`), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["cebench.run.server_heap"])
    return ctx


PR_SET_PDEATHSIG = 1  # prctl's option: the signal this process gets when its parent ends (<linux/prctl.h>)


def _die_with_parent() -> bool:
    """Have the kernel kill this process (SIGKILL) when its parent ends: whether it could
    (Linux only). Set in a forked or spawned child, it lasts until the child ends."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _orphan_proof() -> None:
    """Make sure this child does not outlive the sweep's process (see the module), before
    it does anything else.

    A forkserver's child is the server's child, and the server exits only when every holder
    of its "alive" pipe has closed it: the parent, and each child, which inherits a copy.
    This child dies with its parent (the server, or the sweep's process where it was
    spawned), then lets go of its copy, so that the parent's death, SIGKILL included, ends
    the server and with it this child; in that order, the server cannot be gone before the
    death signal is set. Where the kernel has no death signal, a thread waits (blocked, never
    polling) for the end of the pipe from the sweep's process, which only its death closes,
    and ends the child. (A daemonic child starts no process: it has no use for the server.)"""
    parent = multiprocessing.parent_process()
    if parent is None:  # not a child: the server's pipe, if any, is this process's own
        return
    if not _die_with_parent() and parent.sentinel is not None:
        def watch(sentinel: Any) -> None:
            multiprocessing.connection.wait([sentinel])
            os._exit(1)  # the sweep's process is gone: no one waits for this child's answer

        threading.Thread(target=watch, args=(parent.sentinel,), name="cebench-orphan-watch", daemon=True).start()
    let_go_of_forkserver()


def _main(conn: Any, child: Child, fn: Callable[..., Any], args: tuple[Any, ...], environ: dict[str, str]) -> None:
    _orphan_proof()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which ends this child
    os.environ.clear()  # the parent's now: a forkserver's children start from the server's
    os.environ.update(environ)
    try:
        setup(child)
        conn.send(Outcome(Status.OK, fn(*args)))
    except UsageError as exc:
        conn.send(Outcome(Status.ERROR, error=str(exc), usage=True))
    except BaseException as exc:  # noqa: BLE001 - whatever happens is the parent's answer
        conn.send(Outcome(Status.ERROR, error=describe(exc)))
    finally:
        conn.close()


def death(exitcode: int | None, who: str = "the point's process") -> str:
    """How `who`, a process that sent no answer, ended: killed by a signal, or exited with `exitcode`."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"{who} died of {name} (exit code {exitcode})"
    return f"{who} exited with code {exitcode} without a result"


def start(fn: Callable[..., Any], args: tuple[Any, ...], child: Child, environ: Mapping[str, str] | None = None
          ) -> tuple[multiprocessing.process.BaseProcess, multiprocessing.connection.Connection]:
    """Start `fn(*args)` in a fresh process (`_context`) set up as `child`, with `environ`
    (default this process's): the process, and the end of the pipe its `Outcome` comes
    through (end-of-file: it ended without one, `death`). It ignores Ctrl-C (its parent
    ends it) and is daemonic: it cannot start processes, and ends when its parent does,
    however that ends (`_orphan_proof`).
    `fn`, `args` and the value must pickle."""
    ctx = _context()
    receive, send = ctx.Pipe(duplex=False)
    environ = dict(os.environ if environ is None else environ)
    proc = ctx.Process(target=_main, args=(send, child, fn, args, environ), daemon=True)
    proc.start()
    send.close()  # the child holds the only write end: its death reads as end-of-file
    return proc, receive


def wait_s(timeout_s: float | None) -> float | None:
    """`timeout_s` as a wait takes it: None (for ever) for None or above `NO_LIMIT_S`, which
    `poll()` cannot wait."""
    return None if timeout_s is None or timeout_s > NO_LIMIT_S else timeout_s


def call(fn: Callable[..., Any], args: tuple[Any, ...], child: Child, timeout_s: float | None) -> Outcome:
    """`fn(*args)` in a fresh process (`_context`) set up as `child`, waiting at most `timeout_s`
    seconds (None, or above `NO_LIMIT_S`: no limit) for its answer. `fn`, `args` and the
    value must pickle."""
    timeout_s = wait_s(timeout_s)
    proc, receive = start(fn, args, child)
    try:
        if not receive.poll(timeout_s):
            return Outcome(Status.TIMEOUT, error=f"no result after {timeout_s:g} s (--point-timeout); its process "
                                                   "was killed")
        try:
            outcome: Outcome = receive.recv()
        except EOFError:
            proc.join()
            return Outcome(Status.ERROR, error=death(proc.exitcode))
        proc.join(JOIN_S)
        return outcome
    finally:
        receive.close()
        if proc.is_alive():
            proc.kill()
            proc.join()
