"""Attributes replaced for the duration of a block: what a trace on `meta` changes in torch,
Triton or a peer's view of them (`device_view`, `data_reads`, `triton_launches`, the
tracker's RNG-state watch), restored exactly as they were when the block ends.

A replacement is of something that exists: a name its owner does not have (a release that
renamed or removed it) raises `MovedError` naming it, rather than adding an attribute that
nothing reads and letting a prediction quietly change. A name added on purpose (a CUDA
function a CPU build of torch lacks) is passed in `added`.
"""
from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping
from typing import Any

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


@contextlib.contextmanager
def patched(owner: Any, replacements: Mapping[str, Any], added: Collection[str] = ()) -> Iterator[None]:
    """Within: `owner.name` is `replacements[name]` for each name. Afterwards each is what
    `owner` held itself before, or, where it held none of its own (a method of a base
    class, a C getter), deleted again, so that the inherited one shows through. A name
    `owner` lacks raises `MovedError` before anything is replaced, unless it is in `added`."""
    gone = missing(owner, [name for name in replacements if name not in added])
    if gone:
        import importlib.metadata
        import importlib.util

        versions = ", ".join(f"{d} {importlib.metadata.version(d)}" for d in ("torch", "triton")
                             if importlib.util.find_spec(d) is not None)
        raise MovedError(f"cebench replaces {', '.join(f'{owner_name(owner)}.{n}' for n in gone)}, which this "
                         f"environment ({versions}) does not have: a release moved it; the prediction would be "
                         f"wrong, so it stops here")
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
