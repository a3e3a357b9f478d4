"""The typer application and what every command shares: consoles and error exits."""
from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(
    name="cebench",
    help="What a cross-entropy-over-vocabulary implementation really costs: peak memory and step time.",
    no_args_is_help=True,
    add_completion=False,
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
