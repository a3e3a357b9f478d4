"""Every `--help` reads whole at 80 columns (#49 item 6): no '…', no line over 80, each option's
name whole in the names column, the help texts a readable width, defaults written one way
('Default: …' in the text, never typer's '[default: …]'), and verify's help names no option
it lacks. The commands are the app's own, so a new one is checked too."""
from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.core import TyperOption
from typer.testing import CliRunner

from cebench.cli import app

COLUMNS = 80
HELP_WIDTH = 28  # columns at least, of the options' help texts at 80 (a third of the line and more)
ANSI = re.compile(r"\033\[[;?0-9]*[a-zA-Z]")  # a colour code, as click.unstyle finds it (typer 0.29 brings no click)


# typer's commands and options are those of the click it uses (recent typers bundle their own): typer.Context,
# TyperOption, never the installed click's classes.
def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, command) for the app and every command under it."""
    found = [(path, group)]
    for name, sub in getattr(group, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(typer.main.get_command(app))


def _help(path: tuple[str, ...]) -> str:
    """`cebench <path> --help` at 80 columns (rich reads $COLUMNS), without colour codes (a CI
    that forces colour)."""
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(COLUMNS)})
    assert result.exit_code == 0, result.output
    return ANSI.sub("", result.output)


def _options(command: Any, path: tuple[str, ...]) -> list[TyperOption]:
    ctx = typer.Context(command, info_name=path[-1] if path else "cebench")
    return [p for p in command.get_params(ctx) if isinstance(p, TyperOption) and not p.hidden]


def _prose(text: str) -> str:
    """The help's words, the panels' borders gone and each run of blanks one space: a sentence
    wrapped over rows of a panel reads on."""
    return " ".join(text.replace("│", " ").split())


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) or "cebench" for p, _ in COMMANDS])
def test_help_is_whole_at_80_columns(path, command):
    text = _help(path)
    lines = text.splitlines()
    assert "…" not in text, [line for line in lines if "…" in line]
    assert max(len(line) for line in lines) == COLUMNS, "the help was not written at 80 columns"
    for option in _options(command, path):
        first, *others = [name for name in option.opts + option.secondary_opts if name.startswith("--")]
        row = re.compile(rf"^│ +(\* +)?{re.escape(first)}(?![\w-])")  # its row of the panel starts with it
        assert any(row.match(line) for line in lines), f"{first} is not whole in {' '.join(path)} --help"
        for name in others:  # --no-isolate
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), name
    # The options' help texts: their column starts where a panel row's continuation lines do.
    inner = [line[1:-1] for line in lines if line.startswith("│") and line[1:-1].startswith(" " * 12)
             and line[1:-1].strip()]
    widths = [len(s) - (len(s) - len(s.lstrip())) for s in inner]
    assert min(widths, default=HELP_WIDTH) >= HELP_WIDTH, f"help texts {min(widths)} columns wide"


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=[" ".join(p) or "cebench" for p, _ in COMMANDS])
def test_defaults_are_written_one_way(path):
    """'Default: …' in the option's text (show_default=False), never typer's '[default: …]'."""
    assert "[default:" not in _help(path)


def test_verify_help_names_no_model_option():
    """verify takes no --model: its --softcap says nothing of one (sweep's does)."""
    assert "--model" not in _help(("verify",))
    assert "With --model: the model's own" in _prose(_help(("sweep",)))


def test_a_flag_pair_keeps_its_names_for_parsing():
    """Its help shows '--isolate/--no-isolate' as one name; click still parses each."""
    paired = [(command, path, option, list(option.opts), list(option.secondary_opts))
              for path, command in COMMANDS for option in _options(command, path) if option.secondary_opts]
    assert paired, "no --x/--no-x option left to check"
    for command, path, option, opts, secondary in paired:
        assert _help(path).count("/".join(opts + secondary)) == 1
        with typer.Context(command, info_name=path[-1]) as ctx:
            command.get_help(ctx)  # rendered on this very command object
        assert (option.opts, option.secondary_opts) == (opts, secondary)


def test_a_users_variant_resolved_earlier_in_the_process_is_not_listed_by_its_path(tmp_path):
    """A `file.py:fn` variant is given by its path: listing it among the names would only cut
    the help with a long path (as after any test that resolved one in the same worker)."""
    from cebench.losses import variants

    loss = tmp_path / ("a_rather_long_folder_name_" * 3) / "my_loss.py"
    loss.parent.mkdir()
    loss.write_text("import torch.nn.functional as F\n\n\ndef ce(h, weight, targets):\n"
                    "    return F.cross_entropy((h @ weight.T).float(), targets)\n")
    name = variants.resolve(f"{loss}:ce").name
    assert name in variants.names()
    text = _help(("sweep",))
    assert "my_loss" not in text and "…" not in text and "dense" in text
