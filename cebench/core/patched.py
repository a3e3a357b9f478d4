"""Attributes replaced for the duration of a block: what a trace on `meta` changes in torch,
Triton or a peer's view of them (`device_view`, `data_reads`, `triton_launches`, the
tracker's RNG-state watch), restored exactly as they were when the block ends."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

_ABSENT = object()  # the owner had no attribute of its own by that name (it inherited one, or none)


@contextlib.contextmanager
def patched(owner: Any, replacements: Mapping[str, Any]) -> Iterator[None]:
    """Within: `owner.name` is `replacements[name]` for each name. Afterwards each is what
    `owner` held itself before, or, where it held none of its own (a method of a base
    class, a C getter), deleted again, so that the inherited one shows through."""
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
