"""Attributes replaced for the duration of a block, restored exactly as they were when the
block ends, and the declarations every such replacement (`Replaced`) and every read of a
private name (`Read`) is made through.

A replacement is of something that exists: a name its owner does not have (a release that
renamed or removed it) raises `MovedError` naming it, rather than adding an attribute that
nothing reads and letting a prediction quietly change. A name added on purpose (a CUDA
function a CPU build of torch lacks) is declared in `added`.

A read is resolved once where it is a module's or a class's (`Read.get`), and read off the
object where it is an instance's (`Read.of`); a name this release lacks raises `MovedError`
naming it and the releases it was checked with, not a bare AttributeError.

Every replacement of a third-party object and every read of a private torch name is
declared in `cebench.shims` (or, below it, in `cebench.core`), which lists them all
(`cebench.shims.inventory`) for the canary test: on a release that moved a target it
fails once, naming it.
"""
from __future__ import annotations

import contextlib
import dis
import importlib
import importlib.metadata
import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cebench.core.version import checked_releases, torch_release

_ABSENT = object()  # the owner had no attribute of its own by that name (it inherited one, or none)


class MovedError(RuntimeError):
    """cebench replaces or reads an attribute that this release of torch, Triton or a peer no longer has."""


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
        raise MovedError(f"cebench replaces {', '.join(f'{owner_name(owner)}.{n}' for n in gone)}, which this "
                         f"environment ({_environment()}) does not have: a release moved it; the prediction would be "
                         f"wrong, so it stops here")


def _environment() -> str:
    """The releases of torch and Triton installed: 'torch 2.13.0+cpu, triton 3.9.0'."""
    return ", ".join(f"{d} {importlib.metadata.version(d)}" for d in ("torch", "triton")
                     if importlib.util.find_spec(d) is not None)


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
class Declared(ABC):
    """What a declaration names: the `names` of `owner` (a dotted path; for names of instances,
    the class whose instances have them), why, the distribution whose presence it needs (None:
    torch, always there) and the torch releases that have them (`since` on, before `before`;
    None: every one). `instance`: the names are an instance's."""

    owner: str
    names: tuple[str, ...]
    why: str
    needs: str | None = None
    since: tuple[int, int] | None = None
    before: tuple[int, int] | None = None
    instance: bool = False

    def applies(self) -> bool:
        """Whether this environment should have the names: what it needs is installed, and its torch
        is one of the releases that have them (or its release cannot be read: a source build)."""
        if self.needs is not None and importlib.util.find_spec(self.needs) is None:
            return False
        release = torch_release()
        return release is None or ((self.since is None or release >= self.since) and
                                   (self.before is None or release < self.before))

    def moved(self) -> list[str]:
        """'owner.name' for each declared name (and the owner itself) this environment lacks; []
        where it should not have them (`applies`)."""
        if not self.applies():
            return []
        try:
            lacking = self._lacking(resolve(self.owner))
        except (ImportError, AttributeError) as exc:
            return [f"{self.owner} ({type(exc).__name__}: {exc})"]
        return [f"{self.owner}.{name}" for name in lacking]

    @abstractmethod
    def _lacking(self, owner: Any) -> list[str]:
        """The names `owner` (resolved) lacks."""


@dataclass(frozen=True)
class Replaced(Declared):
    """A declared replacement: the names cebench may replace on `owner`, and those it adds on
    purpose (`added`). Called with replacements, it replaces them for a block (`patched`), on
    `on` where given (an instance or a subclass of `owner` found at run time) and on `owner`
    otherwise; a name it does not declare is a programming error (ValueError), unless `found`
    says the names are found at run time (then `names` are those the canary checks). Names of
    an instance (`instance`, set by its class's constructor) are checked on `owner()`."""

    added: tuple[str, ...] = ()
    found: bool = False

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

    def _lacking(self, owner: Any) -> list[str]:
        return missing(owner() if self.instance else owner, [n for n in self.names if n not in self.added])


@dataclass(frozen=True)
class Read(Declared):
    """A declared read of private names: `get` reads one of `owner` (a module or a class), once;
    `of` reads one of an object (an `owner`) each time. Where this environment lacks it, either
    raises `MovedError` naming it and the releases it was checked with. Names of an instance
    (`instance`: an op overload's schema) are checked among those its class's constructor sets:
    the canary cannot make such an instance."""

    _values: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def get(self, name: str) -> Any:
        """`owner.name`, resolved on the first call (its module imported then) and kept."""
        try:
            return self._values[name]
        except KeyError:
            pass
        if name not in self.names:
            raise self._undeclared(name)
        try:
            value = getattr(resolve(self.owner), name)
        except (ImportError, AttributeError):
            raise self._moved(name) from None
        self._values[name] = value
        return value

    def of(self, obj: Any, name: str) -> Any:
        """`obj.name`, `obj` an `owner`: an AttributeError is a `MovedError` where the release
        lacks the name (`moved`), and raised as it is otherwise (`obj` is not an `owner`)."""
        if name not in self.names:  # inline: an object's attribute is read on every call
            raise self._undeclared(name)
        try:
            return getattr(obj, name)
        except AttributeError:
            if f"{self.owner}.{name}" in self.moved():
                raise self._moved(name) from None
            raise

    def _undeclared(self, name: str) -> ValueError:
        return ValueError(f"{self.owner}: {name} is not declared as read")

    def _lacking(self, owner: Any) -> list[str]:
        constructed = _set_by_constructor(owner) if self.instance else set()
        return [name for name in missing(owner, self.names) if name not in constructed]

    def _moved(self, name: str) -> MovedError:
        checked = " ".join(checked_releases(self.since, self.before))
        return MovedError(f"cebench reads {self.owner}.{name}, which this environment ({_environment()}) does not "
                          f"have (it was checked with torch {checked}): a release moved it")


def _set_by_constructor(cls: Any) -> set[str]:
    """The attributes `cls.__init__` sets on the instance it makes (`self.x = ...` in its code;
    none where it is not Python's)."""
    try:
        return {i.argval for i in dis.get_instructions(cls.__init__) if i.opname == "STORE_ATTR"}
    except TypeError:
        return set()
