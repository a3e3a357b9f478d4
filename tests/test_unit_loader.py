"""`cebench.losses.loader`: `module:attr` and `path/to/file.py:attr` specs, each file
imported once under a name of its own, and every failure a one-line `UsageError` naming
where the spec came from. (The messages as `--variant` shows them: test_user_variants.py.)"""
from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from cebench.core.errors import UsageError
from cebench.losses.loader import import_object, is_spec

WHERE = "--variant spec"


@pytest.fixture(autouse=True)
def forget_imports():
    """Drop the modules a test imported (user files and the test package), so that none
    leaks into the next test."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("cebench_user_", "loader_pkg")):
            del sys.modules[name]


def write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.parametrize("text,spec", [("mod:fn", True), ("pkg.mod:Cls.fn", True), ("dir/f.py:fn", True),
                                       ("a:b:c", True), ("dense", False), (":fn", False), ("mod:", False),
                                       ("", False)])
def test_is_spec_needs_text_on_both_sides_of_the_last_colon(text, spec):
    assert is_spec(text) is spec


def test_a_module_attribute_and_a_dotted_path(tmp_path, monkeypatch):
    write(tmp_path / "loader_pkg" / "__init__.py", "")
    write(tmp_path / "loader_pkg" / "losses.py", """
        def fn():
            return "fn"

        class Holder:
            @staticmethod
            def method():
                return "method"
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_object("loader_pkg.losses:fn", WHERE)() == "fn"
    assert import_object("loader_pkg.losses:Holder.method", WHERE)() == "method"
    with pytest.raises(UsageError, match=r"^--variant spec: loader_pkg.losses has no attribute 'Holder.nope'$"):
        import_object("loader_pkg.losses:Holder.nope", WHERE)


def test_a_file_is_imported_once_under_a_name_of_its_own(tmp_path, monkeypatch):
    before = {name for name in sys.modules if name.startswith("cebench_user_mine_")}  # other tests' mine.py
    one = write(tmp_path / "a" / "mine.py", "import itertools\nCOUNTER = itertools.count()\nFIRST = next(COUNTER)\n")
    other = write(tmp_path / "b" / "mine.py", "VALUE = 'b'\n")  # the same stem in another folder
    counter = import_object(f"{one}:COUNTER", WHERE)
    assert next(counter) == 1 and import_object(f"{one}:COUNTER", WHERE) is counter  # not executed again
    assert import_object(f"{other}:VALUE", WHERE) == "b"
    monkeypatch.chdir(tmp_path / "a")
    assert import_object("mine.py:COUNTER", WHERE) is counter  # a relative path: the same file, the same module
    names = [name for name in sys.modules if name.startswith("cebench_user_mine_") and name not in before]
    assert len(names) == 2


def test_a_file_that_failed_to_import_is_imported_again_once_fixed(tmp_path):
    path = write(tmp_path / "flaky.py", "1 / 0\n")
    with pytest.raises(UsageError, match=r"^--variant spec: cannot import .*flaky.py \(ZeroDivisionError: division"):
        import_object(f"{path}:fn", WHERE)
    assert not [name for name in sys.modules if name.startswith("cebench_user_flaky_")]
    write(path, "def fn():\n    return 'fixed'\n")
    assert import_object(f"{path}:fn", WHERE)() == "fixed"


@pytest.mark.parametrize("make,spec,message", [
    (None, "nosuchmodule_xyz:fn", "cannot import nosuchmodule_xyz (ModuleNotFoundError: No module named "
                                  "'nosuchmodule_xyz')"),
    (None, "{dir}/missing.py:fn", "{dir}/missing.py: no such file"),
    ("notes.txt", "{dir}/notes.txt:fn", "{dir}/notes.txt is not a Python file"),
    ("empty.py", "{dir}/empty.py:fn", "{dir}/empty.py has no attribute 'fn'"),
])
def test_each_failure_is_one_usage_error_naming_where(tmp_path, make, spec, message):
    if make:
        write(tmp_path / make, "")
    with pytest.raises(UsageError) as info:
        import_object(spec.format(dir=tmp_path), WHERE)
    assert str(info.value) == f"{WHERE}: {message.format(dir=tmp_path)}"


def test_a_long_import_error_is_cut_to_one_short_line(tmp_path):
    path = write(tmp_path / "loud.py", "raise ValueError('x' * 500 + '\\nsecond line')\n")
    with pytest.raises(UsageError) as info:
        import_object(f"{path}:fn", WHERE)
    text = str(info.value)
    assert "\n" not in text and "second line" not in text
    assert text.endswith("…)") and len(text) < len(f"{WHERE}: cannot import {path} ()") + 201


def test_a_package_in_the_current_directory_is_found_where_sys_path_lacks_it(tmp_path, monkeypatch):
    """An installed `cebench` command's sys.path lacks the current directory (`python -m`'s
    has it): a package found nowhere else is imported from there, after what sys.path holds;
    a failed import leaves sys.path as it was."""
    write(tmp_path / "loader_pkg_here" / "__init__.py", "")
    write(tmp_path / "loader_pkg_here" / "losses.py", "def fn():\n    return 'here'\n")
    write(tmp_path / "loader_pkg_broken" / "__init__.py", "1 / 0\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    path = list(sys.path)
    for spec, message in (("loader_pkg_missing:fn", "cannot import loader_pkg_missing (ModuleNotFoundError"),
                          ("loader_pkg_broken:fn", "cannot import loader_pkg_broken (ZeroDivisionError")):
        with pytest.raises(UsageError, match=re.escape(message)):
            import_object(spec, WHERE)
        assert sys.path == path
    assert import_object("loader_pkg_here.losses:fn", WHERE)() == "here"
    assert sys.path == [*path, str(tmp_path)]
