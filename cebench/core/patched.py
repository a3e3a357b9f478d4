"""Attributes replaced for the duration of a block, restored exactly as they were when the
block ends, and the declaration every such replacement is made through (`Replaced`).

A replacement is of something that exists: a name its owner does not have (a release that
renamed or removed it) raises `MovedError` naming it, rather than adding an attribute that
nothing reads and letting a prediction quietly change. A name added on purpose (a CUDA
function a CPU build of torch lacks) is declared in `added`.

Every replacement of a third-party object is declared as a `Replaced` in
`cebench.shims` (or, below it, in `cebench.core`), which lists them all
(`cebench.shims.inventory`) for the canary test: on a release that moved a target it
fails once, naming it.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cebench.core.version import torch_release

_ABSENT = object()  # the owner had no attribute of its own by that name (it inherited one, or none)


class MovedError(RuntimeError):
    """cebench replaces an attribute that this release of torch, Triton or a peer no longer has."""


def owner_name(owner: Any) -> str:
    """`owner` as a reader finds it: 'torch._C', 'torch.Tensor', 'liger_kernel.ops.x.Class'."""
    module = getattr(owner, "__module__", None)
    name = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", None) or type(owner).__name__
    return f"{module}.{name}" if isinstance(owner, type) and module else str(name)


def missing(owner: Any, names: Collection[str]) -> list[str]:
    """The names of `names` that `owner` has not (neither its own nor inherited)."""
    return [name for name in names if not hasattr(owner, name)]


def refuse_moved(owner: Any, names: Collection[str], added: Collection[str] = ()) -> None:
    """`MovedError` naming each of `names` (but those in `added`) that `owner` lacks."""
    gone = missing(owner, [name for name in names if name not in added])
    if gone:
        versions = ", ".join(f"{d} {importlib.metadata.version(d)}" for d in ("torch", "triton")
                             if importlib.util.find_spec(d) is not None)
        raise MovedError(f"cebench replaces {', '.join(f'{owner_name(owner)}.{n}' for n in gone)}, which this "
                         f"environment ({versions}) does not have: a release moved it; the prediction would be "
                         f"wrong, so it stops here")


@contextlib.contextmanager
def patched(owner: Any, replacements: Mapping[str, Any], added: Collection[str] = ()) -> Iterator[None]:
    """Within: `owner.name` is `replacements[name]` for each name. Afterwards each is what
    `owner` held itself before, or, where it held none of its own (a method of a base
    class, a C getter), deleted again, so that the inherited one shows through. A name
    `owner` lacks raises `MovedError` before anything is replaced, unless it is in `added`."""
    refuse_moved(owner, replacements, added)
    saved = {name: vars(owner).get(name, _ABSENT) for name in replacements}
    try:
        for name, value in replacements.items():
            setattr(owner, name, value)
        yield
    finally:
        for name, value in saved.items():
            if value is _ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def resolve(path: str) -> Any:
    """The object at a dotted `path` ('torch.Tensor', 'torch._dynamo.device_interface.CudaInterface'):
    the longest importable module prefix, then attributes. ImportError or AttributeError
    where it is gone."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            if cut == 1:
                raise
            continue
        for attr in parts[cut:]:
            found = getattr(found, attr)
        return found
    raise ImportError(path)  # pragma: no cover - the loop returns or raises


@dataclass(frozen=True)
class Replaced:
    """A declared replacement: the names cebench may replace on `owner` (a dotted path, or for
    instances or classes found at run time, the class whose attributes they are), why, the
    names it adds on purpose, and the distribution whose presence it needs (None: torch, always
    there). Called with replacements, it replaces them for a block (`patched`), on `on` where
    given (an instance or a subclass of `owner` found at run time) and on `owner` otherwise;
    a name it does not declare is a programming error (ValueError), unless `found` says the
    names are found at run time (then `names` are those the canary checks). `instance`: the
    names are an instance's (set by its class's constructor), checked on `owner()`."""

    owner: str
    names: tuple[str, ...]
    why: str
    added: tuple[str, ...] = ()
    needs: str | None = None
    found: bool = False
    instance: bool = False
    since: tuple[int, int] | None = None

    def __call__(self, replacements: Mapping[str, Any], on: Any = None) -> contextlib.AbstractContextManager[None]:
        self._declared(replacements)
        return patched(resolve(self.owner) if on is None else on, replacements, added=self.added)

    def set_on(self, on: Any, values: Mapping[str, Any]) -> None:
        """Set `values` on `on` for good (an object cebench made, which lives only in its
        trace), checked as a replacement is."""
        self._declared(values)
        refuse_moved(on, values, self.added)
        for name, value in values.items():
            setattr(on, name, value)

    def _declared(self, names: Collection[str]) -> None:
        undeclared = set() if self.found else set(names) - set(self.names) - set(self.added)
        if undeclared:
            raise ValueError(f"{self.owner}: {', '.join(sorted(undeclared))} is not declared as replaced")

    def moved(self) -> list[str]:
        """'owner.name' for each declared name (and the owner itself) this environment lacks; []
        where the distribution it needs is not installed (nothing here replaces it then)."""
        if self.needs is not None and importlib.util.find_spec(self.needs) is None:
            return []
        release = torch_release()
        if self.since is not None and release is not None and release < self.since:
            return []
        try:
            owner = resolve(self.owner)
            owner = owner() if self.instance else owner
        except (ImportError, AttributeError) as exc:
            return [f"{self.owner} ({type(exc).__name__}: {exc})"]
        return [f"{self.owner}.{name}" for name in missing(owner, [n for n in self.names if n not in self.added])]
