"""`cebench.run.isolate.call`: a value, an exception, a `UsageError`, a child killed by a
signal, one that exits without an answer and one that outlives its timeout.

Each child is forked from a server that imported torch once (a second or more of CPU), so
the real ones start at once and the others are `_main` run here on a pipe, which is what the
child runs after its setup. This module imports nothing heavy: each child imports it."""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cebench.core.errors import UsageError
from cebench.run import isolate
from cebench.run.isolate import Child, Outcome, call


def add(a: int, b: int) -> int:
    return a + b


def raise_value_error() -> None:
    raise ValueError("bad value\nsecond line")


def raise_usage_error() -> None:
    raise UsageError("--variant mine: no such thing")


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def hang() -> None:
    time.sleep(600)


def torch_imported() -> bool:
    return "torch" in sys.modules


def getenv(name: str) -> str | None:
    return os.environ.get(name)


SPAWNED = {  # name: (fn, args, timeout_s)
    "value": (add, (2, 3), 300),
    "signal": (kill_self, (), 300),
    "timeout": (hang, (), 1),  # it cannot answer in 1 s, however fast it starts
    "preloaded": (torch_imported, (), 300),
}


@pytest.fixture(scope="module")
def spawned() -> dict[str, Outcome]:
    with ThreadPoolExecutor(len(SPAWNED)) as pool:
        futures = {name: pool.submit(call, fn, args, Child(), timeout) for name, (fn, args, timeout) in SPAWNED.items()}
        return {name: future.result() for name, future in futures.items()}


def in_process(fn, *args) -> Outcome:
    """What a child set up as `Child()` sends for `fn(*args)` (its SIGINT left alone here)."""
    receive, send = multiprocessing.Pipe(duplex=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(isolate.signal, "signal", lambda *args: None)
        isolate._main(send, Child(), fn, args, dict(os.environ))
    with receive:
        assert receive.poll(0)
        return receive.recv()


def test_a_value_comes_back(spawned):
    assert spawned["value"] == Outcome("ok", 5)
    assert in_process(add, 2, 3) == Outcome("ok", 5)


def test_an_exception_is_an_error_in_one_line():
    assert in_process(raise_value_error) == Outcome("error", error="ValueError: bad value")


def test_a_usage_error_is_marked_as_one():
    assert in_process(raise_usage_error) == Outcome("error", error="--variant mine: no such thing", usage=True)


def test_a_child_killed_by_a_signal_is_named(spawned):
    assert spawned["signal"] == Outcome("error", error="the point's process died of SIGKILL (exit code -9)")
    assert isolate.death(-signal.SIGABRT) == "the point's process died of SIGABRT (exit code -6)"
    assert isolate.death(-200) == "the point's process died of signal 200 (exit code -200)"


def test_a_child_that_exits_without_an_answer_is_named():
    assert isolate.death(3) == "the point's process exited with code 3 without a result"
    assert isolate.death(0) == "the point's process exited with code 0 without a result"


def test_a_child_past_its_timeout_is_killed(spawned):
    assert spawned["timeout"] == Outcome("timeout", error="no result after 1 s (--point-timeout); its process "
                                                          "was killed")
    assert multiprocessing.active_children() == []  # every child ended and reaped, the sleeping one too


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="spawned children (Windows)")
def test_a_child_starts_with_torch_imported_and_the_environment_as_it_is_now(spawned, monkeypatch):
    """Forked from a server that imported torch (not a fresh interpreter's seconds of import),
    yet with the parent's environment of the moment, not the server's."""
    assert spawned["preloaded"] == Outcome("ok", True)  # `Child()` imports nothing: the server did
    monkeypatch.setenv("CEBENCH_ISOLATE_PROBE", "now")
    assert call(getenv, ("CEBENCH_ISOLATE_PROBE",), Child(), 300) == Outcome("ok", "now")
