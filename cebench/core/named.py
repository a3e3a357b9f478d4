"""What a point holds resolved rather than by name (a device, a variant, a model): `Named`
as the core sees it, and `ByName`, what each of them is besides: a `str` of its name.

A leaf module: nothing from cebench, never torch.
"""
from __future__ import annotations

from typing import Any, Protocol


class Named(Protocol):
    """A variant or a model as a point holds it (`cebench.losses.variants.Variant`,
    `cebench.models.model.Model`; their layers read it as that, `variants.of`, `model.of`):
    resolved where its name entered, shown by its `name`."""

    @property
    def name(self) -> str: ...


class ByName(str):
    """A resolved object (a frozen dataclass, declared with `eq=False, repr=False`, whose
    first field is its `name`) that is also the `str` of its name, as a `Choice` is of its
    word: code that reads a point's variant, device or model as text ('dense', a config's
    path) keeps working, and nothing resolves the name again. It equals its name; another of
    its kind equals it when every field does (a model whose config.json changed is another
    model); it hashes as its name, and shows as its kind and name (`Variant('dense')`).
    cebench's own code compares objects (the type checker's `strict_equality` holds it)."""

    name: str

    def __new__(cls, *args: Any, **kwargs: Any) -> ByName:
        name = kwargs["name"] if "name" in kwargs else args[0] if args else getattr(cls, "name")  # noqa: B009
        return super().__new__(cls, name)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def __eq__(self, other: object) -> bool:
        if type(other) is str:
            return self.name == other
        return self is other or (type(self) is type(other) and vars(self) == vars(other))

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__
