"""The contract toward torch, Triton, FSDP2, transformers and the peers: every change cebench
makes to a third-party object is declared in `cebench.shims` (or below it, in
`cebench.core`), the canary finds every declared target in this environment, and no other
module replaces an attribute or reads a private name of theirs."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import torch

from cebench import shims
from cebench.core.patched import MovedError, Replaced
from cebench.core.version import TORCH_CHECKED, TORCH_RANGE, checked_releases, torch_release

PACKAGE = Path(__file__).resolve().parent.parent / "cebench"
ALLOWED = ("core", "shims", "vendor")  # where private names may be read; vendor is the system under test
THIRD_PARTY = {"torch", "triton", "transformers", "liger_kernel", "cut_cross_entropy", "torchtune"}


def test_the_canary_finds_every_declared_target():
    """On a release that moved a target this fails once, naming each (module, what it was
    checked with)."""
    assert shims.moved() == []


def test_the_canary_names_a_target_a_release_renamed(monkeypatch):
    monkeypatch.delattr(importlib.import_module("torch.optim.adam"), "_device_dtype_check_for_fused")
    (moved,) = shims.moved()
    assert moved.startswith("torch.optim.adam._device_dtype_check_for_fused (declared in cebench.shims.optim")
    assert "checked with torch 2.8.0 2.13.0 2.14.1" in moved
    from cebench.shims.optim import any_device

    with pytest.raises(MovedError, match="_device_dtype_check_for_fused"), any_device():
        pass


def test_the_canary_names_a_module_that_moved(monkeypatch):
    moved = Replaced("torch.distributed.fsdp._gone_module", ("x",), "a module a release removed")
    monkeypatch.setattr(shims.optim, "GONE", moved, raising=False)
    (gone,) = shims.moved()
    assert gone.startswith("torch.distributed.fsdp._gone_module (AttributeError: ")
    assert gone.endswith("(declared in cebench.shims.optim; checked with torch 2.8.0 2.13.0 2.14.1)")


def test_a_replacement_restores_exactly_and_refuses_what_it_does_not_declare():
    from cebench.shims.tensor import TORCH

    original = torch.get_rng_state
    with TORCH({"get_rng_state": lambda: "replaced"}):
        assert torch.get_rng_state() == "replaced"
    assert torch.get_rng_state is original
    with pytest.raises(ValueError, match="torch: manual_seed is not declared as replaced"), \
            TORCH({"manual_seed": lambda seed: None}):
        pass


def test_every_shim_module_says_what_it_was_checked_with_and_why():
    for module, declared in shims.inventory().items():
        assert declared, f"{module} declares nothing"
        assert all(r.why for r in declared), module
        if module.startswith(shims.__name__):
            assert shims.checked()[module], f"{module} has no CHECKED"


def test_the_shims_were_checked_with_both_ends_of_the_supported_range():
    """`TORCH_CHECKED`, which every shim's `CHECKED` names, holds a release of each end of
    `TORCH_RANGE` (what CI runs)."""
    assert set(TORCH_RANGE) <= {torch_release(r) for r in TORCH_CHECKED}
    assert checked_releases((2, 9)) == tuple(r for r in TORCH_CHECKED if not r.startswith("2.8."))


def _sources() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(PACKAGE.rglob("*.py"))]


def _where(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_every_replacement_is_declared_in_the_shims_or_the_core():
    """`Replaced(...)` is constructed only in a shim module or in `cebench.core` (all of them
    listed by `shims.inventory`), and `patched(...)` is called only by `cebench.core.patched`."""
    listed = {m.replace("cebench.", "").replace(".", "/") + ".py" for m in shims.inventory()}
    found = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == "patched" and _where(path) != "core/patched.py":
                    found.append(f"{_where(path)}:{node.lineno} calls patched()")
                if node.func.id == "Replaced" and _where(path) not in listed:
                    found.append(f"{_where(path)}:{node.lineno} declares a replacement outside the inventory")
    assert not found, "\n".join(found)


def _own_private_names(sources: list[tuple[Path, ast.Module]]) -> set[str]:
    """Every private name cebench defines itself (functions, classes, attributes, variables)."""
    names = set()
    for _, tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_name_of_a_library_is_read_outside_the_shims_and_the_core():
    """A private module imported (`torch._subclasses`), a private attribute read off anything
    that is not cebench's own (`func._schema`, `torch._dynamo.reset`), or one assigned: each
    belongs in `cebench.shims.torch_names` or a shim. ATen ops whose names begin with an
    underscore (`aten._to_copy`) are the dispatcher's names for ops, read anywhere."""
    sources = _sources()
    own = _own_private_names(sources)
    found = []
    for path, tree in sources:
        if _where(path).startswith(ALLOWED):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                    node.module.split(".")[0] in THIRD_PARTY:
                parts = [*node.module.split("."), *(a.name for a in node.names)]
                if any(map(_private, parts)):
                    found.append(f"{_where(path)}:{node.lineno} from {node.module} import …")
            elif isinstance(node, ast.Import):
                found += [f"{_where(path)}:{node.lineno} import {a.name}" for a in node.names
                          if a.name.split(".")[0] in THIRD_PARTY and any(map(_private, a.name.split(".")))]
            elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(root, ast.Name) and root.id in ("aten", "self", "cls", "sys"):  # sys: CPython's own
                    continue
                found.append(f"{_where(path)}:{node.lineno} {ast.unparse(node)}")
    assert not found, "private names of a library read outside cebench/core and cebench/shims:\n" + \
        "\n".join(found)


def test_fsdp2_of_an_older_torch_is_passed_over_by_the_canary_and_a_sharded_step_refused(monkeypatch, tmp_path):
    """torch 2.8's FSDP2 calls other collectives: its targets are not looked for there, and a
    sharded step, measured or predicted, is `unsupported` with one line instead."""
    from cebench.core import patched as patched_mod
    from cebench.engine import support
    from cebench.run.grid import GridOptions
    from cebench.shims import fsdp

    monkeypatch.setattr(patched_mod, "torch_release", lambda: (2, 8))
    monkeypatch.setattr(support, "torch_release", lambda: (2, 8))
    assert fsdp.DISTRIBUTED.moved() == [] and fsdp.PARAM.since == fsdp.SINCE == (2, 9)
    monkeypatch.delattr(torch.distributed, "all_gather_single", raising=False)
    assert shims.moved() == []  # the collective is gone, as on 2.8: not looked for there
    model = tmp_path / "tiny.json"
    model.write_text('{"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, '
                     '"num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 64}')
    (config,) = GridOptions(variant="dense", model=str(model), batch="1", context="8", fsdp="2").grid("cpu").expand()
    for predicted in (False, True):
        assert support.reason(config, predicted=predicted) == (
            "--fsdp needs torch 2.9 or newer: torch 2.8's FSDP2 calls other collectives than those cebench follows "
            "and settles")
    (unsharded,) = GridOptions(variant="dense", model=str(model), batch="1", context="8").grid("cpu").expand()
    assert support.reason(unsharded) is None
