"""Prediction without the hardware: one step traced on `meta` (or fake) tensors under a
storage tracker (`trace`, `tracker`), inductor's code run on them (`compiled`), the fake FSDP
world (`fake_world`), extrapolation along rows and blocks (`series`), each point's row and the
largest batch that fits (`points`). What it changes of torch, Triton and the peers is in
`shims`."""
from __future__ import annotations

import sys
from types import ModuleType
from typing import Any


class _Package(ModuleType):
    """`cebench.predict` is this package and the API's function (`cebench.api.predict`) at once:
    importing the package makes it the facade's attribute `predict`, which would hide the
    function; called, the package is the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from cebench.api import predict  # the facade's function (tests/test_layers.py: FACADE_CALLS)

        return predict(*args, **kwargs)


sys.modules[__name__].__class__ = _Package
