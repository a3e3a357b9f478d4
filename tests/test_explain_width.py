"""`explain --model` on a narrow terminal: the parts that tell the compared losses apart are shown;
the parts with the same bytes in every row (parameters, optimizer state: the model's, whatever the
loss) are the first left out, and the table names them with their bytes. Wide, every part shows."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cebench import api
from cebench.analyze.anatomy import PARTS
from cebench.core.units import format_bytes
from cebench.render.table import ColumnNote

# 2 blocks, d_model 48, a vocabulary large enough that the loss holds the step's peak for both losses.
SMALL = {"model_type": "llama", "vocab_size": 4000, "hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 6,
         "num_key_value_heads": 2, "intermediate_size": 40, "tie_word_embeddings": False}
GRID = {"variant": "dense,chunked", "batch": 8, "context": 32, "ce_chunk": 128}
LEAD = "left out, the same in every row: "


@pytest.fixture
def model(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    return str(path)


def argv(model: str) -> list[str]:
    return ["explain", "--model", model, "--device", "cpu", *(f"--{k.replace('_', '-')}={v}" for k, v in GRID.items()),
            "--out", "parts.png"]


def header(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("variant"))


def test_at_80_columns_the_parts_equal_in_every_row_are_the_ones_left_out(model, at_width):
    anatomies = api.explain(device="cpu", model=model, **GRID).anatomies
    equal = [p for p in PARTS if len({a.parts[p] for a in anatomies}) == 1]
    differ = [p for p in PARTS if p not in equal]
    assert len(anatomies) == 2 and {"gradients", "loss"} <= set(differ)  # what the chunked loss changes
    assert {"parameters", "optimizer state"} <= set(equal)  # the model's, whatever the loss

    result = at_width(argv(model), 80)
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    shown = header(result.stdout)
    assert all(p in shown for p in differ) and "parameters" not in shown and "optimizer state" not in shown
    text = " ".join(result.stdout.split())  # notes wrap at 80 columns
    (hidden,) = re.findall(r"not shown at 80 columns: (.*?) \(--wide", text)
    assert sorted(hidden.split(", ")) == sorted(equal)
    (note,) = re.findall(re.escape(LEAD) + r"(.*?) not shown at 80 columns", text)
    assert note.split("; ") == [f"{p} {format_bytes(anatomies[0].parts[p])}" for p in equal]  # their bytes, once

    wide = at_width(argv(model), 200)
    assert all(p in header(wide.stdout) for p in PARTS)
    assert LEAD.strip() not in wide.stdout and "not shown at" not in wide.stdout


def test_one_loss_compares_nothing_and_keeps_the_order_of_parts(model, at_width):
    """With one row no part is 'equal in every row': the parts go right to left, as ever, unnamed."""
    result = at_width([*argv(model)[:5], "--variant=dense", "--batch=8", "--context=32", "--out", "p.png"], 80)
    assert LEAD.strip() not in " ".join(result.stdout.split())
    assert "not shown at 80 columns" in " ".join(result.stdout.split())


def test_a_column_note_of_the_columns_left_out():
    note = ColumnNote((("a", "a 1 B"), ("b", "b 2 B")), of_hidden=True, lead="left out: ")
    assert note.text(["b"]) == "left out: b 2 B" and note.text([]) == ""
    assert ColumnNote((("a", "a"), ("b", "b"))).text(["b"]) == "a"  # as ever: the columns shown


def test_one_loss_at_a_narrow_width_shows_its_largest_parts(model, at_width):
    """With one loss nothing is compared: the parts kept are the largest at its peak."""
    (anatomy,) = api.explain(device="cpu", model=model, **{**GRID, "variant": "dense"}).anatomies
    result = at_width([a for a in argv(model) if not a.startswith("--variant")] + ["--variant", "dense"], 60)
    shown = [p for p in PARTS if re.search(rf"(^|  ){re.escape(p)}(  |$)", header(result.stdout))]
    assert shown, result.stdout
    hidden = [p for p in PARTS if p not in shown]
    assert hidden, result.stdout  # 60 columns are too few for every part
    assert max(PARTS, key=lambda p: anatomy.parts[p]) in shown  # the loss here: dense holds the peak
    if any(anatomy.parts[p] for p in hidden):  # a part with bytes left out: every empty one is out before it
        assert not [p for p in shown if not anatomy.parts[p]], shown
