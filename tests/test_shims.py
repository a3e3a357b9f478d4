"""The contract toward torch, Triton, FSDP2, transformers and the peers: every change cebench
makes to a third-party object, and every private torch name it reads, is declared in
`cebench.shims` (or below it, in `cebench.core`), the canary finds every declared target in
this environment, and no other module replaces an attribute or reads a private name of
theirs."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import types
from pathlib import Path

import pytest
import torch

from cebench import shims
from cebench.core.patched import MovedError, Read, Replaced
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


def test_the_canary_walks_every_declared_read():
    """The private torch names cebench reads are declared (`torch_names`, and the core's below
    it) and found here; each name `torch_names` exports is read through its declaration."""
    from cebench.shims import torch_names

    reads = {m: [d for d in declared if isinstance(d, Read)] for m, declared in shims.inventory().items()}
    assert reads["cebench.shims.torch_names"] and reads["cebench.core.devices"]
    assert all(getattr(torch_names, name) is not None for name in torch_names.__all__)


def test_the_canary_names_a_read_a_release_removed_and_reading_it_raises_moved_error(monkeypatch):
    from cebench.shims import torch_names

    monkeypatch.delattr(torch._C, "_storage_Use_Count")
    (moved,) = shims.moved()
    assert moved == ("torch._C._storage_Use_Count (declared in cebench.shims.torch_names; checked with torch 2.8.0 "
                     "2.13.0 2.14.1)")
    monkeypatch.setattr(torch_names, "C", dataclasses.replace(torch_names.C))  # as a new process: nothing resolved
    with pytest.raises(MovedError, match=r"reads torch\._C\._storage_Use_Count, which this environment \(torch .*\) "
                                         r"does not have \(it was checked with torch 2\.8\.0 2\.13\.0 2\.14\.1\)"):
        torch_names.storage_uses(torch.ones(1).untyped_storage())


def test_the_canary_names_a_read_of_the_core(monkeypatch):
    """A core module's read (inductor's C++ compiler, `devices.CPP_BUILDER`) is named too, by
    the module alone: the core has no `CHECKED`."""
    assert shims.moved() == []  # every owner imported while the name is there (inductor imports it)
    monkeypatch.delattr(importlib.import_module("torch._inductor.cpp_builder"), "get_cpp_compiler")
    assert shims.moved() == ["torch._inductor.cpp_builder.get_cpp_compiler (declared in cebench.core.devices)"]


def test_an_instance_s_read_is_checked_among_what_its_constructor_sets(monkeypatch):
    """An op overload's schema is set by its constructor: a release whose constructor sets it
    no more is named, and reading it off an overload raises `MovedError`; off an object that
    is no overload, the AttributeError is raised as it is."""
    from cebench.shims import torch_names

    overload = torch._ops.OpOverload
    monkeypatch.setattr(overload, "__init__", lambda self, *args: None)
    assert shims.moved() == [f"torch._ops.OpOverload.{name} (declared in cebench.shims.torch_names; checked with "
                             "torch 2.8.0 2.13.0 2.14.1)" for name in ("_schema", "_overloadpacket")]
    with pytest.raises(MovedError, match=r"reads torch\._ops\.OpOverload\._schema, "):
        torch_names.schema(overload.__new__(overload))
    monkeypatch.undo()
    with pytest.raises(AttributeError, match="_schema"):
        torch_names.schema(object())
    with pytest.raises(ValueError, match="torch._ops.OpOverload: _name is not declared as read"):
        torch_names.OVERLOAD.of(torch.ops.aten.add.Tensor, "_name")


def test_a_module_inductor_wrote_is_refused_where_its_header_binds_no_name_cebench_sets():
    """A release whose wrapper header no longer binds `empty_strided_cpu` fails, naming it,
    rather than leaving its buffers off meta."""
    from cebench.shims.inductor import WRAPPER

    written = types.ModuleType("written")
    written.torch = torch
    with pytest.raises(MovedError, match=r"replaces written\.empty_strided_cpu, which this environment"):
        WRAPPER.set_on(written, {"empty_strided_cpu": None, "torch": torch})
    assert written.torch is torch


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
    assert {f"{shims.__name__}.{m}" for m in shims.MODULES} | set(shims.CORE) == set(shims.inventory())
    assert "torch_names" in shims.MODULES
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


def test_every_replacement_and_read_is_declared_in_the_shims_or_the_core():
    """`Replaced(...)` and `Read(...)` are constructed only in a shim module or in `cebench.core`
    (all of them listed by `shims.inventory`), and `patched(...)` is called only by
    `cebench.core.patched`."""
    listed = {m.replace("cebench.", "").replace(".", "/") + ".py" for m in shims.inventory()}
    found = []
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == "patched" and _where(path) != "core/patched.py":
                    found.append(f"{_where(path)}:{node.lineno} calls patched()")
                if node.func.id in ("Replaced", "Read") and _where(path) not in listed:
                    found.append(f"{_where(path)}:{node.lineno} declares a {node.func.id} outside the inventory")
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


def _private_imports(node: ast.Import | ast.ImportFrom) -> list[str]:
    """What an import statement imports that is a library's private module or name."""
    if isinstance(node, ast.ImportFrom):
        private = node.module and node.level == 0 and node.module.split(".")[0] in THIRD_PARTY and \
            any(map(_private, [*node.module.split("."), *(a.name for a in node.names)]))
        return [f"from {node.module} import …"] if private else []
    return [f"import {a.name}" for a in node.names
            if a.name.split(".")[0] in THIRD_PARTY and any(map(_private, a.name.split(".")))]


def test_the_core_imports_no_private_module_but_through_a_declaration():
    """`cebench.core` is below the shims and reads private names itself, but a private module
    it needs at run time it reads through a declaration (`Read`: `devices.CPP_BUILDER`), which
    the canary walks. An import under `if TYPE_CHECKING:` is a type for mypy, not a read."""
    found = []
    for path, tree in _sources():
        if not _where(path).startswith("core/"):
            continue
        typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and
                       isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                       for statement in node.body for n in ast.walk(statement)}
        found += [f"{_where(path)}:{node.lineno} {imported}" for node in ast.walk(tree)
                  if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in typing_only
                  for imported in _private_imports(node)]
    assert not found, "private modules imported by cebench/core outside a declaration:\n" + "\n".join(found)


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
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found += [f"{_where(path)}:{node.lineno} {imported}" for imported in _private_imports(node)]
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
    # what 2.8 has that later releases do not, as on 2.8
    monkeypatch.setattr(importlib.import_module("torch._prims_common"), "is_non_overlapping_and_dense",
                        lambda t: True, raising=False)
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
