"""A sweep that is killed takes its processes with it: the forkserver, the resource tracker
and an isolated point's child or a sharded point's ranks, even when the sweep's process dies
of SIGKILL and cannot end them itself (they used to run on, a hung one for ever).

Every process a sweep starts inherits its environment: the test marks it with a variable of
its own, and finds the sweep's processes by it in /proc (and by their ancestry and the pids
its loss or build writes, in case one changes its environment). Linux only: /proc."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from /proc")]

CEBENCH = Path(sys.executable).parent / "cebench"
MARK = "CEBENCH_ORPHANS_TEST"
GONE_S = 15.0  # how long the sweep's processes may take to end after it died (s)

HANGING_LOSS = '''import os
import pathlib
import time

import torch.nn.functional as F


def loss(h, weight, targets):
    """Writes its pid on a point (not the smoke test's vocab 16), then hangs."""
    if weight.shape[0] > 16:
        pathlib.Path({folder!r}, "point").write_text(str(os.getpid()))
        time.sleep(600)
    return F.cross_entropy((h @ weight.T).float(), targets)
'''

HANGING_BUILD = '''import os
import pathlib
import time

import torch.distributed as dist
from torch import nn


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 8)

    def forward(self, tokens):
        """In a rank: writes its pid; rank 1 then hangs."""
        if dist.is_initialized():
            pathlib.Path({folder!r}, f"rank{{dist.get_rank()}}").write_text(str(os.getpid()))
            if dist.get_rank() == 1:
                time.sleep(600)
        return self.embed(tokens)


def build():
    body = Body()
    return body, body.embed.weight
'''


def _stat(pid: int) -> tuple[int, str, int] | None:
    """`pid`'s parent, state and start time, or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()  # after the command's name, which may hold spaces
    return int(fields[1]), fields[0], int(fields[19])


def _pids() -> Iterator[int]:
    return (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())


def _descendants(root: int) -> set[int]:
    parents = {pid: stat[0] for pid in _pids() if (stat := _stat(pid))}
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _marked(token: str) -> set[int]:
    """The processes whose environment holds this test's mark."""
    mark = f"{MARK}={token}".encode()
    found = set()
    for pid in _pids():
        try:
            if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.add(pid)
        except OSError:
            pass
    return found


def _alive(pid: int, started: int | None) -> bool:
    """`pid` runs (a zombie has ended), and is the process that started at `started`."""
    stat = _stat(pid)
    return stat is not None and stat[1] not in "ZX" and (started is None or stat[2] == started)


def _describe(pid: int) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        command = "?"
    return f"{pid}: {command[:200]}"


def _kill_then_list(args: list[str], folder: Path, written: list[str], how: signal.Signals, log: Path) -> list[str]:
    """Start `cebench sweep args`, wait until its loss or build has written each of `written`
    (a pid) into `folder`, send it `how`, and return the processes of the sweep still running
    `GONE_S` later (none is left running once this returns)."""
    token = uuid.uuid4().hex
    tracked: dict[int, int | None] = {}

    def track(pids: set[int]) -> None:
        for pid in pids:
            if pid not in tracked and (stat := _stat(pid)):
                tracked[pid] = stat[2]

    def running() -> set[int]:
        track(_marked(token))
        return {pid for pid, started in tracked.items() if _alive(pid, started)}

    with log.open("w") as out:  # not a pipe: a process left behind would hold its end open
        proc = subprocess.Popen([str(CEBENCH), "sweep", *args], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, MARK: token}, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not all((folder / name).exists() for name in written):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        time.sleep(0.5)  # the pids are whole
        pids = {int((folder / name).read_text()) for name in written}
        track(_descendants(proc.pid) | pids)
        assert pids <= running(), (pids, tracked)
        assert len(running()) > len(pids)  # the forkserver and the resource tracker too
        proc.send_signal(how)
        proc.wait(timeout=60)
        track(_descendants(proc.pid))
        deadline = time.monotonic() + GONE_S
        while running() and time.monotonic() < deadline:
            time.sleep(0.2)
        return [_describe(pid) for pid in sorted(running())]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in running():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=lambda s: s.name)
def test_an_isolated_points_process_ends_with_the_sweep(tmp_path, how):
    variant = tmp_path / "hang.py"
    variant.write_text(HANGING_LOSS.format(folder=str(tmp_path)))
    args = ["--device", "cpu", "--isolate", "--vocab", "100", "--d-model", "8", "--context", "8", "--batch", "1",
            "--repeats", "1", "--variant", f"{variant}:loss", "--point-timeout", "120", "--out",
            str(tmp_path / "r.csv")]
    left = _kill_then_list(args, tmp_path, ["point"], how, tmp_path / "log")
    assert left == [], f"still running {GONE_S:g} s after the sweep's {how.name}:\n" + "\n".join(left)


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_a_sharded_points_ranks_end_with_the_sweep(tmp_path, how):
    build = tmp_path / "build.py"
    build.write_text(textwrap.dedent(HANGING_BUILD.format(folder=str(tmp_path))))
    args = ["--device", "cpu", "--model", f"{build}:build", "--fsdp", "2", "--batch", "1", "--context", "8",
            "--variant", "dense", "--repeats", "1", "--point-timeout", "120", "--out", str(tmp_path / "r.csv")]
    left = _kill_then_list(args, tmp_path, ["rank0", "rank1"], how, tmp_path / "log")
    assert left == [], f"still running {GONE_S:g} s after the sweep's {how.name}:\n" + "\n".join(left)
