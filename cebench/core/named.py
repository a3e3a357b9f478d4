"""What a point holds resolved rather than by name (a device, a variant, a model): `Named`
as the core sees it, and `ByName`, how each of them prints, compares and hashes.

A leaf module: nothing from cebench, never torch.
"""
from __future__ import annotations

from typing import Protocol


class Named(Protocol):
    """A variant or a model as a point holds it (`cebench.losses.variants.Variant`,
    `cebench.models.model.Model`; their layers read it as that, `variants.of`, `model.of`):
    resolved where its name entered, shown by its `name`."""

    @property
    def name(self) -> str: ...


class ByName:
    """A resolved object (a frozen dataclass, declared with `eq=False`, that has a `name`)
    that prints as its name and equals, and hashes as, it too, as a `Choice` does its text:
    a caller comparing a point's variant with 'dense' keeps working, while cebench's own code
    compares objects (the type checker's `strict_equality` holds it). Another of its kind is
    equal when every field is."""

    name: str

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.name == other
        return self is other or (type(self) is type(other) and vars(self) == vars(other))

    def __hash__(self) -> int:
        return hash(self.name)
