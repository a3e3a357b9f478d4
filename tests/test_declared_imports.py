"""Every package the suite imports is declared (#60 item 6: a venv of only `pip install -e '.[dev]'` runs the
whole suite). What a test file imports, at module level or inside a function, is the standard library,
cebench's or the suite's own, a requirement of pyproject's `dependencies` or `dev` extra, or an optional
package (cebench/core/pins.py: the peers and transformers) imported inside a function only: at a module's top
it would fail the collection where it is absent (`pytest.importorskip` skips the module instead). That the test
calling the function is marked `needs` (or skipped otherwise) is checked by running the suite without them.
The results/ scripts that tests import are read at their module level, which a test's import runs. Read with
`ast`: nothing is imported."""
from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cebench.core.pins import MODULES

ROOT = Path(__file__).resolve().parents[1]
TESTS = sorted((ROOT / "tests").rglob("*.py"))
SCRIPTS = sorted((ROOT / "results").glob("*.py"))  # tests put results/ on sys.path and import these
OWN = {"cebench", *(p.stem for p in TESTS), *(p.stem for p in SCRIPTS)}
OPTIONAL = frozenset(MODULES.values())
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _walk(node: ast.AST, in_function: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Each node under `node`, and whether it runs only when a function is called (its body; not its
    decorators or defaults, which run where it is defined)."""
    body = node.body if isinstance(node, FUNCTIONS) else []
    body = body if isinstance(body, list) else [body]  # a lambda's body is one expression
    for child in ast.iter_child_nodes(node):
        inside = in_function or any(child is b for b in body)
        yield child, inside
        yield from _walk(child, inside)


def _imported(node: ast.AST) -> list[str]:
    """The top-level packages `node` imports (`__import__("x")` and `importlib.import_module("x")` too)."""
    if isinstance(node, ast.Import):
        return [a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [] if node.level else [node.module.split(".")[0]]
    called = getattr(node, "func", None)
    if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (getattr(called, "id", None) == "__import__" or getattr(called, "attr", None) == "import_module")):
        return [node.args[0].value.split(".")[0]]
    return []


def _distribution(requirement: str) -> str:
    """'pytest-xdist>=3' → 'pytest_xdist': the name a requirement's package is imported by (each declared one
    is imported by its own name)."""
    return re.split(r"[^A-Za-z0-9._-]", requirement.strip(), maxsplit=1)[0].lower().replace("-", "_")


def _declared() -> set[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_distribution(r) for r in [*project["dependencies"], *project["optional-dependencies"]["dev"]]}


def undeclared(source: str, where: str, declared: set[str], module_level_only: bool = False) -> list[str]:
    """What `source` (the file `where`) imports that a venv of only `.[dev]` may lack, one line each."""
    found = []
    for node, in_function in _walk(ast.parse(source, where)):
        if module_level_only and in_function:
            continue
        for name in _imported(node):
            if name in sys.stdlib_module_names or name in OWN or name in declared:
                continue
            if name not in OPTIONAL:
                found.append((node.lineno, f"{where}:{node.lineno} imports {name}, which pyproject.toml does not "
                                           "declare (the dev extra: what the tests need)"))
            elif not in_function:
                found.append((node.lineno, f"{where}:{node.lineno} imports the optional {name} at module level, "
                                           "which fails where it is absent (pytest.importorskip, or import it in a "
                                           "test marked needs)"))
    return [line for _, line in sorted(found)]


def test_every_package_the_suite_imports_is_declared():
    declared = _declared()
    found = [line for path in TESTS
             for line in undeclared(path.read_text(), str(path.relative_to(ROOT)), declared)]
    found += [line for path in SCRIPTS
              for line in undeclared(path.read_text(), str(path.relative_to(ROOT)), declared, module_level_only=True)]
    assert not found, "\n".join(found)


def test_what_a_venv_of_only_dev_may_lack_is_found():
    declared = _declared()
    source = ("import os, torch.nn\nimport click\nfrom transformers import AutoConfig\n"
              "import conftest\nfrom . import here\n\n"
              "@pytest.mark.skipif(__import__('triton') is None, reason='')\n"
              "def test_x():\n    import liger_kernel\n    from scipy import optimize\n")
    assert [line.split(" imports ")[1].split(",")[0] for line in undeclared(source, "t.py", declared)] == [
        "click", "the optional transformers at module level", "the optional triton at module level", "scipy"]
    assert undeclared(source, "t.py", declared, module_level_only=True)[-1].startswith("t.py:7 ")
