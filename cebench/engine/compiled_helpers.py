"""A followed peer's `torch.compile`d helpers, run eagerly in a step traced on `meta` tensors.

Cut Cross-Entropy compiles two small helpers when it is imported
(`torch.compile(fullgraph=True, dynamic=True)`: `softcapping` of the target logits in its
forward, `sort_logit_avg`, the vocabulary's order for its gradient filter, in its
backward). Under a dispatch mode (the storage tracker) Dynamo compiles nothing: it runs the
frame eagerly and then, with `fullgraph=True`, raises ('found no compiled frames'). Inside
`eager()` every compiled function that a module of the peer's packages holds (each module
that imported it holds it too) is its original Python (`innermost_fn`), which records its
name when it runs: the trace sees its ops one by one, as eager torch runs them. The
packages are imported by `eager` itself, with every module they import: a helper compiled
only later (by a module the step imports, or while it runs) is not found, and under the
tracker it runs eagerly by Dynamo's own skip or, with `fullgraph`, fails its row.

A variant that compiles parts of itself (`Variant.compiled_parts`: torchtune's loss with
`compile=True`) is predicted with each compiled function its module holds run as
inductor's code runs it instead (`predicted`, `cebench.engine.compiled.on_meta`).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from cebench.core.devices import Device
from cebench.engine import compiled
from cebench.shims.peers import HELPERS, compiled_functions


@contextlib.contextmanager
def eager(packages: Iterable[str], ran: set[str]) -> Iterator[None]:
    """Within: the compiled functions held by the modules of `packages` (imported now, with
    the modules they import) run their original Python, each adding its name to `ran`."""
    def recording(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def run(*args: Any, **kwargs: Any) -> Any:
            ran.add(original.__name__)
            return original(*args, **kwargs)

        return run

    with _replaced(packages, recording):
        yield


@contextlib.contextmanager
def predicted(modules: Iterable[str], device: Device) -> Iterator[None]:
    """Within: the compiled functions held by `modules` (imported now, with the modules they
    import) run on meta as inductor's code for `device` runs them (`compiled.on_meta`)."""
    with _replaced(modules, lambda original: compiled.on_meta(original, device)):
        yield


@contextlib.contextmanager
def _replaced(packages: Iterable[str],
              replacement: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """Within: each compiled function held by the modules of `packages` (imported now, with
    the modules they import) is `replacement(its original Python)`."""
    names = tuple(packages)
    for name in names:
        importlib.import_module(name)
    inside = tuple(f"{name}." for name in names)
    modules = [m for n, m in list(sys.modules.items()) if m is not None and (n in names or n.startswith(inside))]
    with contextlib.ExitStack() as stack:
        for module in modules:
            found = compiled_functions(module)
            if found:
                stack.enter_context(HELPERS({n: replacement(f) for n, f in found.items()}, on=module))
        yield
