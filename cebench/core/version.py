"""cebench's version, from the installed package's metadata: what a row's `cebench_version`
and `cebench --version` say. A leaf module, so that any layer can read it without
importing the package facade (`cebench/__init__.py`)."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cebench")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"
