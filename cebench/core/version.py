"""cebench's version, from the installed package's metadata: what a row's `cebench_version`
and `cebench --version` say; and the torch releases it supports (`TORCH_RANGE`, what CI
checks: `.ci/run`), told without importing torch (`torch_outside_range`), and those its shims
were checked against (`TORCH_CHECKED`). A leaf module, so that any layer can read it without
importing the package facade (`cebench/__init__.py`)."""
from __future__ import annotations

import functools
import re
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cebench")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

# The oldest and newest torch releases (major, minor) cebench supports and CI runs: the pinned
# CPU build (2.13) whole, the CUDA builds of both ends on the commands' subset. pyproject.toml
# says the same range.
TORCH_RANGE: tuple[tuple[int, int], tuple[int, int]] = ((2, 8), (2, 14))
# The torch releases each of cebench's shims (`cebench.shims`: what it replaces and the private names it reads) was
# checked against: both ends of TORCH_RANGE and the pinned CPU build.
TORCH_CHECKED: tuple[str, ...] = ("2.8.0", "2.13.0", "2.14.1")


@functools.cache
def _installed_torch() -> str | None:
    """The installed torch distribution's version string (None: not installed), read once: a
    read of its metadata takes milliseconds, and a prediction asks for it with every trace."""
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def torch_release(installed: str | None = None) -> tuple[int, int] | None:
    """The installed torch's release (major, minor), from `installed` (a version string) or its
    distribution's metadata; None where it cannot be read (not installed, a source build)."""
    if installed is None:
        installed = _installed_torch()
        if installed is None:
            return None
    found = re.match(r"(\d+)\.(\d+)", installed)
    return None if found is None else (int(found[1]), int(found[2]))


def checked_releases(since: tuple[int, int] | None = None, before: tuple[int, int] | None = None) -> tuple[str, ...]:
    """The releases of `TORCH_CHECKED` from `since` on and before `before` (None: no bound): those a
    shim whose target exists only there was checked against."""
    found = [(r, torch_release(r)) for r in TORCH_CHECKED]
    return tuple(r for r, at in found
                 if at is not None and (since is None or at >= since) and (before is None or at < before))


def torch_outside_range(installed: str | None = None) -> str | None:
    """One line saying that the installed torch (`installed`: its version string; default: the
    installed distribution's) is outside `TORCH_RANGE`, or None when it is inside (or its
    version cannot be read: a source build)."""
    if installed is None:
        installed = _installed_torch()
        if installed is None:
            return "cebench needs torch: pip install torch (or make install: the CPU build)"
    release = torch_release(installed)
    if release is None:
        return None
    (low, high) = TORCH_RANGE
    if low <= release <= high:
        return None
    return (f"cebench supports torch {low[0]}.{low[1]} to {high[0]}.{high[1]}; this is torch {installed}: install "
            f"one of those (pip install 'torch>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}')")
