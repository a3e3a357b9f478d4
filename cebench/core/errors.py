"""Errors that mean a person gave bad input (the CLI prints them in one line and exits 2),
and the one-line description of any exception that a results row records."""


class UsageError(ValueError):
    """Bad input from a person (an option value, a file): never a bug, never a traceback."""


def describe(exc: BaseException, limit: int = 300) -> str:
    """'ExcType: first line of the message', at most `limit` characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 1] + "…"
