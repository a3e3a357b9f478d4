"""`cebench plot`: PNGs from real sweep CSVs, panels for extra parameters, oom rows as red crosses."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib import image
from typer.testing import CliRunner, Result

from cebench.cli import app
from conftest import fail, rewrite, sweep_csv

NAMES = ("memory-vs-batch", "time-vs-batch", "memory-vs-time")


@pytest.fixture(scope="module")
def multi(tmp_path_factory) -> Path:
    """Batch and context vary: 4 configurations."""
    return sweep_csv(tmp_path_factory.mktemp("multi") / "multi.csv", "--batch", "1,2", "--context", "16,32")


@pytest.fixture(scope="module")
def single(multi, tmp_path_factory) -> Path:
    """Only batch varies: `multi` at context 16."""
    return rewrite(multi, tmp_path_factory.mktemp("single") / "single.csv", lambda f: f[f["context"] == "16"])


@pytest.fixture(scope="module")
def multi_oom(multi, tmp_path_factory) -> Path:
    """`multi` with every batch-2 point at context 32 out of memory and one error."""
    def edit(frame: pd.DataFrame) -> None:
        at = {c: frame[c] == v for c, v in (("batch", "2"), ("context", "32"), ("variant", "dense"))}
        fail(frame, at["batch"] & at["context"], "oom")
        fail(frame, at["batch"] & ~at["context"] & at["variant"], "error", "RuntimeError: boom")
    return rewrite(multi, tmp_path_factory.mktemp("oom") / "oom.csv", edit)


def plot(*args: object) -> Result:
    return CliRunner().invoke(app, ["plot", *map(str, args)])


def pixels(path: Path) -> np.ndarray:
    """(height, width, RGB) floats in [0, 1]."""
    return image.imread(path)[..., :3]


def red_pixels(path: Path) -> int:
    """Pixels of the pure red failure crosses (no line colour is this red)."""
    rgb = pixels(path)
    return int(((rgb[..., 0] > 0.9) & (rgb[..., 1] < 0.15) & (rgb[..., 2] < 0.15)).sum())


def assert_sane_png(path: Path) -> tuple[int, int]:
    """A real, non-blank PNG of a readable size; returns (height, width)."""
    assert path.is_file() and path.stat().st_size > 20_000, path
    rgb = pixels(path)
    height, width = rgb.shape[:2]
    assert 500 <= width <= 4000 and 400 <= height <= 3000, (path, width, height)
    assert rgb.std() > 0.05  # not a blank canvas
    return height, width


def test_single_parameter_csv(single, tmp_path):
    result = plot(single, "--out-dir", tmp_path)
    assert result.exit_code == 0, result.output
    expected = [str(tmp_path / f"{name}.png") for name in NAMES]
    assert result.stdout.split() == expected
    (_, memory), (_, time), (_, tradeoff) = [assert_sane_png(Path(p)) for p in expected]
    assert memory < 1500 and time < 1500  # one panel each
    assert tradeoff > 1.4 * memory  # one panel per configuration: 2 batch sizes side by side
    assert all(red_pixels(Path(p)) == 0 for p in expected)  # nothing failed, no crosses


def test_multi_parameter_csv_has_one_panel_per_combination(single, multi, tmp_path):
    plot(single, "--out-dir", tmp_path / "one")
    result = plot(multi, "--out-dir", tmp_path / "multi")
    assert result.exit_code == 0, result.output
    one = {n: assert_sane_png(tmp_path / "one" / f"{n}.png") for n in NAMES}
    many = {n: assert_sane_png(tmp_path / "multi" / f"{n}.png") for n in NAMES}
    # Against batch: one panel per context (2 side by side, against 1); the trade-off: one panel per
    # configuration (2 × 2, against 2 in a row).
    assert many["memory-vs-batch"][1] > 1.4 * one["memory-vs-batch"][1]
    assert many["time-vs-batch"][1] > 1.4 * one["time-vs-batch"][1]
    assert many["memory-vs-time"][0] > 1.4 * one["memory-vs-time"][0]


def test_oom_and_error_points_are_red_crosses(multi_oom, tmp_path):
    frame = pd.read_csv(multi_oom)
    assert sorted(frame["status"].value_counts().items()) == [("error", 1), ("ok", 5), ("oom", 2)]
    result = plot(multi_oom, "--out-dir", tmp_path)
    assert result.exit_code == 0, result.output
    for name in NAMES:
        path = tmp_path / f"{name}.png"
        assert_sane_png(path)
        assert red_pixels(path) > 100, name


def test_x_option_filter_and_svg(multi, tmp_path):
    result = plot(multi, "--x", "context", "--filter", "batch=2", "--svg", "--out-dir", tmp_path)
    assert result.exit_code == 0, result.output
    names = ("memory-vs-context", "time-vs-context", "memory-vs-time")
    assert result.stdout.split() == [str(tmp_path / f"{n}.{ext}") for ext in ("png", "svg") for n in names]
    assert all(assert_sane_png(tmp_path / f"{n}.png")[1] < 1500 for n in names[:2])  # batch=2 only: one panel
    assert all((tmp_path / f"{n}.svg").read_text().startswith("<?xml") for n in names)


def test_default_out_dir_is_next_to_the_csv(single, tmp_path):
    csv = tmp_path / "sweep-1.csv"
    csv.write_bytes(single.read_bytes())
    assert plot(csv).exit_code == 0
    assert sorted(p.name for p in (tmp_path / "sweep-1").iterdir()) == sorted(f"{n}.png" for n in NAMES)


def test_too_many_panels_names_the_filter_to_give(single, tmp_path):
    wide = rewrite(single, tmp_path / "wide.csv",
                   lambda f: pd.concat([f.assign(vocab=str(v)) for v in range(1000, 1017)]))
    result = plot(wide, "--x", "batch", "--out-dir", tmp_path / "out")
    assert result.exit_code == 2
    assert "17 panels" in result.stderr and "--filter vocab=1000" in result.stderr
    assert not (tmp_path / "out").exists()
    assert plot(wide, "--x", "batch", "--filter", "vocab=1000,1001", "--out-dir", tmp_path / "out").exit_code == 0


@pytest.mark.parametrize("args,message", [
    (["--x", "tokens"], "--x: 'tokens' is not one of batch, context, vocab, d_model"),
    (["--filter", "nope=1"], "--filter: unknown column 'nope'"),
    (["--filter", "batch"], "--filter: 'batch' is not COLUMN=VALUE"),
    (["--filter", "batch=999"], "--filter batch=999: no row matches; 'batch' takes 1, 2"),
])
def test_bad_options_are_usage_errors(single, tmp_path, args, message):
    result = plot(single, *args, "--out-dir", tmp_path)
    assert result.exit_code == 2 and message in result.stderr
    assert not list(tmp_path.iterdir())


def test_nothing_measured_is_a_usage_error(single, tmp_path):
    unsupported = rewrite(single, tmp_path / "u.csv", lambda f: f.assign(status="unsupported", error="no compiler"))
    result = plot(unsupported, "--out-dir", tmp_path / "out")
    assert result.exit_code == 2 and "nothing to draw" in result.stderr
