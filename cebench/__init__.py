"""cebench: what a cross-entropy-over-vocabulary implementation really costs.

Peak memory and step time of loss (and sampling) implementations over a vocabulary,
swept over batch, context, vocabulary, hidden size, dtype and chunk size. The Python API
(`cebench.api`: `sweep`, `predict`, `fit`, `explain`, `verify`, `check`, `load`, `Sweep`)
is importable from here; it imports torch only when called.
"""
from __future__ import annotations

from typing import Any

from cebench.core.errors import UsageError
from cebench.core.version import __version__
from cebench.losses.contract import LossFn, SampleFn, variant

_API = ("Sweep", "GridOptions", "sweep", "predict", "fit", "explain", "verify", "check", "load", "targets")
__all__ = ["LossFn", "SampleFn", "UsageError", "variant", "__version__", *_API]


def __getattr__(name: str) -> Any:
    """The API's names, imported on first use (so that `cebench --help` stays fast)."""
    if name in _API:
        from cebench import api

        return getattr(api, name)
    raise AttributeError(f"module 'cebench' has no attribute {name!r}")
