"""Triton kernel launches that do nothing, for a step traced on `meta` tensors.

A Triton kernel writes into buffers its Python caller allocated with torch (Liger-Kernel's
fused linear cross-entropy allocates its gradients, loss rows and logits chunks, and its
kernels fill them in place): the buffers are what a trace must see, and they are, through
the dispatcher. The launch itself allocates nothing torch counts on a GPU, and on meta
there is nothing to run, so inside `skipped()` every launch returns at once:

- `JITFunction.run`, which `kernel[grid](...)` calls (`KernelInterface.__getitem__`),
- `InterpretedFunction.run`, the same under Triton's interpreter (`TRITON_INTERPRET=1`), and
  its `__getitem__` (Triton 3.4's `kernel[grid]` runs the grid without `run`),
- `Autotuner.run`, which would otherwise benchmark its configurations first (and
  `Heuristics.run`, which only computes meta-parameters before launching),

each for the duration of the block, on the classes (every kernel at once). What a skipped
launch would have written is unknown afterwards: `on_skip` is given its tensor arguments
and its kernel's name (`cebench.engine.data_reads` forgets what it knew of their values;
`cebench.engine.costs` counts the launch). The kernels skipped
are listed by name in `Skipped.kernels`; `followed` names the peer package whose Python
the trace followed, with the versions cebench's rules were checked against (`Variant.peer`).

triton is imported only by `skipped(needed=True)` or when it is imported already: a step
of a variant that runs no Triton kernel neither needs nor pays for it.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cebench.core import interpreter
from cebench.core.patched import resolve
from cebench.losses import variants
from cebench.shims.torch_names import pytree
from cebench.shims.triton import GRID, INTERPRETED_RUN, LAUNCHERS


@dataclass
class Skipped:
    """What a `skipped()` block skipped: the names of the kernels launched (`kernels`) and the
    top-level packages that launched them (`packages`, module names); and the peer's
    `torch.compile`d helpers that ran eagerly instead (`eager`, function names: filled by
    `cebench.engine.compiled_helpers`)."""

    kernels: set[str] = field(default_factory=set)
    packages: set[str] = field(default_factory=set)
    eager: set[str] = field(default_factory=set)

    def note(self) -> str:
        """What a prediction's row says about them ('' when nothing was skipped): the
        kernels, the version of each package followed (and whether it is one cebench
        checked), and the compiled helpers run eagerly."""
        compiled = f"; torch.compile'd {', '.join(sorted(self.eager))} ran eagerly" if self.eager else ""
        if not self.kernels:
            return compiled.removeprefix("; ")
        followed = []
        declared = variants.checked_releases()  # each peer's releases, as its variant declares them
        for package in sorted(self.packages):
            peer = declared.get(package)
            dist, checked = (package.replace("_", "-"), None) if peer is None else (peer.dist, peer.checked)
            version = _version(package)
            if version is None:
                followed.append(f"{package} at {_where(package)} (no release: cebench checked none of its code)")
            elif checked is None:
                followed.append(f"{dist} {version} (not checked by cebench)")
            elif version in checked:
                followed.append(f"{dist} {version}")
            else:
                followed.append(f"{dist} {version} (cebench checked {', '.join(checked)}: its buffers may differ)")
        return (f"Triton launches skipped ({', '.join(sorted(self.kernels))}): their buffers are "
                f"{' and '.join(followed)}'s Python, followed on meta{compiled}")


def _where(package: str) -> str:
    """The folder top-level `package` was imported from, or would be ('?' where there is none)."""
    module = sys.modules.get(package)
    if module is not None:
        location, paths = getattr(module, "__file__", None), list(getattr(module, "__path__", ()))
    else:
        spec = importlib.util.find_spec(package)
        location, paths = (None, []) if spec is None else (spec.origin, list(spec.submodule_search_locations or ()))
    if location and location != "namespace":
        return str(Path(location).parents[1])
    return str(Path(paths[0]).parent) if paths else "?"  # a namespace package (liger-kernel 0.2): no __init__


def _version(package: str) -> str | None:
    """The release of the imported top-level `package`, from the distribution installed beside
    it (not whichever one the environment has: a release or commit traced from another folder);
    None where none is (source code, not an installed release)."""
    folder = _where(package)
    return None if folder == "?" else _release(package, folder)


@functools.cache
def _release(package: str, folder: str) -> str | None:
    """`_version` of `package` imported from `folder` (once per process: it reads the folder's metadata)."""
    for dist in importlib.metadata.distributions(path=[folder]):
        if package in (dist.read_text("top_level.txt") or "").split() or any(
                str(f).startswith(f"{package}/") for f in dist.files or ()):
            return dist.version
    return None


def _name(kernel: Any) -> tuple[str, str]:
    """A launched kernel's (name, top-level package)."""
    fn = getattr(kernel, "fn", kernel)
    while hasattr(fn, "fn"):  # an autotuner or heuristics around the JIT function
        fn = fn.fn
    return getattr(fn, "__name__", type(kernel).__name__), getattr(fn, "__module__", "").partition(".")[0]


@contextlib.contextmanager
def skipped(needed: bool = False, on_skip: Callable[[list[Any], str], None] | None = None) -> Iterator[Skipped]:
    """Within: every Triton kernel launch does nothing but record its kernel and pass its
    tensor arguments and name to `on_skip`. A no-op when triton is neither imported nor `needed`
    (then Triton's interpreter is chosen first, as cebench does before importing triton on a
    machine without a GPU)."""
    record = Skipped()
    if "triton" not in sys.modules and not needed:
        yield record
        return
    interpreter.enable()
    interpreted = not INTERPRETED_RUN.moved()  # a Triton without its interpreter lacks it
    launchers = [(r, resolve(r.owner)) for r in LAUNCHERS if r is not INTERPRETED_RUN or interpreted]

    def launch(self: Any, *args: Any, **kwargs: Any) -> None:
        name, package = _name(self)
        record.kernels.add(name)
        if package:
            record.packages.add(package)
        if on_skip is not None:
            on_skip([a for a in pytree.tree_flatten((args, kwargs))[0] if hasattr(a, "untyped_storage")], name)
        return None

    def grid(self: Any, grid: Any) -> Callable[..., None]:  # `kernel[grid]`, where it launches without `run`
        return functools.partial(launch, self)

    with contextlib.ExitStack() as stack:
        for replaced, cls in launchers:
            if "run" in vars(cls):  # a class that launches (the others inherit a patched one)
                stack.enter_context(replaced({"run": launch}))
        if interpreted:  # Triton 3.4's interpreter: `[grid]` runs the grid itself
            stack.enter_context(GRID({"__getitem__": grid}))
        yield record
