"""A column carries its cell: fit's and the results table's columns are each declared once
(key, header, priority, which tables have it, how its cell is read), `--columns` derives from
them, and a row's note is added in one way."""
from __future__ import annotations

import ast
from pathlib import Path

from rich.text import Text

from cebench.render import fit, report
from cebench.render.table import Column, Table

PACKAGE = Path(__file__).resolve().parent.parent / "cebench"


def test_each_column_is_declared_once_with_its_cell():
    for declared, keys in ((fit._COLUMNS, fit.COLUMN_KEYS), (report._COLUMNS, report.column_keys(timed=None))):
        assert all(c.read is not None for c in declared)
        assert len({c.key for c in declared}) == len(declared) and set(keys) == {c.key for c in declared}
    assert "time_ms_median" in report.column_keys() and "predicted_time_ms" not in report.column_keys()
    assert "predicted_time_ms" in report.column_keys(timed=False) and "time_ms_median" not in report.column_keys(False)


def test_a_table_takes_the_columns_its_source_has_and_reads_each_cell():
    declared = (Column("name", "name {who}", right=False, read=lambda r: r["name"]),
                Column("size", "size", read=lambda r: Text(str(r["size"]), style="bold"), when=lambda s: s["sized"]))
    table = Table.of(declared, {"sized": False}, who="(all)")
    assert [(c.key, c.header) for c in table.columns] == [("name", "name (all)")]
    table = Table.of(declared, {"sized": True})
    table.add({"name": "a", "size": 3}, style="green")
    name, size = table.rows[0]
    assert name == Text("a", style="green") and size == Text("3", style="bold")  # a Text cell keeps its own style


def test_a_note_is_joined_in_one_place():
    """No module joins a note's parts itself (`cebench.core.errors.joined`, `Result.add_note`)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and ast.unparse(node.func) == "'; '.join" and node.args
                    and isinstance(node.args[0], ast.Call) and ast.unparse(node.args[0].func) == "filter"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, found
