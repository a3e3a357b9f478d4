"""Errors that mean a person gave bad input: the CLI prints them in one line and exits 2."""


class UsageError(ValueError):
    """Bad input from a person (an option value, a file): never a bug, never a traceback."""
