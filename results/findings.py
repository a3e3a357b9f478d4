"""The README's findings, run: every row of "What cebench found" reproduces with its command
as written, and how long that command takes.

    .venv/bin/python results/findings.py            # run every row (minutes), check it, write the times
    .venv/bin/python results/findings.py --check    # run and check every row; write nothing
    .venv/bin/python results/findings.py --out F    # write the README with its times to F instead
    .venv/bin/python results/findings.py --readme F # the rows of F (a copy, say) rather than README.md
    .venv/bin/python results/findings.py --runs     # run every command, fail only where one breaks

A row of README.md's table is `| finding | reproduce | time |`, one of results/README.md's
evidence table (`EVIDENCE`) `| finding | printed | reproduce |`. Its reproduce cell names one
command in backticks; each figure in backticks in its printed cell (in README.md, the finding
itself, which writes names of code without backticks) is what that command prints, word for
word at 80 columns (whitespace aside). Each command is run here as a reader runs it: a fresh
process from the repository root (`cebench` as `python -m cebench`, anything else, `make
test`, through the shell), cold, at 80 columns; its wall time goes in the row's time cell.
A figure that is a time (`TIMED`) differs from machine to machine: it is read from this run's
table and written into the row. The quick start's time (`<!-- time:SLUG -->…<!-- /time -->`
around the time of the out block SLUG) is measured the same way, and the sentence between the
`findings-machine` markers says which machine it was. Any cited figure that the output lacks
fails the run, as does a time that contradicts its row (`Timed.below`), and nothing is written.
`--runs` is for another torch build (`.ci/torch-builds`), whose figures may differ: each row's
command and the quick start's must run, exiting 0 or 1 (verify's finding), and the figures
each prints that differ from the README's are listed, not failed.

Run it on a quiet machine: the times are the README's reference figures.
"""
from __future__ import annotations

import os
import platform
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blocks import splice  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SECTION = "## What cebench found"
EVIDENCE = ROOT / "results" / "README.md"  # its section of the same name quotes more of each command's output
WIDTH = 80
PENDING = "–"  # a time not yet measured
SPAN = re.compile(r"`([^`]+)`")
INLINE_TIME = re.compile(r"<!-- time:(?P<slug>[\w-]+) -->(?P<time>.*?)<!-- /time -->")
MACHINE = "findings-machine"


@dataclass(frozen=True)
class Timed:
    """A figure a row cites that is a time: where it stands in the row's printed cell (`pattern`,
    whose one group is the figure) and where this run's table has it: the cell under `header` in
    the row of `variant` (and `chunk`) below the group heading that holds `group`. `below`: the
    row's finding holds only while the figure (a ratio) is below it, so a run where it is not
    fails."""

    command: str
    pattern: str
    header: str
    variant: str
    chunk: str = ""
    group: str = ""
    below: float | None = None


TIMED = (
    Timed("cebench sweep --variant dense,chunked,torch-lce --batch 8 --ce-chunk 256",
          r"its time `([^`]+)` of dense's", "time vs base", "torch-lce", "256", below=1.0),
    Timed("cebench sweep --variant chunked --vocab 256 --d-model 512 --ce-chunk 128 --batch 16,128 --threads 1 "
          "--columns mem_vs_lower_bound,us_per_row", r"`([^`]+)` at N = 2,048", "time/row", "chunked", "128",
          "batch 16 ×"),
    Timed("cebench sweep --variant chunked --vocab 256 --d-model 512 --ce-chunk 128 --batch 16,128 --threads 1 "
          "--columns mem_vs_lower_bound,us_per_row", r"`([^`]+)` at N = 16,384", "time/row", "chunked", "128",
          "batch 128 ×"),
)
# The rows tests/test_findings.py runs again: they predict on meta tensors or check a few small steps (seconds);
# the others measure, or fit five losses inside a model twice over, for tens of seconds to minutes, and this
# script runs them.
IN_SUITE = (
    "cebench explain --device cuda --variant chunked --ce-chunk 256,512",
    "cebench predict --target h100-80gb --variant dense,chunked,torch-lce,liger-kernel,cut-cross-entropy --batch 8 "
    "--context 1024 --vocab 128256 --d-model 4096 --dtype bf16 --ce-chunk 4096",
    "cebench predict --target a100-80gb --variant dense,liger-kernel,cut-cross-entropy --batch 8192 --context 1 "
    "--vocab 256000 --d-model 2304 --dtype bf16 --softcap 30 --unit MiB",
    "cebench verify --variant dense,chunked --ignore-frac 0.25",
    "cebench predict --target cuda --variant dense --batch 8192 --context 1 --vocab 256000 --d-model 2304 "
    "--dtype bf16 --softcap 0,30 --unit MiB",
    "python results/judge_time.py --summary",
)


@dataclass(frozen=True)
class Row:
    """One row of a findings table: its line and its cells (`printed`: the finding itself where
    the table has no such column; `time`: empty where it has none)."""

    line: str
    finding: str
    printed: str
    reproduce: str
    time: str

    @property
    def command(self) -> str:
        (command,) = SPAN.findall(self.reproduce)
        return command

    def timed(self) -> list[tuple[Timed, re.Match]]:
        """The row's figures that are times, each with its match in the printed cell."""
        return [(t, m) for t in TIMED if t.command == self.command and (m := re.search(t.pattern, self.printed))]

    def figures(self) -> list[str]:
        """The figures the row cites that its command prints as they are (all but its times)."""
        times = {m.start(1) for _, m in self.timed()}
        return [m[1] for m in SPAN.finditer(self.printed) if m.start(1) not in times]


COLUMNS = ("finding", "printed", "reproduce", "time")


def rows(text: str) -> list[Row]:
    """The rows of the findings table in the section `SECTION` of `text` (a README), its cells
    named by its header (`COLUMNS`; finding and reproduce always)."""
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    found: list[Row] = []
    names: list[str] = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| ---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if not names:
            names = cells
            if not {"finding", "reproduce"} <= set(names) <= set(COLUMNS):
                raise ValueError(f"a findings table's header names {', '.join(COLUMNS)}: {line}")
            continue
        if len(cells) != len(names):
            raise ValueError(f"a findings row has {len(names)} cells ({', '.join(names)}): {line}")
        named = dict(zip(names, cells, strict=True))
        found.append(Row(line, named["finding"], named.get("printed", named["finding"]), named["reproduce"],
                         named.get("time", "")))
    return found


def flat(text: str) -> str:
    """`text` with every run of whitespace (line breaks too) one space: a note wrapped at 80
    columns reads as one line."""
    return re.sub(r"\s+", " ", text).strip()


def missing(row: Row, output: str) -> list[str]:
    """The figures `row` cites that `output` does not print."""
    return [f for f in row.figures() if flat(f) not in flat(output)]


def environment() -> dict[str, str]:
    """A reader's terminal: 80 columns, no colour; `cebench` is this checkout's."""
    return {**os.environ, "COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb",
            "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}


def run(command: str) -> tuple[str, float]:
    """What `command` prints (stdout and stderr) and its wall time in seconds, from the repository
    root: `cebench ARGS` as `python -m cebench ARGS`, `python ARGS` with this Python, anything else
    through the shell. The files it leaves under results/ (a sweep's CSV, explain's figure) are
    removed."""
    before = set((ROOT / "results").iterdir())
    words = shlex.split(command)
    argv = ([sys.executable, "-m", "cebench", *words[1:]] if words[0] == "cebench" else [sys.executable, *words[1:]]
            if words[0] == "python" else ["sh", "-c", command])
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=environment(), capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    for path in set((ROOT / "results").iterdir()) - before:
        if path.is_file():
            path.unlink()
    if proc.returncode not in (0, 1):  # verify exits 1 on a finding: still what the row shows
        raise RuntimeError(f"{command}: exit {proc.returncode}\n{proc.stderr}")
    return proc.stdout + proc.stderr, seconds


def seconds_text(seconds: float) -> str:
    """A command's wall time as the README gives it: '4 s', '1 min 05 s'."""
    if seconds < 59.5:
        return f"{seconds:.0f} s" if seconds >= 9.5 else f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def cell(output: str, timed: Timed) -> str:
    """The cell of `output`'s table that `timed` names."""
    lines = output.splitlines()
    header = next(line for line in lines if line.startswith("variant "))
    match = re.search(rf"(?:^|  ){re.escape(timed.header)}(?:  |$)", header)
    if match is None:
        raise LookupError(f"{timed.command}: no column headed {timed.header!r} at {WIDTH} columns")
    end = match.end() - (2 if match.group().endswith("  ") else 0)
    group = ""
    for line in lines[lines.index(header) + 2:]:
        if line.startswith("── "):
            group = line
            continue
        words = re.split(r"\s{2,}", line.strip())
        if timed.group in group and words[0] == timed.variant and (not timed.chunk or words[1] == timed.chunk):
            return re.split(r"\s{2,}", line[:end].strip())[-1].rstrip("~")
    raise LookupError(f"{timed.command}: no row of {timed.variant} {timed.chunk} under {timed.group!r}")


def machine() -> str:
    """The machine's CPU, threads and torch, as the sweep's title names them."""
    import torch

    from cebench.core import devices

    return (f"{devices.get('cpu').model_name()}, {torch.get_num_threads()} threads, Python "
            f"{platform.python_version()}, torch {torch.__version__}")


def blocks_command(text: str, slug: str) -> str:
    """The command of the output block `slug` in `text`."""
    match = re.search(rf"<!-- out:{re.escape(slug)}:start -->\n```text\n\$ ([^\n]+)\n", text)
    if match is None:
        raise LookupError(f"no output block {slug}")
    return match[1]


OPTIONS = ("--check", "--out", "--readme", "--runs")


def runs(text: str) -> int:
    """`--runs`: every row's command and the quick start's in README `text` run (1 where one
    breaks); each figure a row cites that its output lacks is listed."""
    broken = 0
    commands = [(row.command, row) for row in rows(text)] + \
        [(blocks_command(text, m["slug"]), None) for m in INLINE_TIME.finditer(text)]
    for command, row in commands:
        try:
            output, seconds = run(command)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            broken += 1
            print(f"BROKEN {command}\n{str(exc)[-1500:]}", flush=True)
            continue
        differs = missing(row, output) if row is not None else []
        print(f"ran    {command} ({seconds_text(seconds)})" + "".join(f"\n  prints otherwise: {f}" for f in differs),
              flush=True)
    print(f"{len(commands) - broken} of {len(commands)} README commands ran")
    return 1 if broken else 0


def main(argv: list[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return 0
    unknown = [a for a in argv if a.startswith("-") and a not in OPTIONS]
    if unknown:
        print(f"findings.py: unknown option {unknown[0]} (options: {', '.join(OPTIONS)}; --help)", file=sys.stderr)
        return 2
    check_only = "--check" in argv
    readme = Path(argv[argv.index("--readme") + 1]) if "--readme" in argv else README
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else readme
    text = readme.read_text()
    if "--runs" in argv:
        return runs(text)
    failures, times, figures = [], {}, {}
    outputs: dict[str, str] = {}
    evidence = rows(EVIDENCE.read_text()) if readme == README else []
    for row in rows(text) + evidence:
        if row.command not in outputs:
            print(f"$ {row.command}", file=sys.stderr, flush=True)
            outputs[row.command], times[row.command] = run(row.command)
            print(f"  {seconds_text(times[row.command])}", file=sys.stderr)
        output = outputs[row.command]
        failures += [f"{row.command}: does not print {f!r}" for f in missing(row, output)]
        for timed, _ in row.timed():
            try:
                figures[(row.line, timed.pattern)] = figure = cell(output, timed)
            except LookupError as exc:
                failures.append(str(exc))
                continue
            if timed.below is not None and not float(figure.rstrip("×").replace(",", "")) < timed.below:
                failures.append(f"{row.command}: {timed.variant}'s {timed.header} is {figure}, not below "
                                f"{timed.below:g}×: the row's finding ({row.finding}) does not hold in this run")
    inline = {}
    for m in INLINE_TIME.finditer(text):
        command = blocks_command(text, m["slug"])
        print(f"$ {command}", file=sys.stderr, flush=True)
        inline[m["slug"]] = run(command)[1]
        print(f"  {seconds_text(inline[m['slug']])}", file=sys.stderr)
    for failure in failures:
        print(f"findings: {failure}", file=sys.stderr)
    if failures or check_only:
        return 1 if failures else 0
    for row in rows(text):
        printed = row.printed
        for timed, _ in row.timed():
            found = re.search(timed.pattern, printed)
            assert found is not None
            printed = printed[:found.start(1)] + figures[(row.line, timed.pattern)] + printed[found.end(1):]
        line = f"| {printed} | {row.reproduce} | {seconds_text(times[row.command])} |"
        text = text.replace(row.line, line, 1)
    text = INLINE_TIME.sub(lambda m: f"<!-- time:{m['slug']} -->{seconds_text(inline[m['slug']])}<!-- /time -->",
                           text)
    out.write_text(text)
    splice(out, MACHINE, f"Times: wall time of each command run cold (a fresh process) on the reference machine, "
                         f"{machine()}, {date.today():%Y-%m-%d}, by `results/findings.py`; yours will differ.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
