"""The typer application and what every command shares: consoles, error exits, help
texts completed at call time, and printing a table that fits the terminal.

Nothing here imports torch or pandas: `cebench --help`, every `--help` and every usage
error answer without them.
"""
from __future__ import annotations

import functools
import os

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from cebench.core.config import LOSS
from cebench.core.errors import UsageError

# Placeholders in option help texts, filled in when help is shown (so variants that
# entry points or a user register appear too).
VARIANTS = "{variants}"
LOSS_VARIANTS = "{loss variants}"


def _complete_help(command: TyperCommand | TyperGroup, ctx: typer.Context) -> None:
    """Fill in the variant list of now, and drop the type placeholder after each flag."""
    from cebench.losses import variants

    for param in command.get_params(ctx):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        if param.help:
            param.help = param.help.replace(VARIANTS, ", ".join(variants.names())).replace(
                LOSS_VARIANTS, ", ".join(n for n in variants.names(LOSS) if not variants.get(n).compiled))


def message(exc: UsageError) -> str:
    """A library's `UsageError` in the command line's words: its parameter as a flag."""
    return exc.message if exc.param is None else f"--{exc.param.replace('_', '-')}: {exc.message}"


class _Group(TyperGroup):
    """Every command's `UsageError` becomes one line on stderr and exit code 2."""

    def format_help(self, ctx: typer.Context, formatter: object) -> None:
        _complete_help(self, ctx)
        return super().format_help(ctx, formatter)

    def invoke(self, ctx: typer.Context) -> object:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            err.print(Text.assemble(("cebench: error: ", "bold red"), message(exc)), highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None


class _Command(TyperCommand):
    """A command whose help is completed when it is shown (see `_complete_help`)."""

    def format_help(self, ctx: typer.Context, formatter: object) -> None:
        _complete_help(self, ctx)
        return super().format_help(ctx, formatter)


app = typer.Typer(
    cls=_Group,
    name="cebench",
    help="What a cross-entropy-over-vocabulary implementation really costs: peak memory and step time.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
)
command = functools.partial(app.command, cls=_Command)

# On a terminal, tables render at its width; elsewhere (a CI log, a file) at $COLUMNS when
# it is set, else at 160 columns rather than rich's 80.
# Nothing printed is rich markup: a path, a variant spec or an error message may hold '[...]'
# or ':x:' that must print as written.
out = Console(markup=False, emoji=False)
if not out.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
    out = Console(width=160, markup=False, emoji=False)
err = Console(stderr=True, markup=False, emoji=False, soft_wrap=True)  # log lines stay whole


def print_table(table: object, wide: bool = False, columns: str | None = None) -> None:
    """Print a `cebench.render.table.Table` whole at the terminal's width: columns that do not fit
    are left out and named below (`wide`: every column; `columns`: exactly these keys)."""
    from cebench.render.table import render
    from cebench.run.grid import split

    keep = split(columns, "--columns") if columns is not None else None
    try:
        rendered = render(table, None if wide else out.width, keep)
    except ValueError as exc:
        raise UsageError(f"--columns: {exc}") from None
    if rendered.title is not None:
        out.print(rendered.title, highlight=False)
    out.print(rendered.body, overflow="ignore", crop=False, no_wrap=True, highlight=False)
    for note in rendered.notes:
        out.print(note, highlight=False)
    if rendered.hidden:
        out.print(f"not shown at {out.width} columns: {', '.join(rendered.hidden)} (--wide shows every column; "
                  "--columns picks them)", style="dim", highlight=False)


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
