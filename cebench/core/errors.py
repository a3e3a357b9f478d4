"""Errors that mean a person gave bad input (the CLI prints them in one line and exits 2),
and the one-line description of any exception that a results row records."""
from __future__ import annotations


class UsageError(ValueError):
    """Bad input from a person (an option value, a file): never a bug, never a traceback.

    `param` names the parameter at fault (an axis or option name such as 'batch' or
    'point_timeout'), or is None when the message names the problem alone; the command
    line shows it as its flag (`--batch`), the Python API as the name."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return self.message if self.param is None else f"{self.param}: {self.message}"


def describe(exc: BaseException, limit: int = 300) -> str:
    """'ExcType: first line of the message', at most `limit` characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
