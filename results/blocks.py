"""Generated blocks of the READMEs: the text between `<!-- NAME:start -->` and
`<!-- NAME:end -->` is replaced by what a results script computed, never typed."""
from __future__ import annotations

from pathlib import Path


def splice(path: Path, name: str, block: str) -> None:
    """Replace the text between the markers of block `name` in the file `path` with `block`
    (ValueError when either marker is missing)."""
    start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"
    text = path.read_text()
    head, found, rest = text.partition(start)
    _, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise ValueError(f"{path}: the markers of {name} must each be on a line of their own")
    path.write_text(head + start + block.rstrip("\n") + "\n" + end + tail)
