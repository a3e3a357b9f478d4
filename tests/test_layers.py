"""No import runs up the layers: every module of the package imports only from its own
layer and the layers below it, at module level or inside a function (a lazy import is a
dependency too). Read with `ast`, so nothing is imported (torch included)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cebench"
# Bottom to top. `vendor` (vendored byte for byte) imports nothing of cebench; `api` is
# what `cli` calls; the package facade (`cebench/__init__.py`) and `__main__` are on top.
LAYERS = ("core", "shims", "vendor", "losses", "models", "store", "measure", "engine", "run", "analyze", "commands",
          "render", "api", "cli", "__main__", "")
RANK = {name: i for i, name in enumerate(LAYERS)}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    """'cebench.core.devices' → 'core'; 'cebench' (the facade) → ''."""
    return module.split(".")[1] if "." in module else ""


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The cebench modules an import statement names ('cebench' for the facade itself)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: resolved against this module's package
        package = module.split(".")[: len(module.split(".")) - node.level + is_package]
        base = ".".join(package + ([base] if base else []))
    if base == "cebench":  # `from cebench import x`: the submodule x, or a name of the facade
        return [f"cebench.{a.name}" if a.name in RANK else "cebench" for a in node.names]
    return [base]


def upward_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module(path)
        layer = _layer(module)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _imported(node, module, path.name == "__init__.py"):
                if name != "cebench" and not name.startswith("cebench."):
                    continue
                target = _layer(name)
                assert target in RANK, f"{path}:{node.lineno}: cebench.{target} is in no layer (add it to LAYERS)"
                if RANK[target] > RANK[layer] or (layer == "vendor" and target != "vendor"):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} ({layer or 'cebench'}) "
                                 f"imports {name} ({target or 'the facade'})")
    return found


def test_every_module_is_in_a_layer():
    layers = {_layer(_module(p)) for p in PACKAGE.rglob("*.py")}
    assert layers <= set(RANK), sorted(layers - set(RANK))


def test_no_import_runs_up_the_layers():
    found = upward_imports()
    assert not found, "imports up the layers:\n" + "\n".join(found)


def test_no_module_imports_its_own_package_face():
    """A module that its package's `__init__` imports never imports from that `__init__` (the
    package's face) in turn: `from cebench.models import hf` inside `cebench/models/model.py`,
    which `cebench/models/__init__.py` imports, is a circle that works only while `__init__`
    keeps its order."""
    found = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = _module(init)
        faced = {name for node in ast.walk(ast.parse(init.read_text(), str(init)))
                 for name in _imported(node, package, True)}
        for path in sorted(init.parent.glob("*.py")):
            if path.name == "__init__.py" or _module(path) not in faced:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and not node.level and node.module == package:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports from {package}, "
                                 f"whose __init__ imports it")
    assert not found, "\n".join(found)
