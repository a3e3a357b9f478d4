"""`cebench plot`: PNGs from real sweep CSVs, panels for extra parameters, oom rows as red crosses
in a strip above the panel, coinciding lines told apart, log axes and panel scales labelled."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib import image
from matplotlib import pyplot as plt
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from typer.testing import CliRunner, Result

from cebench.cli import app
from cebench.core.errors import InputWarning
from cebench.render import plot as plotting
from cebench.store.frame import load
from conftest import fail, rewrite, sweep_csv

NAMES = ("memory-vs-batch", "time-vs-batch", "memory-vs-time")
CHUNKED = "chunked · ce_chunk 16"  # the line of the SMALL grid's chunked rows


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


@pytest.fixture(scope="module")
def coincide(single, tmp_path_factory) -> Path:
    """`single` with the chunked rows' peak_delta_bytes set to dense's at the same batch: one line
    hidden behind the other at every x."""
    def edit(frame: pd.DataFrame) -> None:
        dense = frame[frame["variant"] == "dense"].set_index("batch")["peak_delta_bytes"]
        chunked = frame["variant"] == "chunked"
        frame.loc[chunked, "peak_delta_bytes"] = frame.loc[chunked, "batch"].map(dense)
    return rewrite(single, tmp_path_factory.mktemp("coincide") / "coincide.csv", edit)


@pytest.fixture(scope="module")
def one_x(single, tmp_path_factory) -> Path:
    """`single` at batch 1 alone: one value on the x axis, as the README's quick start writes."""
    return rewrite(single, tmp_path_factory.mktemp("one_x") / "one_x.csv", lambda f: f[f["batch"] == "1"])


@pytest.fixture
def draw():
    """`plot.figures` of a CSV; every figure drawn is closed after the test."""
    drawn: list[Figure] = []

    def figures(csv: Path, x: str | None = None) -> dict[str, Figure]:
        made = plotting.figures(load(csv), x)
        drawn.extend(made.values())
        return made
    yield figures
    for fig in drawn:
        plt.close(fig)


def data_axes(fig: Figure) -> list[Axes]:
    """The panels (the failure strips are child axes of theirs)."""
    return [ax for ax in fig.axes if ax.get_visible()]


def strips(ax: Axes) -> list[Axes]:
    return [child for child in ax.child_axes if child.get_label() == plotting.STRIP_LABEL]


def is_red(color: object) -> bool:
    return tuple(np.round(to_rgb(color), 2)) == (1.0, 0.0, 0.0)


def plot(*args: object) -> Result:
    return CliRunner().invoke(app, ["plot", *map(str, args)])


def pixels(path: Path) -> np.ndarray:
    """(height, width, RGB) floats in [0, 1]."""
    return image.imread(path)[..., :3]


def red_mask(path: Path) -> np.ndarray:
    """(height, width): where the pixels of the pure red failure crosses are (no line colour is this red)."""
    rgb = pixels(path)
    return (rgb[..., 0] > 0.9) & (rgb[..., 1] < 0.15) & (rgb[..., 2] < 0.15)


def red_pixels(path: Path) -> int:
    return int(red_mask(path).sum())


def within(mask: np.ndarray, ax: Axes) -> np.ndarray:
    """The part of a figure's (height, width) `mask` inside `ax` (its position after drawing)."""
    box, (height, width) = ax.get_position(), mask.shape
    return mask[round((1 - box.y1) * height):round((1 - box.y0) * height), round(box.x0 * width):round(box.x1 * width)]


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


def test_too_many_panels_draws_16_and_names_those_left_out_and_a_filter(single, tmp_path, draw):
    # 17 vocabs × 2 batches: 17 panels against batch; 34 shapes in the trade-off figure
    wide = rewrite(single, tmp_path / "wide.csv",
                   lambda f: pd.concat([f.assign(vocab=str(v)) for v in range(1000, 1017)]))
    result = plot(wide, "--x", "batch", "--out-dir", tmp_path / "out")
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 2 and all("16 of" in w and "--filter vocab=… picks others" in w for w in warned)
    assert "16 of 17 panels drawn (one per vocab); left out: vocab 1,016" in warned[0]
    assert "16 of 34 panels drawn" in warned[1] and "--filter batch" not in result.stderr  # batch is the x axis
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(f"{n}.png" for n in NAMES)
    figures = draw(wide, "batch")
    for fig in figures.values():
        assert len(data_axes(fig)) == 16 and "16 of" in fig.get_suptitle()


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


def test_coinciding_lines_are_detected(coincide, tmp_path):
    lines = plotting.line_values(load(coincide), "batch", "peak_delta_bytes")
    assert list(lines) == ["dense", CHUNKED] and list(lines[CHUNKED].index) == [1, 2]
    assert plotting.coinciding(lines) == {CHUNKED: "dense"}
    # Only meeting at some x is not coinciding; equal within the tolerance is.
    apart = lines[CHUNKED].copy()
    apart.iloc[-1] += 10 * 2**20
    assert plotting.coinciding({"dense": lines["dense"], CHUNKED: apart}) == {}
    near = lines[CHUNKED] + 3
    assert plotting.coinciding({"dense": lines["dense"], CHUNKED: near}) == {}
    assert plotting.coinciding({"dense": lines["dense"], CHUNKED: near}, tolerance=3) == {CHUNKED: "dense"}
    result = plot(coincide, "--svg", "--out-dir", tmp_path)
    assert result.exit_code == 0, result.output
    assert_sane_png(tmp_path / "memory-vs-batch.png")
    assert "= dense" in (tmp_path / "memory-vs-batch.svg").read_text()


def test_coinciding_line_gets_a_note_shifted_markers_and_a_legend_mention(coincide, single, draw):
    fig = draw(coincide)["memory-vs-batch"]
    (ax,) = data_axes(fig)
    legend = {text.get_text(): handle for text, handle in zip(fig.legends[0].get_texts(),
                                                              fig.legends[0].legend_handles, strict=True)}
    assert set(legend) >= {"dense", f"{CHUNKED} (= dense)"}
    (note,) = [t for t in ax.texts if t.get_text() == "= dense"]
    assert to_rgb(note.get_color()) == to_rgb(legend[f"{CHUNKED} (= dense)"].get_color())
    # The chunked markers: at dense's data, drawn a few points to the side by their transform.
    (markers,) = [line for line in ax.lines if line.get_linestyle() == "None"]
    (dense,) = [line for line in ax.lines if to_rgb(line.get_color()) == to_rgb(legend["dense"].get_color())]
    assert list(markers.get_xdata()) == list(dense.get_xdata()) == [1, 2]
    assert list(markers.get_ydata()) == list(dense.get_ydata())
    fig.canvas.draw()
    xy = np.column_stack([markers.get_xdata(), markers.get_ydata()])
    moved = markers.get_transform().transform(xy) - ax.transData.transform(xy)
    assert np.allclose(moved[:, 1], 0) and np.all(np.abs(moved[:, 0]) >= 3 / 72 * fig.dpi)
    # Nothing coincides in the measured CSV's memory figure: no note, no legend mention.
    fig = draw(single)["memory-vs-batch"]
    assert not [t for ax in data_axes(fig) for t in ax.texts if t.get_text().startswith("=")]
    assert not [t for t in fig.legends[0].get_texts() if "(=" in t.get_text()]


def test_failures_are_drawn_in_a_strip_above_the_data_axes(multi_oom, multi, draw, tmp_path):
    failing = {"context 16": {"dense": [2]}, "context 32": {"dense": [2], CHUNKED: [2]}}  # line: batches
    for name, fig in draw(multi_oom).items():
        path = tmp_path / f"{name}.png"
        fig.savefig(path, dpi=150)
        red = red_mask(path)
        in_strips = 0
        for ax in data_axes(fig):
            assert not [line for line in ax.lines if is_red(line.get_color())]  # no cross on the data scale
            tops = [np.max(line.get_ydata()) for line in ax.lines if len(line.get_ydata())]
            tops += [c.get_datalim(ax.transData).y1 for c in ax.collections]  # time bands, error bars
            assert ax.get_ylim()[1] <= 1.06 * max(tops), name  # no headroom for the crosses
            assert within(red, ax).sum() == 0, (name, ax.get_title())
            for strip in strips(ax):
                crosses = [line for line in strip.lines if is_red(line.get_color())]
                assert crosses and all(line.get_marker() == "x" for line in crosses)
                if name != "memory-vs-time":
                    assert strip.get_shared_x_axes().joined(strip, ax)
                    labels = {t.get_text().split(":")[0]: sorted(line.get_xdata())
                              for t, line in zip(strip.texts, crosses, strict=True)}
                    assert labels == failing[ax.get_title()], name
                assert strip.get_position().y0 >= ax.get_position().y1  # above the panel
                in_strips += within(red, strip).sum()
        assert in_strips > 100, name
        assert sum(len(strips(ax)) for ax in data_axes(fig)) == 2, name  # the panels with a failure
    # Nothing failed: no strip.
    assert not [s for fig in draw(multi).values() for ax in data_axes(fig) for s in strips(ax)]


def test_one_x_value_draws_markers_alone_and_says_how_to_get_a_curve(one_x, single, draw, tmp_path):
    result = plot(one_x, "--out-dir", tmp_path / "one")
    assert result.exit_code == 0, result.output
    (note,) = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]  # once, not per figure
    assert "batch takes one value (1)" in note and "--batch 1,2,4" in note and "--x" in note
    with pytest.warns(InputWarning, match="batch takes one value"):
        one = draw(one_x)
    for name, fig in one.items():
        if name == "memory-vs-time":
            continue
        legend = {t.get_text(): h for t, h in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles,
                                                  strict=True)}
        for label in ("dense", CHUNKED):  # the legend shows what was drawn: a marker, no line
            assert legend[label].get_linestyle() == "None" and legend[label].get_marker() not in ("None", "", None)
        (ax,) = data_axes(fig)
        assert all(line.get_linestyle() == "None" for line in ax.lines if line.get_marker() in plotting._MARKERS)
        # The references, one value each, are drawn as levels across the panel, not as invisible points.
        references = [line for line in ax.lines if line.get_linestyle() in ("--", ":", "-.")]
        assert references and all(list(line.get_xdata()) == [0, 1] for line in references), name
    # Several x values: lines, as ever, and no note.
    result = plot(single, "--out-dir", tmp_path / "several")
    assert result.exit_code == 0 and "takes one value" not in result.stderr
    fig = draw(single)["memory-vs-batch"]
    legend = {t.get_text(): h for t, h in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles, strict=True)}
    assert all(legend[label].get_linestyle() == "-" for label in ("dense", CHUNKED))
    (ax,) = data_axes(fig)
    assert len([line for line in ax.lines if line.get_linestyle() == "-" and len(line.get_xdata()) == 2]) == 2


@pytest.mark.parametrize("batches,label", [
    ({"1": "1", "2": "2"}, "batch (log₂ scale)"),
    ({"1": "3", "2": "30"}, "batch (log scale)"),
    ({"1": "3", "2": "5"}, "batch"),
])
def test_a_log_x_axis_says_so(single, draw, tmp_path, batches, label):
    csv = rewrite(single, tmp_path / "x.csv", lambda f: f.assign(batch=f["batch"].map(batches)))
    for name, fig in draw(csv).items():
        if name != "memory-vs-time":
            assert [ax.get_xlabel() for ax in data_axes(fig)] == [label], name


def test_panels_whose_scales_differ_say_so(multi, single, draw, tmp_path):
    def grow(frame: pd.DataFrame) -> None:
        wide = frame["context"] == "32"
        for column in ("peak_delta_bytes", "logits_fp32_bytes"):
            frame.loc[wide, column] = (frame.loc[wide, column].astype(int) * 10).astype(str)
    fig = draw(rewrite(multi, tmp_path / "grown.csv", grow))["memory-vs-batch"]
    tops = [ax.get_ylim()[1] for ax in data_axes(fig)]
    assert len(tops) == 2 and max(tops) > 5 * min(tops)  # each panel its own y scale
    assert "y scales differ between panels" in fig.get_suptitle()
    assert "scales differ" not in draw(single)["memory-vs-batch"].get_suptitle()  # one panel


def test_the_lower_bound_and_the_matmul_floor_are_drawn_as_reference_lines(single, draw, tmp_path):
    frame = load(single)
    shape = frame.groupby("batch").first()

    def legend(fig: Figure) -> list[str]:
        return [t.get_text() for t in fig.legends[0].get_texts()]

    def styled(ax: Axes, style: str) -> list:
        return [line for line in ax.lines if line.get_linestyle() == style and len(line.get_xdata())]

    figs = draw(single)
    (mem,) = data_axes(figs["memory-vs-batch"])
    (bound,), (logits,) = styled(mem, ":"), styled(mem, "--")  # in the axis unit, as the fp32 logits are
    assert list(bound.get_xdata()) == list(shape.index)
    assert np.allclose(bound.get_ydata() / logits.get_ydata(), shape["lower_bound_bytes"] / shape["logits_fp32_bytes"])
    (time,) = data_axes(figs["time-vs-batch"])
    (floor,) = styled(time, "-.")
    assert list(floor.get_xdata()) == list(shape.index)
    assert np.allclose(floor.get_ydata(), shape["matmul_floor_ms"]) and (shape["matmul_floor_ms"] > 0).all()
    assert plotting.LOWER_BOUND in legend(figs["memory-vs-batch"]) and plotting.FLOOR in legend(figs["time-vs-batch"])
    for ax in data_axes(figs["memory-vs-time"]):  # one panel per batch: the bound across, the floor upright
        (vertical,) = styled(ax, "-.")
        batch = int(ax.get_title().split()[-1])
        assert list(vertical.get_xdata()) == [shape.loc[batch, "matmul_floor_ms"]] * 2 and len(styled(ax, ":")) == 1
    assert {plotting.LOWER_BOUND, plotting.FLOOR} <= set(legend(figs["memory-vs-time"]))
    # A CSV from before the floor: no floor line and no legend entry for it; the bound as ever.
    old = draw(rewrite(single, tmp_path / "old.csv", lambda f: f.assign(matmul_floor_ms="")))
    assert not styled(data_axes(old["time-vs-batch"])[0], "-.") and plotting.FLOOR not in legend(old["time-vs-batch"])
    assert plotting.LOWER_BOUND in legend(old["memory-vs-time"]) and plotting.FLOOR not in legend(old["memory-vs-time"])


@pytest.mark.parametrize(("values", "log"), [(list(range(1, 5001)), True), (list(range(1000, 5000, 3)), False)])
def test_thousands_of_x_values_get_at_most_max_ticks_spread_over_the_range(values, log):
    """A tick per measured value up to MAX_TICKS (thousands of labels took a minute to lay out);
    beyond, the ends and values spread evenly between them (in log space on a log axis)."""
    from cebench.render import plot as plotting

    fig, ax = plt.subplots()
    try:
        plotting._x_axis(ax, "batch", [float(v) for v in values])
        ticks = list(ax.get_xticks())
        assert len(ticks) == plotting.MAX_TICKS and ticks[0] == values[0] and ticks[-1] == values[-1]
        assert all(t in values for t in ticks) and (ax.get_xscale() == "log") == log
        steps = np.diff(np.log(ticks) if log else ticks)
        assert steps.max() < 2 * steps.min()  # spread, not crowded at one end
        plotting._x_axis(ax, "batch", [1.0, 2.0, 4.0])
        assert list(ax.get_xticks()) == [1.0, 2.0, 4.0]
    finally:
        plt.close(fig)
