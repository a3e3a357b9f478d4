"""The typer application and what every command shares: consoles, error exits, help
texts completed at call time, and printing a table that fits the terminal.

Nothing here imports torch or pandas: `cebench --help`, every `--help` and every usage
error answer without them.
"""
from __future__ import annotations

import codecs
import contextlib
import errno
import functools
import os
import sys
import unicodedata
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from cebench.core.config import LOSS
from cebench.core.errors import InputWarning, UsageError

if TYPE_CHECKING:
    from cebench.render.table import Table

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
        text = getattr(param, "help", None)  # an option's (an argument has none)
        if text:  # by name: not a user's `file.py:fn` resolved earlier in this process (given by its path)
            named = [n for n in variants.names() if ":" not in n]
            loss = ", ".join(v.name for v in variants.listed(LOSS) if v.name in named and not v.compiles)
            param.help = text.replace(VARIANTS, ", ".join(named)).replace(LOSS_VARIANTS, loss)  # type: ignore[attr-defined]


@contextlib.contextmanager
def _help_view(command: TyperCommand | TyperGroup, ctx: typer.Context) -> Iterator[None]:
    """While `command`'s help is written: its help completed (`_complete_help`), and each
    `--x/--no-x` pair named as one, '--isolate/--no-isolate', in the column of the options'
    names. typer gives a pair's second name a column of its own, which the help texts' column
    pays for; where the columns do not fit, rich narrows that one to the longest name's width
    and then both alike: at 80 columns, sweep's help texts read 22 characters a line and words
    and --activation-checkpointing were cut with '…'. The names are put back afterwards: click
    parses with them."""
    _complete_help(command, ctx)
    pairs = [(p, p.opts, p.secondary_opts) for p in command.get_params(ctx) if getattr(p, "secondary_opts", None)]
    for param, opts, secondary in pairs:
        param.opts, param.secondary_opts = ["/".join([*opts, *secondary])], []
    try:
        yield
    finally:
        for param, opts, secondary in pairs:
            param.opts, param.secondary_opts = opts, secondary


WORD = 160  # characters: a longer word (an argument echoed) is shortened in the middle in error lines
LINE = 2000  # characters: a longer error or warning line is shortened in the middle


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit * 2 // 3]}…{text[-(limit // 3):]}"


def one_line(text: str) -> str:
    """`text` on one line, each word (an argument echoed: a 6,000-character --batch) at most
    `WORD` characters and the line at most `LINE`; what is cut is their middle, so the
    start and the end (where what is wrong is said) stay."""
    return _shorten(" ".join(_shorten(word, WORD) for word in text.split()), LINE)


def message(exc: UsageError) -> str:
    """A library's `UsageError` in the command line's words: its parameter as a flag."""
    return exc.message if exc.param is None else f"--{exc.param.replace('_', '-')}: {exc.message}"


def error(text: str) -> None:
    """'cebench: error: <text>' on stderr, one line."""
    err.print(Text.assemble(("cebench: error: ", "bold red"), one_line(text)), highlight=False, soft_wrap=True)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """An `InputWarning` as one line on stderr; any other warning as Python shows it."""
    if issubclass(category, InputWarning):
        err.print(f"warning: {one_line(str(message))}", style="yellow", highlight=False, soft_wrap=True)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning
# click's exceptions, from the click that typer uses (recent typers bundle their own)
_clicks = sys.modules[typer.BadParameter.__module__]
_NO_ARGS = getattr(_clicks, "NoArgsIsHelpError", ())


def _stdout_failed(exc: OSError) -> bool:
    """Whether `exc` is a failed write to stdout (a full device, a closed pipe): a frame of
    its traceback was writing to stdout, itself or through a rich console."""
    if exc.errno not in (errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG):
        return False
    streams = (sys.stdout, getattr(sys.stdout, "buffer", None), sys.__stdout__)
    tb = exc.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if any(value is s for s in streams) or (isinstance(value, Console) and value.file in streams):
                return True
        tb = tb.tb_next
    return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing it at exit cannot fail again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test runner's capture)
        pass


# What cebench prints beyond ASCII, each as one ASCII character (a table's columns stay aligned), for a
# stream that cannot encode them (PYTHONIOENCODING=ascii, a latin-1 terminal); any other such character is
# its NFKD letter ('é' → 'e') or '?'.
ASCII_FALLBACKS = str.maketrans(dict(zip("·×–—−→←◀Δ…≥≤≫µμ∇εχ±≈≠─━│┃⌈⌉", ".x---><<D.><>uuVex+~#-=||[]", strict=True)))
ASCII_ERRORS = "cebench-ascii"


def _ascii_fallback(exc: UnicodeError) -> tuple[str, int]:
    """The codec error handler `ASCII_ERRORS`: unencodable characters as `ASCII_FALLBACKS` say."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = exc.object[exc.start:exc.end].translate(ASCII_FALLBACKS)
    plain = [c if c.isascii() else (unicodedata.normalize("NFKD", c).encode("ascii", "ignore").decode() or "?")[0]
             for c in text]
    return "".join(plain), exc.end


codecs.register_error(ASCII_ERRORS, _ascii_fallback)


def _encode_or_fall_back(stream: TextIO) -> None:
    """Let `stream` write what it cannot encode as ASCII (`ASCII_FALLBACKS`) instead of raising
    UnicodeEncodeError; a UTF stream, or one with its own error handler, is left as it is."""
    encoding = codecs.lookup(getattr(stream, "encoding", None) or "utf-8").name
    reconfigure = getattr(stream, "reconfigure", None)
    if not encoding.startswith("utf") and getattr(stream, "errors", None) == "strict" and reconfigure is not None:
        reconfigure(errors=ASCII_ERRORS)


@contextlib.contextmanager
def user_prints_to_stderr(active: bool = True) -> Iterator[None]:
    """While the block runs (when `active`: a command printing JSON), what is written to stdout
    (a user's loss or model printing, from Python, a C library or a child process started in
    it) goes to stderr, so that stdout holds the command's own output alone."""
    if not active:
        yield
        return
    sys.stdout.flush()
    try:
        fd, saved = sys.stdout.fileno(), os.dup(sys.stdout.fileno())
        os.dup2(sys.stderr.fileno(), fd)
    except (OSError, ValueError, AttributeError):  # no file descriptors (a test runner's capture)
        fd = saved = -1
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved >= 0:
            os.dup2(saved, fd)
            os.close(saved)


class _Group(TyperGroup):
    """Every error is one line on stderr, 'cebench: error: …', and exit code 2: a
    `UsageError` from a command, and a bad option from click (an unknown option, a value of
    the wrong type); stdout that cannot be written (a full device) is one too. An
    `InputWarning` is one line on stderr, 'warning: …', as it is raised."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # click's Context and HelpFormatter
        with _help_view(self, ctx):
            return super().format_help(ctx, formatter)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            error(message(exc))
            raise typer.Exit(2) from None

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **kwargs: Any) -> Any:
        kwargs["windows_expand_args"] = windows_expand_args
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **kwargs)
        for stream in (sys.stdout, sys.stderr):
            _encode_or_fall_back(stream)
        with warnings.catch_warnings():  # restores showwarning and the filters
            warnings.simplefilter("always", InputWarning)
            warnings.showwarning = _show_warning
            try:
                code = super().main(args, prog_name, complete_var, standalone_mode=False, **kwargs)
                sys.stdout.flush()
            except _NO_ARGS as exc:  # the help is printed already
                code = exc.exit_code
            except _clicks.ClickException as exc:
                error(exc.format_message())
                code = exc.exit_code
            except typer.Abort:
                error("aborted")
                code = 1
            except OSError as exc:
                if not _stdout_failed(exc):
                    raise
                _silence_stdout()
                if exc.errno != errno.EPIPE:  # a closed pipe (| head) is the reader's choice: no word
                    error(f"cannot write to standard output ({exc.strerror or exc})")
                code = 1 if exc.errno == errno.EPIPE else 2
        sys.exit(code if isinstance(code, int) else 0)


class _Command(TyperCommand):
    """A command whose help is completed when it is shown (see `_help_view`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # click's Context and HelpFormatter
        with _help_view(self, ctx):
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

MIN_WIDTH = 60  # columns: a narrower terminal or $COLUMNS (0, say) still gets tables this wide


def _console(**kwargs: Any) -> Console:
    """A console at the terminal's width, at least `MIN_WIDTH`; elsewhere (a CI log, a file) at
    $COLUMNS when it is set, else at 160 columns rather than rich's 80. Nothing printed is rich
    markup: a path, a variant spec or an error message may hold '[...]' or ':x:' that must print
    as written."""
    console = Console(markup=False, emoji=False, **kwargs)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        return Console(width=160, markup=False, emoji=False, **kwargs)
    return console if console.width >= MIN_WIDTH else Console(width=MIN_WIDTH, markup=False, emoji=False, **kwargs)


out = _console()
err = _console(stderr=True, soft_wrap=True)  # log lines stay whole


def check_columns(columns: str | None, keys: list[str]) -> None:
    """`--columns` checked, before any work, against the keys of the table to be printed."""
    from cebench.run.grid import split

    unknown = [k for k in split(columns, "columns") if k not in keys] if columns is not None else []
    if unknown:
        raise UsageError(f"--columns: unknown column(s) {', '.join(unknown)} (choose from {', '.join(keys)})")


class _NoColumns:
    """`print_table`'s `columns` for a command that has no --columns option (`NO_COLUMNS`)."""


NO_COLUMNS = _NoColumns()


def print_table(table: Table, wide: bool = False, columns: str | None | _NoColumns = NO_COLUMNS,
                checked: bool = False) -> None:
    """Print a `cebench.render.table.Table` whole at the terminal's width: columns that do not fit
    are left out and named below, with the options that show them (`wide`: every column;
    `columns`: the command's --columns, exactly these keys, None when not given, `NO_COLUMNS`
    where the command has none; `checked`: they were checked already (`check_columns`), and
    one this table lacks is left out)."""
    from cebench.render.table import render
    from cebench.run.grid import split

    keep = split(columns, "columns") if isinstance(columns, str) else None
    if keep is not None and checked:
        keep = [k for k in keep if k in table.keys()]
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
        picks = "; --columns picks them" if columns is not NO_COLUMNS else ""
        out.print(f"not shown at {out.width} columns: {', '.join(rendered.hidden)} (--wide shows every column"
                  f"{picks})", style="dim", highlight=False)


def _version(value: bool) -> None:
    if value:
        import torch

        from cebench.core.version import __version__

        out.print(f"cebench {__version__} (torch {torch.__version__})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the cebench and torch versions and exit."),
) -> None:
    """What a cross-entropy-over-vocabulary implementation really costs: peak memory and step time."""
