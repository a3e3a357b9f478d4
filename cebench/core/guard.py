"""User code (a loss, a model's build) run in cebench's own process, where its `sys.exit`,
`os._exit` or `KeyboardInterrupt` would end the command without a word: inside
`user_code(...)` each becomes a one-line `UsageError` naming that code, and Ctrl-C raises
`Interrupted`, so that the person's interrupt is told apart from the code's own.

Guards nest: the innermost names the code that exited (a model's `build()` inside a sweep's
point), the outermost says where it ran, what it would have ended and what to do instead
(a sweep: measure it with `--isolate`). Within `time_limit(seconds)`, user code still running
after that long is stopped the same way (a hung `build()` while an isolated sweep plans its
points, which `--point-timeout` bounds), where a signal can reach it: the main thread of a
POSIX process, code that returns to Python. What happened while a module was being imported (a
user's module, a peer's package) names that module too: 'while importing liger_kernel'.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

from cebench.core.errors import UsageError
from cebench.core.patched import Replaced


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT; `cebench sweep` also raises it for SIGTERM) while user code ran: the
    person, not the code (which may raise a `KeyboardInterrupt` of its own)."""


class _Exit(BaseException):
    """Raised in place of `os._exit` while user code runs."""

    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class _Where:
    """Where guarded code runs (`where`), what its exit would end (`ends`) and what to do
    instead (`hint`, '' for nothing); `owns_sigint`: the outermost guard put `_interrupt` in
    place of the default SIGINT handler."""

    where: str
    ends: str
    hint: str
    owns_sigint: bool


NO_LIMIT_S = 1e6  # a time limit above this many seconds (11.6 days; inf too) is no limit
_STACK: list[_Where] = []  # the guards entered, outermost first
EXIT = Replaced("os", ("_exit",), "user code's `os._exit` raises `_Exit` instead, said as a one-line error")
_LIMIT: list[float] = []  # the seconds `time_limit` gives user code, innermost last


class _Late(BaseException):
    """Raised by SIGALRM in user code that ran past its `time_limit`."""


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Within: each `user_code` block still running after `seconds` is stopped (None, or above
    `NO_LIMIT_S`: no limit). `UsageError` (param 'point_timeout', the option that gives it)
    for a number of seconds that is not positive."""
    if seconds is not None and not seconds > 0:  # nan too
        raise UsageError(f"{seconds:g} must be a positive number of seconds", "point_timeout")
    if seconds is None or seconds > NO_LIMIT_S:
        yield
        return
    _LIMIT.append(seconds)
    try:
        yield
    finally:
        _LIMIT.pop()


def _late(signum: int, frame: object) -> None:
    raise _Late


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted


def _exit(code: object = 0) -> None:
    raise _Exit(code)


USER_MODULE = "cebench_user_"  # how the module a user's file is imported as is named (`cebench.losses.loader`)


def importing(tb: TracebackType | None) -> str | None:
    """The module whose import was running where the traceback `tb` ends (the innermost
    module body on it: 'liger_kernel', or a user's file, by its path), None when none was."""
    found = None
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "<module>":
            name = tb.tb_frame.f_globals.get("__name__")
            path = tb.tb_frame.f_code.co_filename
            found = path if not isinstance(name, str) or name.startswith(USER_MODULE) else name
        tb = tb.tb_next
    return found


@contextlib.contextmanager
def user_code(name: str, param: str, *, where: str = "cebench's process", ends: str = "the command",
              hint: str = "") -> Iterator[None]:
    """Run the block as user code called `name` (the flag `param` gave it): its exits and
    interrupts become a `UsageError` '<name> raised SystemExit(3) in <where>, which would end
    <ends>[; <hint>]'. Nested inside another guard, `where`, `ends` and `hint` are the
    outermost's."""
    outermost = not _STACK
    exits = contextlib.ExitStack()
    main = threading.current_thread() is threading.main_thread()
    limit = _LIMIT[-1] if _LIMIT and outermost and main and hasattr(signal, "setitimer") else None
    if outermost:
        owns = main and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        if owns:
            signal.signal(signal.SIGINT, _interrupt)
        exits.enter_context(EXIT({"_exit": _exit}))
        _STACK.append(_Where(where, ends, hint, owns))
    if limit is not None:
        alarm = signal.signal(signal.SIGALRM, _late)
        signal.setitimer(signal.ITIMER_REAL, limit)
    context = _STACK[0]
    how, late, module = "", False, None
    try:
        yield
    except _Late as exc:
        late, module = True, importing(exc.__traceback__)
    except SystemExit as exc:
        how, module = f"raised SystemExit({exc.code!r})", importing(exc.__traceback__)
    except _Exit as exc:
        how, module = f"called os._exit({exc.code!r})", importing(exc.__traceback__)
    except KeyboardInterrupt as exc:
        if not context.owns_sigint or isinstance(exc, Interrupted):
            raise
        how, module = "raised KeyboardInterrupt", importing(exc.__traceback__)
    finally:
        if limit is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, alarm)
        if outermost:
            _STACK.pop()
            exits.close()
            if context.owns_sigint:
                signal.signal(signal.SIGINT, signal.default_int_handler)
    if late:
        doing = "running" if module is None else f"importing {module}"
        raise UsageError(f"{name} was still {doing} after {limit:g} s in {context.where}: stopped", param)
    if how:
        how += "" if module is None else f" while importing {module}"
        raise UsageError(f"{name} {how} in {context.where}, which would end {context.ends}"
                         + (f"; {context.hint}" if context.hint else ""), param)
