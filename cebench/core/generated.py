"""Source written from declarations and kept in the module it types: the fields of a
dataclass that `dataclasses.make_dataclass` builds at run time (a point's from the axes, a
row's from the columns), as a class statement a type checker reads. `make types` (`main`) rewrites every block in
`MODULES`; a test fails while one is stale."""
from __future__ import annotations

import importlib
from collections.abc import Iterable
from enum import Enum
from pathlib import Path

START = "# <generated: make types>"
END = "# </generated>"
# The modules with a block, each with a `typed_source()` that gives it (named, not imported: they are above core).
MODULES: tuple[str, ...] = ("cebench.core.config", "cebench.store.schema")
REQUIRED = object()  # a field without a default


def _source(value: object) -> str:
    return f"{type(value).__name__}.{value.name}" if isinstance(value, Enum) else repr(value)


def dataclass_source(name: str, fields: Iterable[tuple[str, str, object]], frozen: bool = True,
                     indent: str = "    ") -> str:
    """`@dataclass(frozen=..., kw_only=True) class name:` with one annotated line per
    (field, type's source, default or `REQUIRED`), `indent` before each line."""
    lines = [f"@dataclass({'frozen=True, ' if frozen else ''}kw_only=True)", f"class {name}:"]
    lines += [f"    {field}: {kind}" + ("" if default is REQUIRED else f" = {_source(default)}")
              for field, kind, default in fields]
    return "".join(f"{indent}{line}\n" for line in lines)


def between(text: str, start: str, end: str) -> str:
    """The text between the lines `start` and `end`; ValueError when either is missing."""
    head, found, rest = text.partition(start + "\n")
    body, closed, _ = rest.partition(end)
    if not found or not closed:
        raise ValueError(f"the markers {start} and {end} must each be on a line of their own")
    return body[: len(body) - len(body.split("\n")[-1])]  # without the end marker's indentation


def splice(text: str, start: str, end: str, body: str) -> str:
    """`text` with `body` between the lines `start` and `end`."""
    old = between(text, start, end)
    at = text.index(start + "\n") + len(start) + 1
    return text[:at] + body + text[at + len(old):]


def _blocks() -> list[tuple[Path, str]]:
    """(file, the block its declarations give now) of each module in `MODULES`."""
    modules = [importlib.import_module(name) for name in MODULES]
    return [(Path(str(m.__file__)), m.typed_source()) for m in modules]


def stale() -> list[Path]:
    """The files of `MODULES` whose block is not what their declarations give now."""
    return [path for path, body in _blocks() if between(path.read_text(), START, END) != body]


def main() -> int:
    """Rewrite the block of every module in `MODULES`; print the files changed."""
    for path, body in _blocks():
        text = path.read_text()
        if between(text, START, END) != body:
            path.write_text(splice(text, START, END, body))
            print(f"rewrote {path}")
    return 0

