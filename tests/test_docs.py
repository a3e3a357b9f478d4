"""The READMEs' output blocks are what their commands print now (`make docs` writes them):
every number but a byte count aside, as times and dates differ from run to run."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "results"))

import docs  # noqa: E402

BLOCKS = [b for path in docs.DOCS for b in docs.blocks(path)]


def test_every_output_block_names_a_cebench_command_once():
    assert BLOCKS and all(docs.argv(b.command) for b in BLOCKS)
    slugs = [b.slug for b in BLOCKS]
    assert len(set(slugs)) == len(slugs) and docs.SLOW <= set(slugs)
    for path in docs.DOCS:  # no block the script would miss: every out: marker opens a well-formed block
        assert path.read_text().count("<!-- out:") == 2 * len(docs.blocks(path)), path


def test_normal_keeps_byte_counts_and_drops_times():
    shown = ("dense     589 MiB    1.00×   614 MiB  1.18 s    1.16–1.22  ok\n━━━━━━━\n"
             "16 rows → results/sweep-20261203-1.csv")
    again = "dense  589 MiB  1.03×  614 MiB  991 ms  0.98–1.02  ok\n━━\n16 rows → results/sweep-20261204-2.csv"
    assert docs.normal(shown) == ["dense 589 MiB #× 614 MiB T #–# ok", "━", "# rows → results/sweep-#-#.csv"]
    assert docs.normal(again) == docs.normal(shown)
    assert docs.normal("dense 590 MiB") != docs.normal("dense 589 MiB")


def test_normal_leaves_out_what_names_the_machine():
    """A block regenerated on another CPU or torch build compares equal: the CPU's model and
    torch's build tag are the machine's, not the result's."""
    here = "cebench sweep · cpu (AMD EPYC) · 2 threads · torch 2.13.0+cpu"
    there = "cebench sweep · cpu (Intel(R) Xeon(R) Processor) · 16 threads · torch 2.13.0+cu130"
    assert docs.normal(here) == docs.normal(there) == ["cebench sweep · cpu (…) · # threads · torch #"]


def _param(block: docs.Block) -> object:
    """A block as a test case; blocks of one model's predictions run in one worker, one after
    the other, the later ones from what the first compiled and traced (14 s saved a run)."""
    family = block.slug.split("-")[0]
    marks = [pytest.mark.xdist_group(f"docs-{family}")] if family == "torchtune" else []
    return pytest.param(block, marks=marks, id=block.slug)


@pytest.mark.needs()
@pytest.mark.slow
@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS if b.slug not in docs.SLOW])
def test_an_output_block_is_what_its_command_prints_now(block, at_width):
    """Run in this process at `docs.WIDTH` columns (`make docs` runs a fresh `python -m cebench`;
    what it prints is the same, and the suite is spared an import of torch per block)."""
    result = at_width(docs.argv(docs.quick(block.command)), docs.WIDTH)
    assert docs.normal(result.stdout) == docs.normal(block.output), (
        f"{block.path.name}: {block.slug} is out of date: run make docs")
