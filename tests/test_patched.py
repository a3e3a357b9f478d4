"""`patched` restores exactly what an owner held: its own attribute, or none (so that the
inherited one shows through again), also when the block raises."""
from __future__ import annotations

import types

import pytest

from cebench.core.patched import MovedError, patched


class Base:
    def run(self) -> str:
        return "base"


class Own(Base):
    def run(self) -> str:
        return "own"


class Inherits(Base):
    pass


def test_an_own_attribute_comes_back_and_an_inherited_one_shows_through_again():
    module = types.SimpleNamespace(f=len)
    with patched(Own, {"run": lambda self: "patched"}), patched(Inherits, {"run": lambda self: "patched"}), \
            patched(module, {"f": abs}):
        assert Own().run() == Inherits().run() == "patched" and module.f is abs
    assert Own().run() == "own" and Inherits().run() == "base" and "run" not in vars(Inherits)
    assert module.f is len


def test_it_restores_when_the_block_raises():
    with pytest.raises(KeyError), patched(Inherits, {"run": lambda self: "patched"}):
        raise KeyError
    assert "run" not in vars(Inherits) and Inherits().run() == "base"


def test_a_name_the_owner_lacks_is_refused_before_anything_changes():
    """A release that renamed what cebench replaces fails loudly, naming it, and leaves the
    owner as it was; a name added on purpose is allowed and removed again."""
    module = types.SimpleNamespace(f=len)
    with pytest.raises(MovedError, match=r"replaces .*alloc_storage, which this environment \(torch "):
        with patched(module, {"f": abs, "alloc_storage": abs}):
            pass
    assert module.f is len and not hasattr(module, "alloc_storage")
    with patched(module, {"alloc_storage": abs}, added={"alloc_storage"}):
        assert module.alloc_storage is abs
    assert not hasattr(module, "alloc_storage")
