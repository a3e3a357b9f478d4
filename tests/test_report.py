"""The sweep table at any terminal width, its noise mark, and `show --format`."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from cebench.cli import app
from cebench.core.units import format_bytes, format_ms, format_sig3
from cebench.losses import variants
from cebench.render.report import NOISE_MARK, results_table
from cebench.render.table import render
from cebench.store.frame import load
from conftest import fail, rewrite, sweep_csv


def built_in() -> list[str]:
    """The built-in variants (not users' files another test resolved in this process)."""
    return [n for n in variants.names() if variants.get(n).origin == variants.BUILT_IN]


@pytest.fixture(scope="module")
def every_variant(tmp_path_factory) -> Path:
    """A real sweep of the variants of both workloads that run eagerly on this CPU, with
    the compiled variants' rows added as copies of their eager twins (compiling here would
    cost a minute) and the Triton peers' as copies of dense's (as a GPU would measure
    them), and one point out of memory: the table holds every built-in name and a reason."""
    def triton(n: str) -> bool:
        return variants.get(n).devices == ("cuda",) or "cpu" in variants.get(n).interpreted_on

    eager = [n for n in built_in() if not variants.get(n).compiles and not triton(n)]
    path = sweep_csv(tmp_path_factory.mktemp("report") / "measured.csv", "--batch", "1,4", "--context", "32",
                     "--workload", "loss,sample", "--variant", ",".join(eager))

    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        twins = [frame[frame["variant"] == n[: -len("-compiled")]].assign(variant=n, compile_s="12.5")
                 for n in built_in() if n.endswith("-compiled")]
        twins += [frame[frame["variant"] == "dense"].assign(variant=n, device="cuda")
                  for n in built_in() if triton(n)]
        frame = pd.concat([frame, *twins], ignore_index=True)
        fail(frame, (frame["variant"] == "chunked") & (frame["batch"] == "4"), "oom")
        return frame

    return rewrite(path, path.with_name("every.csv"), edit)


@pytest.mark.needs("transformers")  # every variant: hf-loss among them
@pytest.mark.parametrize("width", [80, 100, 120, 160])
def test_show_reads_whole_at_every_width(every_variant, width, monkeypatch):
    console = Console(width=width, record=True, file=io.StringIO())
    monkeypatch.setattr(sys.modules["cebench.cli.app"], "out", console)  # the module, not cebench.cli.app
    result = CliRunner().invoke(app, ["show", str(every_variant)])
    assert result.exit_code == 0, result.output
    text = console.export_text()
    lines = text.splitlines()
    assert "…" not in text
    assert max(len(line) for line in lines) <= width, "\n".join(line for line in lines if len(line) > width)
    shown = {line.split()[0] for line in lines[3:] if line and line[0].isalpha()}
    assert set(built_in()) <= shown  # every variant name whole
    assert "oom [1]" in text and "[1] OutOfMemoryError" in text
    header = {h.strip() for h in next(line for line in lines if line.startswith("variant")).split("  ")}
    assert width < 100 or {"vs bound", "vs floor"} <= header  # the limits come right after the ratios to dense
    if width < 160:
        assert "not shown at" in text and "--wide" in text
    else:
        assert "not shown at" not in text


def test_narrow_table_drops_the_least_important_columns_first(every_variant):
    table = results_table(load(every_variant))
    hidden80, hidden100, none = (render(table, width).hidden for width in (80, 100, None))
    assert none == [] and len(hidden100) < len(hidden80)
    assert hidden80[-1:] != ["peak_delta_bytes"] and "peak_delta_bytes" not in hidden80
    assert {"variant", "ce_chunk", "time_ms_median", "status"}.isdisjoint(hidden80)
    header = render(table, 80, keep=["tokens_per_s"]).body.plain.splitlines()[0]
    assert "tokens/s" in header and "compile" not in header


def test_noisy_points_are_marked_with_a_footer(every_variant, tmp_path):
    def spread(frame: pd.DataFrame) -> None:
        dense = frame["variant"] == "dense"
        frame.loc[dense, ["time_ms_median", "time_ms_p25", "time_ms_p75"]] = ["10", "8", "13"]  # 50 % spread
        frame.loc[~dense & (frame["status"] == "ok"), ["time_ms_median", "time_ms_p25", "time_ms_p75"]] = \
            ["10", "9.8", "10.3"]  # 5 %

    table = results_table(load(rewrite(every_variant, tmp_path / "noisy.csv", spread)))
    rendered = render(table, None)
    text = "\n".join([rendered.body.plain] + [n.plain for n in rendered.notes])
    rows = [line for line in text.splitlines() if line.split()[:1] in (["dense"], ["chunked-sample"])]
    assert all(("10.0 ms" + NOISE_MARK in row) == row.startswith("dense ") for row in rows), rows
    assert f"{NOISE_MARK} noisy: p25–p75 spread over 10% of the median" in text


@pytest.mark.needs("transformers")  # every variant: hf-loss among them
def test_show_formats_for_a_pull_request(every_variant):
    runner = CliRunner()
    md = runner.invoke(app, ["show", str(every_variant), "--format", "markdown"])
    assert md.exit_code == 0, md.output
    lines = md.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| variant"))
    assert header.count("|") == lines[lines.index(header) + 1].count("|")
    assert all(f"| {name} |" in md.stdout for name in built_in())
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["show", str(every_variant), "--format", "csv"]).stdout)))
    records = json.loads(runner.invoke(app, ["show", str(every_variant), "--format", "json"]).stdout)
    assert len(rows) == len(records) == len(load(every_variant))
    dense = next(r for r in records if r["variant"] == "dense" and r["workload"] == "loss" and r["batch"] == 4)
    chunked = next(r for r in records if r["variant"] == "chunked" and r["batch"] == 1)
    base = next(r for r in records if r["variant"] == "dense" and r["batch"] == 1)
    assert dense["mem_vs_base"] == 1.0 and dense["baseline"] == "dense"
    assert chunked["mem_vs_base"] == pytest.approx(chunked["peak_delta_bytes"] / base["peak_delta_bytes"])
    bad = runner.invoke(app, ["show", str(every_variant), "--format", "html"])
    assert bad.exit_code == 2 and "--format: 'html' is not one of" in bad.stderr
    bad = runner.invoke(app, ["show", str(every_variant), "--columns", "nope"])
    assert bad.exit_code == 2 and "--columns: unknown column(s) nope" in bad.stderr


def test_the_installed_command_honours_columns_when_piped(every_variant):
    cebench = Path(sys.executable).parent / "cebench"
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([str(cebench), "show", str(every_variant)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if not line.startswith(str(every_variant))]
    assert max(len(line) for line in table) <= 80 and "…" not in proc.stdout
    assert "not shown at 80 columns" in proc.stdout


def test_rows_are_set_against_the_lower_bound_and_the_matmul_floor(every_variant):
    records = json.loads(CliRunner().invoke(app, ["show", str(every_variant), "--format", "json"]).stdout)
    ok = [r for r in records if r["status"] == "ok"]
    for r in ok:
        assert r["mem_vs_lower_bound"] == pytest.approx(r["peak_delta_bytes"] / r["lower_bound_bytes"])
        assert r["time_vs_floor"] == pytest.approx(r["time_ms_median"] / r["matmul_floor_ms"])
        assert r["flops"] is not None and r["tflops_per_s"] is not None  # torch-lce's op too: its kernel is Python
    failed = [r for r in records if r["status"] == "oom"]
    assert failed and all(r["time_vs_floor"] is None and r["mem_vs_lower_bound"] is None for r in failed)
    rendered = render(results_table(load(every_variant)), None)
    notes = " ".join(n.plain for n in rendered.notes)
    assert "vs bound: peak Δ / lower_bound_bytes" in notes and "vs floor: time / matmul_floor_ms" in notes
    assert "TFLOP/s of a compiled variant counts its eager twin's FLOPs" in notes
    dense = next(line for line in rendered.body.plain.splitlines() if line.startswith("dense "))
    r = next(r for r in records if r["variant"] == "dense" and r["workload"] == "loss")
    assert format_sig3(r["mem_vs_lower_bound"], "×") in dense and format_sig3(r["time_vs_floor"], "×") in dense


def test_time_per_row_is_the_time_over_the_rows_and_shown_on_request(every_variant):
    records = json.loads(CliRunner().invoke(app, ["show", str(every_variant), "--format", "json"]).stdout)
    ok = [r for r in records if r["status"] == "ok"]
    assert all(r["us_per_row"] == pytest.approx(r["time_ms_median"] * 1e3 / r["tokens"]) for r in ok)
    shown = CliRunner().invoke(app, ["show", str(every_variant), "--columns", "us_per_row"])
    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.stdout.splitlines() if line.startswith("variant "))
    assert header.split()[-2:] == ["time/row", "status"]
    assert "time/row: time / N (batch × context rows)" in shown.stdout
    dense = next(r for r in ok if r["variant"] == "dense" and r["workload"] == "loss" and r["batch"] == 1)
    assert format_ms(dense["us_per_row"] / 1e3) in next(line for line in shown.stdout.splitlines()
                                                        if line.startswith("dense "))


def test_memory_prints_in_the_unit_asked_for(every_variant):
    records = json.loads(CliRunner().invoke(app, ["show", str(every_variant), "--format", "json"]).stdout)
    dense = next(r for r in records if r["variant"] == "dense" and r["workload"] == "loss" and r["batch"] == 1)
    delta = int(dense["peak_delta_bytes"])
    for unit, text in (("B", f"{delta:,} B"), ("kib", format_bytes(delta, "KiB")), ("auto", format_bytes(delta))):
        shown = CliRunner().invoke(app, ["show", str(every_variant), "--unit", unit])
        assert shown.exit_code == 0, shown.output
        line = next(line for line in shown.stdout.splitlines() if line.startswith("dense "))
        assert text in line, (unit, line)
    bad = CliRunner().invoke(app, ["show", str(every_variant), "--unit", "GiBs"])
    assert bad.exit_code == 2 and bad.stderr.startswith("cebench: error: --unit: 'GiBs' is not a unit of memory")
