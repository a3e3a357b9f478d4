"""Command-line interface: parses options, calls the library, renders what it returns.

Exit codes: 0 success, 1 a check failed (regression, verification), 2 bad input.
"""
from __future__ import annotations

import sys

from cebench.cli import sweep as _sweep  # noqa: F401  (registers the command)
from cebench.cli.app import app, err
from cebench.errors import UsageError


def main() -> None:
    """Console-script entry point: a `UsageError` is one line on stderr and exit code 2."""
    try:
        app()
    except UsageError as exc:
        err.print(f"[bold red]cebench: error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


__all__ = ["app", "main"]
