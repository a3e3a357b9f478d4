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
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from cebench.core.patched import patched


def _compiled(module: object) -> dict[str, Callable[..., Any]]:
    """The functions `module` holds that `torch.compile` wrapped: name → original."""
    found = {}
    for name, value in vars(module).items():
        if callable(value) and hasattr(value, "_torchdynamo_orig_callable"):  # torch._dynamo is imported then
            from torch._dynamo.eval_frame import innermost_fn

            original = innermost_fn(value)
            if original is not value:
                found[name] = original
    return found


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

    names = tuple(packages)
    for name in names:
        importlib.import_module(name)
    inside = tuple(f"{name}." for name in names)
    modules = [m for n, m in list(sys.modules.items()) if m is not None and (n in names or n.startswith(inside))]
    with contextlib.ExitStack() as stack:
        for module in modules:
            compiled = _compiled(module)
            if compiled:
                stack.enter_context(patched(module, {n: recording(f) for n, f in compiled.items()}))
        yield
