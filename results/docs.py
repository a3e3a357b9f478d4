"""Every output block the READMEs show, regenerated: `make docs`.

A block is the output of the command on its first line, between markers:

    <!-- out:SLUG:start -->
    ```text
    $ cebench predict --model gpt2 --target cpu --batch 4
    ...what it prints...
    ```
    <!-- out:SLUG:end -->

`make docs` runs each command (from the repository root, stdout only, at 80 columns, as a
reader's terminal shows it) and writes its output under it; `tests/test_docs.py` runs the
fast ones again and fails when a block no longer matches, apart from timings and dates.
The figures and generated tables the READMEs show are made by `FIGURES` and `SCRIPTS`.

    .venv/bin/python results/docs.py                       # every block, figure and table
    .venv/bin/python results/docs.py --blocks              # the output blocks alone
    .venv/bin/python results/docs.py --blocks quick-start  # those blocks alone
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cebench.render.report import NOISE_MARK

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", ROOT / "results" / "README.md")
WIDTH = 80
BLOCK = re.compile(r"<!-- out:(?P<slug>[\w-]+):start -->\n```text\n\$ (?P<command>[^\n]+)\n(?P<output>.*?)```\n"
                   r"<!-- out:(?P=slug):end -->", re.S)
@dataclass(frozen=True)
class Figure:
    """A committed figure: the commands that draw it (run from the repository root; `{tmp}`
    is a scratch folder), and the files to keep from the scratch folder (name → where)."""

    commands: tuple[str, ...]
    keep: tuple[tuple[str, str], ...] = ()


FIGURES = (
    Figure(("cebench explain --device cpu --batch 8 --ce-chunk 256 --variant dense,chunked,chunked-compiled,"
            "torch-lce --out results/explain-cpu.png",)),
    Figure(("cebench explain --device cuda --ce-chunk 2048,8192 --out results/explain-1b-cuda.png",)),
    Figure(("cebench explain --model llama-3.2-1b --device h100-80gb --batch 256 --activation-checkpointing blocks "
            "--out results/explain-model.png",)),
    Figure(("cebench sweep --device cpu --vocab 50257 --d-model 128 --context 128 --batch 1,2,4,8 --variant "
            "dense,chunked --ce-chunk 256,512 --out {tmp}/example.csv",
            "cebench plot {tmp}/example.csv --out-dir {tmp}"),
           (("memory-vs-batch.png", "results/example-memory.png"),)),
)
# Blocks whose commands take minutes (a sweep with every compiled variant, verify's whole matrix): `make docs`
# regenerates them, `tests/test_docs.py` does not run them again.
SLOW = frozenset({"default-sweep", "limits-batch8", "verify-parity", "recipe-8b"})
# Scripts that regenerate generated tables of the READMEs (results/blocks.py splices them).
SCRIPTS = ("results/model_findings.py", "results/findings.py", "results/judge_time.py --summary --readme")


@dataclass(frozen=True)
class Block:
    """One output block: where it is, its slug, its command (without `$ `) and its output."""

    path: Path
    slug: str
    command: str
    output: str


def blocks(path: Path) -> list[Block]:
    """The output blocks of the file `path`, in order."""
    return [Block(path, m["slug"], m["command"], m["output"]) for m in BLOCK.finditer(path.read_text())]


def argv(command: str) -> list[str]:
    """`cebench ARGS` → ARGS."""
    words = shlex.split(command)
    if not words or words[0] != "cebench":
        raise ValueError(f"an output block's command starts with cebench: {command!r}")
    return words[1:]


_NUMBER = re.compile(r"(?<![\w.])\d[\d,.]*\d|(?<![\w.])\d")
_BYTES = re.compile(r" ?(?:B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b")


def _unless_bytes(line: str, number: re.Match) -> str:
    """`number` as it is when a byte unit follows it in `line`, else '#'."""
    return number[0] if _BYTES.match(line, number.end()) else "#"


# What names the machine rather than the result: the CPU's model in a sweep's title (`cpu (AMD EPYC)`),
# the build tag of torch's version (`2.13.0+cpu`, `+cu130`).
_MACHINE = ((re.compile(r"\b(cpu|cuda) \(.*?\)(?= ·|$)"), r"\1 (…)"), (re.compile(r"(torch \d[\d.]*)\+[\w.]+"), r"\1"))


def normal(output: str) -> list[str]:
    """`output` as a test compares it: what names the machine (`_MACHINE`) left out, a time or
    a span of times (`1.18 s`, `651–660 ms`) written `T`, every other number but a byte count
    (`12.3 MiB`, `512 B`, `29 GB`) `#` (ratios, counts, dates), runs of spaces and of rule
    characters made one; blank lines and the note on noisy times (which depends on the times)
    dropped."""
    lines = []
    for line in output.splitlines():
        for pattern, replacement in _MACHINE:
            line = pattern.sub(replacement, line)
        line = re.sub(r"\d[\d,.]*(?:–\d[\d,.]*)? ?(?:ms|s|µs|ns)\b~?", "T", line)
        line = _NUMBER.sub(functools.partial(_unless_bytes, line), line)
        line = re.sub(r"([━─])\1+", r"\1", line)
        line = re.sub(r"\s+", " ", line).strip()
        if line and not line.startswith(f"{NOISE_MARK} noisy"):
            lines.append(line)
    return lines


def quick(command: str) -> str:
    """`command` as a test runs it again: a sweep runs one warm-up step and times one step per
    point, not the defaults (its times are masked; an eager step's bytes are the same)."""
    if argv(command)[0] != "sweep":
        return command
    return command + "".join(f" --{o} 1" for o in ("warmup", "repeats") if f"--{o}" not in command)


def run(command: str) -> str:
    """What `command` prints on stdout at `WIDTH` columns, run as `python -m cebench`."""
    env = {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"}
    proc = subprocess.run([sys.executable, "-m", "cebench", *argv(command)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    if proc.returncode not in (0, 1):  # check and verify exit 1 on a finding: still an output to show
        raise RuntimeError(f"{command}: exit {proc.returncode}\n{proc.stderr}")
    return proc.stdout


def regenerate(path: Path, slugs: frozenset[str] = frozenset()) -> int:
    """Run the command of every block in `path` (those named in `slugs`, if any) and write its
    output there; the number of blocks run."""
    text = path.read_text()
    found = [b for b in blocks(path) if not slugs or b.slug in slugs]
    for block in found:
        print(f"{path.relative_to(ROOT)}: {block.slug}: $ {block.command}", file=sys.stderr)
        output = run(block.command)
        old = f"$ {block.command}\n{block.output}```"
        text = text.replace(old, f"$ {block.command}\n{output.rstrip()}\n```", 1)
    path.write_text(text)
    return len(found)


def main(argv_: list[str]) -> int:
    slugs = frozenset(a for a in argv_ if not a.startswith("--"))
    for path in DOCS:
        regenerate(path, slugs)
    if "--blocks" not in argv_:
        for figure in FIGURES:
            with tempfile.TemporaryDirectory() as tmp:
                for command in figure.commands:
                    print(f"figure: $ {command.format(tmp=tmp)}", file=sys.stderr)
                    run(command.format(tmp=tmp))
                for name, where in figure.keep:
                    shutil.copyfile(Path(tmp) / name, ROOT / where)
        for script in SCRIPTS:
            print(f"table: {script}", file=sys.stderr)
            subprocess.run([sys.executable, *shlex.split(script)], cwd=ROOT, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
