"""Import an object named by ``package.module:attr`` or ``path/to/file.py:attr``."""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path

from cebench.core.errors import UsageError, describe
from cebench.core.guard import USER_MODULE, user_code


def is_spec(text: str) -> bool:
    """Whether `text` names an object to import (it has a ':' with text on both sides)."""
    module, sep, attr = text.rpartition(":")
    return bool(sep and module and attr)


def import_object(spec: str, where: str, param: str = "variant") -> object:
    """The object `spec` names. A target ending in '.py' or holding a '/' is a file,
    imported under a module name of its own; anything else a module (`_import_module`).
    `UsageError` naming `where` when the module cannot be imported or lacks the attribute.
    The import is user code (`cebench.core.guard.user_code`, named `spec`, the option
    `param` gave it): its exits and interrupts are a `UsageError` naming the module, and
    within a `time_limit` it is stopped when it runs past it."""
    target, _, attr = spec.rpartition(":")
    try:
        with user_code(spec, param):
            if target.endswith(".py") or "/" in target:
                module = _import_file(Path(target), where)
            else:
                module = _import_module(target)
    except UsageError:
        raise
    except Exception as exc:  # the user's module failed while importing: one line, no traceback
        raise UsageError(f"{where}: cannot import {target} ({describe(exc, 200)})") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{where}: {target} has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj


def _import_module(target: str) -> object:
    """The module `target`, imported as Python does; when its top-level package is found
    nowhere on `sys.path` but is in the current directory (which `python -m` searches and an
    installed `cebench` command does not), the current directory is appended to `sys.path`
    and it is imported from there."""
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        top, cwd = target.partition(".")[0], os.getcwd()
        here = Path(top).is_dir() or Path(f"{top}.py").is_file()
        if exc.name != top or not here or cwd in sys.path or "" in sys.path:
            raise
    sys.path.append(cwd)
    try:
        return importlib.import_module(target)
    except BaseException:
        sys.path.remove(cwd)
        raise


def _import_file(path: Path, where: str) -> object:
    if not path.is_file():
        raise UsageError(f"{where}: {path}: no such file")
    resolved = path.resolve()
    name = f"{USER_MODULE}{resolved.stem}_{hashlib.sha1(str(resolved).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise UsageError(f"{where}: {path} is not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
