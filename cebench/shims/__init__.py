"""Every change cebench makes to a third-party object, and every private torch name it reads,
declared: one module per library or object, each listing what it replaces
(`cebench.core.patched.Replaced`) or reads (`cebench.core.patched.Read`: `torch_names`) and
the releases it was checked against (`CHECKED`). Nothing else in cebench replaces an
attribute of torch, Triton, FSDP2, transformers or a peer, or reads one of their private
names, except `cebench.core`, whose own such declarations are listed here too (`CORE`)
(tests/test_shims.py holds that).

A trace enters them in one place and order (`cebench.engine.trace._trace`, outermost first):
the process's exit while user code runs (`cebench.core.guard`), the RNG states a checkpoint
saves (`tensor`), the peers' Triton launches and compiled helpers (`triton`, `peers`), the
target device as the peers see it (`tensor`, `cuda`) and their reads of data (`tensor`), then
the dispatch-level trackers, FSDP2's resizes and collectives (`fsdp`) and the FLOP formulas
(`flop_counter`). Inside the step, what it runs needs the rest: fused AdamW on meta (`optim`),
a transformers model's attention (`transformers`), a compiled call lowered by inductor
(`inductor`, `dispatch`, `cuda`), a fake world of ranks (`process`).

`inventory()` lists every declaration, replacements and reads; `moved()` says which of them
this environment lacks (the canary: on a new release it names each target that moved, once).
"""
from __future__ import annotations

import importlib
from types import ModuleType

from cebench.core.patched import Declared

MODULES = ("tensor", "cuda", "dispatch", "flop_counter", "inductor", "triton", "fsdp", "dtensor", "optim",
           "transformers", "process", "peers", "torch_names")
# Below the shims: the process's exit, replaced while user code runs; the C++ compiler inductor builds with, read
CORE = ("cebench.core.guard", "cebench.core.devices")


def _modules() -> list[ModuleType]:
    return [importlib.import_module(f"{__name__}.{m}") for m in MODULES] + [importlib.import_module(m) for m in CORE]


def inventory() -> dict[str, list[Declared]]:
    """Each shim module's declarations (what it replaces, what it reads), by module name."""
    return {m.__name__: [v for v in vars(m).values() if isinstance(v, Declared)] for m in _modules()}


def checked() -> dict[str, dict[str, tuple[str, ...]]]:
    """The releases each shim module was checked against, by module and distribution."""
    return {m.__name__: dict(getattr(m, "CHECKED", {})) for m in _modules()}


def moved() -> list[str]:
    """'owner.name (module; checked with …)' for every declared target this environment lacks (a
    core module, which has no `CHECKED`: 'owner.name (module)')."""
    found = []
    releases = checked()
    for module, declared in inventory().items():
        seen = ", ".join(f"{d} {' '.join(r)}" for d, r in releases[module].items())
        where = f"declared in {module}; checked with {seen}" if seen else f"declared in {module}"
        found += [f"{name} ({where})" for r in declared for name in r.moved()]
    return found
