"""The world of a step: its degrees declared once (`cebench.core.world.DEGREES`), `World` the one
place they are multiplied or divided; the grid, the mesh, the time model and the renderers read it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cebench.core.axes import BY_NAME
from cebench.core.timemodel import collectives_note
from cebench.core.world import DEGREES, NAMES, REMAINDER, World, widest
from cebench.run.grid import GridOptions

PACKAGE = Path(__file__).resolve().parent.parent / "cebench"


def test_a_world_multiplies_its_degrees_and_says_what_it_is():
    world = World(fsdp=2, tp=4)
    assert (world.size, world["fsdp"], world["tp"], world.sharded) == (8, 2, 4, True)
    assert world.label == "FSDP ×2 · TP ×4" and world.flags == "--fsdp 2 --tp 4" and world.titles == "FSDP and TP"
    assert world.gpus_per_step == 4  # a TP group's ranks share a step's tokens; FSDP's do not
    assert repr(world) == "World(fsdp=2, tp=4)" and world == World(tp=4, fsdp=2)
    assert hash(world) == hash(World(tp=4, fsdp=2))
    one = World()
    assert (one.size, one.sharded, one.label, one.gpus_per_step, one.split) == (1, False, "", 1, ())
    assert World(fsdp=8).gpus_per_step == 1 and World(fsdp=8).titles == "FSDP"


def test_every_degree_is_an_axis_and_fsdp_takes_what_the_others_leave():
    assert NAMES == ("fsdp", "tp") and REMAINDER in NAMES
    for degree in DEGREES:
        assert BY_NAME[degree.name].off == 1  # one rank: not split that way
    assert World.of_size(8, tp=2) == World(fsdp=4, tp=2) and World.of_size(8) == World(fsdp=8)
    with pytest.raises(ValueError, match="3 ranks do not divide 8"):
        World.of_size(8, tp=3)
    with pytest.raises(ValueError, match="not a degree: pp"):
        World(pp=2)
    with pytest.raises(ValueError, match="at least 1 rank"):
        World(tp=0)


def test_a_rows_world_reads_a_missing_or_empty_degree_as_one_rank():
    assert World.of({"fsdp": 2}) == World(fsdp=2)
    assert World.of({"fsdp": float("nan"), "tp": ""}) == World()
    assert World.of({"fsdp": "4", "tp": 2}) == World(fsdp=4, tp=2)


def test_the_mesh_is_fsdps_alone_or_named_by_degree_in_order():
    assert World(fsdp=4).mesh == ((4,), None)
    assert World(fsdp=2, tp=4).mesh == ((2, 4), ("fsdp", "tp"))
    assert World(tp=2).mesh == ((1, 2), ("fsdp", "tp"))


def test_the_collectives_are_described_by_each_split_degree():
    rate = "1 GB/s"
    assert World(fsdp=2).collectives(rate) == "FSDP's collectives at 1 GB/s, overlapped with the rest"
    assert World(tp=2).collectives(rate) == "tensor parallelism's collectives at 1 GB/s, each waited for"
    assert World(fsdp=2, tp=2).collectives(rate) == ("collectives at 1 GB/s, FSDP's overlapped with the rest, tensor "
                                                     "parallelism's each waited for")
    assert collectives_note(None, World(fsdp=2)).startswith("FSDP's collectives at the link's datasheet rate")


def test_the_widest_world_takes_each_degrees_largest():
    assert widest([World(fsdp=8), World(fsdp=2, tp=4)]) == World(fsdp=8, tp=4) and widest([]) == World()


def test_a_world_beyond_what_cebench_builds_says_so():
    assert World(fsdp=2, tp=4).beyond is None
    assert World(fsdp=65_536, tp=2).beyond == "--fsdp 65536 × --tp 2 is 131,072 ranks, more than 65,536"


def test_gpus_give_each_tp_its_world_and_a_point_reads_its_world():
    grid = GridOptions(variant="dense", model="gpt2", gpus="8", tp="1,2", batch=1, context=8).grid("cpu")
    worlds = [p.world for p in grid.expand()]
    assert worlds == [World(fsdp=8), World(fsdp=4, tp=2)]
    assert [w.size for w in worlds] == [8, 8]


def _word(node: ast.AST) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def test_no_module_but_the_world_multiplies_or_divides_the_degrees():
    """`fsdp * tp`, `world // tp`, `gpus / tp` appear nowhere else: a degree's size is read (a
    TP split divides a layer's heads by its own), a world's size is asked of `World`."""
    degrees, sizes = set(NAMES), set(NAMES) | {"world", "gpus", "size"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "world.py" or "vendor" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv, ast.Div)):
                words = {_word(node.left), _word(node.right)}
                if words & degrees and words <= sizes:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {ast.unparse(node)}")
    assert not found, "\n".join(found)


def test_a_world_is_named_by_the_options_that_ask_for_it():
    world = World(fsdp=4, tp=2)
    assert world.asked() == "--fsdp 4 --tp 2" and world.asked(gpus=True) == "--gpus 8 --tp 2"
    assert World(fsdp=10_000).asked(gpus=True) == "--gpus 10000"
