"""Errors that mean a person gave bad input (the CLI prints them in one line and exits 2),
and the one-line descriptions of any exception, or warnings, that a results row records."""
from __future__ import annotations

import warnings


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


def said(caught: list[warnings.WarningMessage], limit: int = 300) -> str:
    """The distinct first lines of the warnings `caught` ('UserWarning: …'), '; '-joined,
    at most `limit` characters."""
    lines = dict.fromkeys(describe(w.message if isinstance(w.message, Warning) else Warning(w.message), limit)
                          for w in caught if str(w.message).strip())
    text = "; ".join(lines)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def joined(*parts: str | None) -> str:
    """A row's note from its parts: those that say something, in order, '; '-joined ('' for none)."""
    return "; ".join(part for part in parts if part)


class InputWarning(UserWarning):
    """Something about the input that is used anyway, or work of a size worth a word before
    it starts: a cut-off row left out, a sweep that will take very long. The command line
    prints each as one line on stderr as it is raised (`warnings.warn`)."""
