"""The typer application and what every command shares: consoles and error exits."""
from __future__ import annotations

import typer
from rich.console import Console
from typer.core import TyperGroup

from cebench.errors import UsageError


class _Group(TyperGroup):
    """Every command's `UsageError` becomes one line on stderr and exit code 2."""

    def invoke(self, ctx: typer.Context) -> object:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            err.print(f"[bold red]cebench: error:[/] {exc}", highlight=False, soft_wrap=True, markup=True)
            raise typer.Exit(2) from None


app = typer.Typer(
    cls=_Group,
    name="cebench",
    help="What a cross-entropy-over-vocabulary implementation really costs: peak memory and step time.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
)

# Tables are wide: when stdout is not a terminal (a CI log, a file), render at 160 columns
# instead of rich's 80 rather than squeeze every cell.
out = Console()
if not out.is_terminal:
    out = Console(width=160)
err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        import torch

        import cebench

        out.print(f"cebench {cebench.__version__} (torch {torch.__version__})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the cebench and torch versions and exit."),
) -> None:
    """What a cross-entropy-over-vocabulary implementation really costs: peak memory and step time."""
