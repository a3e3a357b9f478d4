"""Figures from a results CSV, drawn headless with matplotlib (Agg).

- `memory-vs-<x>`: `peak_delta_bytes` (what one step adds) against a parameter, one line
  per variant and `ce_chunk`, with the full fp32 logits (`logits_fp32_bytes`) dashed and
  the lower bound (`lower_bound_bytes`) dotted.
- `time-vs-<x>`: median step time against it, the p25–p75 spread as a band, the matmul
  floor (`matmul_floor_ms`) dash-dotted.
- `memory-vs-time`: one point per variant and `ce_chunk`, one panel per configuration, with
  the lower bound and the floor.
- `step-vs-<x>`: a model's rows: the whole training step's peak (`step_peak_bytes`), with
  a memory budget dashed across.

Parameters that vary besides x split a figure into panels, one per combination; each panel
has its own y scale, and the title says so when their maxima differ more than 2×. `oom` and
`error` points are red crosses in a strip above their panel, off the data scale, never
dropped. Lines that coincide (equal at every x both have) are told apart: their markers are
shifted sideways a few points, a note "= <line>" in their colour ends them, and the legend
says which lines they equal. A log x axis says so in its label. Where x takes one value, each
line is a single point: drawn, and shown in the legend, as markers alone, the references as
levels across the panel and the time spread as a bar, with a note (`InputWarning`) naming x
and how to get a curve.
"""
from __future__ import annotations

import functools
import math
import textwrap
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display needed

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402
from matplotlib.transforms import Affine2D, Affine2DBase, ScaledTranslation, blended_transform_factory  # noqa: E402

from cebench.core.axes import BY_NAME as AXES_BY_NAME  # noqa: E402
from cebench.core.axes import X_AXES  # noqa: E402
from cebench.core.errors import InputWarning, UsageError  # noqa: E402
from cebench.core.units import format_bytes  # noqa: E402
from cebench.store.files import write_new  # noqa: E402
from cebench.store.frame import latest  # noqa: E402
from cebench.store.schema import FAILED, KEY_COLUMNS, SHAPE_COLUMNS, Status  # noqa: E402

X_PARAMS = X_AXES
# Each configuration parameter not on the x axis that takes several values splits a
# figure into panels.
PARAMS = SHAPE_COLUMNS
MAX_PANELS = 16
MAX_TICKS = 12  # x tick labels at most: one per measured value up to this many
TITLE_WIDTH = 80  # characters of a figure's title line before it wraps
REFERENCE = "fp32 logits (N × vocab × 4)"
REFERENCE_STYLE: dict[str, Any] = dict(linestyle="--", color="0.45", linewidth=1.2)
# What any exact implementation must spend (`cebench.measure.limits`): memory figures draw the lower
# bound, time figures the matmul floor; the trade-off figure draws both.
LOWER_BOUND = "lower bound: what any exact step must allocate"
FLOOR = "matmul floor: the full-size matmuls alone, timed"
BOUND_STYLE: dict[str, Any] = dict(linestyle=":", color="0.2", linewidth=1.6)
BUDGET_STYLE: dict[str, Any] = dict(linestyle="--", color="tab:red", linewidth=1.2)
_FLOOR_STYLE: dict[str, Any] = dict(linestyle="-.", color="0.2", linewidth=1.3)
_MEMORY_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_FAIL_STYLE: dict[str, Any] = dict(marker="x", color="red", markersize=9, markeredgewidth=2.2, linestyle="none")
# The time figures' p25–p75 where x takes one value: a bar, not a band.
_SPREAD_BAR = Line2D([], [], color="0.6", alpha=0.7, marker="|", markersize=14, markeredgewidth=6, linestyle="None",
                     label="p25–p75 (bar)")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
# Lines closer than this fraction of the y axis's range at every shared x coincide.
COINCIDE_TOLERANCE = 0.005
_SHIFT_PT = 5.0  # sideways shift of a coinciding line's markers, per rank, in points
STRIP_LABEL = "oom/error"  # the y label, and the Axes label, of the failure strip above a panel
SCALES_DIFFER = 2.0  # panels whose y maxima differ more than this factor get a note in the title

Style = dict[str, Any]  # Line2D keyword arguments of one line: colour, marker, sizes


def default_out_dir(csv_path: Path) -> Path:
    """A folder next to the CSV named after it: results/sweep-1.csv → results/sweep-1/."""
    return csv_path.with_suffix("") if csv_path.suffix else csv_path.with_name(csv_path.name + "-plots")


def select(frame: pd.DataFrame, filters: list[str]) -> pd.DataFrame:
    """Rows matching every 'COLUMN=VALUE[,VALUE...]' filter (values compared as CSV text)."""
    for text in filters:
        column, sep, value = (part.strip() for part in text.partition("="))
        if not sep or not column or not value:
            raise UsageError(f"'{text}' is not COLUMN=VALUE (example: context=128)", "filter")
        if column not in frame.columns:
            raise UsageError(f"unknown column '{column}' (for example {', '.join(KEY_COLUMNS)})", "filter")
        cells = frame[column].map(lambda v: "" if pd.isna(v) else str(v))
        wanted = {v.strip() for v in value.split(",")}
        numbers = {n for n in map(_number, wanted) if n is not None}
        kept = frame[cells.isin(wanted) | cells.map(_number).isin(numbers)]
        if kept.empty:
            raise UsageError(f"--filter {text}: no row matches; '{column}' takes "
                             f"{', '.join(sorted(set(cells), key=_natural)[:12])}")
        frame = kept
    return frame


def _number(text: str) -> float | None:
    """`text` as a number ('0' and '0.0' alike), or None."""
    try:
        return float(text)
    except ValueError:
        return None


def _natural(text: str) -> tuple[int, float | str]:
    try:
        return 0, float(text)
    except ValueError:
        return 1, text


def default_x(frame: pd.DataFrame) -> str:
    """The parameter with the most distinct values (the first of X_PARAMS on a tie)."""
    return max(X_PARAMS, key=lambda p: frame[p].nunique())


def _line(row: pd.Series) -> str:
    """A line's label: the variant, and its ce_chunk for chunked variants."""
    return row["variant"] if pd.isna(row["ce_chunk"]) else f"{row['variant']} · ce_chunk {row['ce_chunk']:,}"


def _value_text(param: str, value: object) -> str:
    if param in ("workload", "device", "dtype"):
        return str(value)
    if isinstance(value, float) and not value.is_integer():
        return f"{param} {value:g}"
    return f"{param} {value}" if isinstance(value, str) else f"{param} {value:,}"


def _panels(frame: pd.DataFrame, by: list[str], x: str) -> tuple[list[str], list[tuple[str, pd.DataFrame]], str]:
    """Split `frame` on the parameters of `by` that vary: (those parameters, [(panel title,
    rows)], a note). Beyond `MAX_PANELS` the first are drawn, and the note (also an
    `InputWarning`) names those left out and a `--filter` on a parameter other than the
    x axis `x` that picks others; else the note is ''."""
    varying = [p for p in by if frame[p].nunique() > 1]
    if not varying:
        return [], [("", frame)], ""
    groups = list(frame.groupby(varying, sort=True))
    titles = [" · ".join(_value_text(p, v) for p, v in zip(varying, key, strict=True)) for key, _ in groups]
    note = ""
    if len(groups) > MAX_PANELS:
        left = titles[MAX_PANELS:]
        hint = max([p for p in varying if p != x] or varying, key=lambda p: frame[p].nunique())
        values = ", ".join(str(v) for v in sorted(frame[hint].unique())[:12])
        note = (f"{MAX_PANELS} of {len(groups)} panels drawn (one per {' × '.join(varying)}); left out: "
                f"{'; '.join(left[:3])}{'; …' if len(left) > 3 else ''}; --filter {hint}=… picks others ({hint} "
                f"takes {values})")
        warnings.warn(InputWarning(note), stacklevel=3)
        groups, titles = groups[:MAX_PANELS], titles[:MAX_PANELS]
    return varying, list(zip(titles, (g for _, g in groups), strict=True)), note


def memory_unit(top: float) -> tuple[str, int]:
    """The largest binary unit (GiB, MiB, KiB) that `top` bytes reach (KiB below that)."""
    return next(((u, s) for u, s in _MEMORY_UNITS if top >= s), _MEMORY_UNITS[-1])


def _memory_unit(frame: pd.DataFrame) -> tuple[str, int]:
    """The largest binary unit (GiB, MiB, KiB) that the peaks or the fp32 logits reach."""
    return memory_unit(max(frame["peak_delta_bytes"].fillna(0).max(), frame["logits_fp32_bytes"].max()))


def _figure(n: int) -> tuple[Figure, list[Axes]]:
    """A figure of `n` panels (at most 4 a row, about 4.6 × 3.4 in each), room for the legend."""
    ncols = 1 if n == 1 else 2 if n in (2, 4) else 3 if n <= 9 else 4
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols + 2.8, 3.4 * nrows + 1.0),
                             layout="constrained", squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _title(fig: Figure, what: str, frame: pd.DataFrame, varying: list[str], x: str | None, note: str = "") -> None:
    """Suptitle: what is drawn, then every parameter held fixed (and the machine), then `note`."""
    fixed = [p for p in PARAMS if p != x and p not in varying
             and not (p in AXES_BY_NAME and AXES_BY_NAME[p].is_off(frame[p].iloc[0]))]  # semantics off: unsaid
    parts = [_value_text(p, frame[p].iloc[0]) for p in fixed]
    parts.insert(min(2, len(parts)), ", ".join(sorted(frame["device_name"].unique())))
    lines = [what, *textwrap.wrap(" · ".join(parts), TITLE_WIDTH)]
    unsupported = frame.loc[frame["status"] == Status.UNSUPPORTED].apply(_line, axis=1).value_counts(sort=False)
    if len(unsupported):
        lines.append("not drawn, unsupported here: " + ", ".join(f"{k} ({n} point{'s' * (n > 1)})"
                                                                 for k, n in unsupported.items()))
    if note:
        lines.append(note)
    fig.suptitle("\n".join(lines), fontsize=11)


def _x_axis(ax: Axes, x: str, values: list[float]) -> None:
    """Log base 2 for powers of two, log 10 over a wide range, else linear; a tick at
    every measured value, or at `MAX_TICKS` of them spread over the rest (thousands of labels
    would take a minute to lay out and could not be read). A log axis says so in its label."""
    scale = ""
    whole = all(float(v).is_integer() for v in values)
    if whole and all(v > 0 and int(v) & (int(v) - 1) == 0 for v in values) and len(values) > 1:
        ax.set_xscale("log", base=2)
        scale = " (log₂ scale)"
    elif len(values) > 1 and min(values) > 0 and max(values) / min(values) >= 10:
        ax.set_xscale("log")
        scale = " (log scale)"
    ax.xaxis.set_major_locator(FixedLocator(_ticks(sorted(set(values)), log=bool(scale))))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if whole else f"{v:g}"))
    ax.set_xlabel(x + scale)


def _ticks(ordered: list[float], log: bool) -> list[float]:
    """`ordered` (ascending), or the `MAX_TICKS` of them nearest to points spread evenly between
    its ends (in log space on a log axis)."""
    if len(ordered) <= MAX_TICKS:
        return ordered
    ends = (math.log(ordered[0]), math.log(ordered[-1])) if log else (ordered[0], ordered[-1])
    spread = [ends[0] + (ends[1] - ends[0]) * i / (MAX_TICKS - 1) for i in range(MAX_TICKS)]
    targets = [math.exp(t) for t in spread] if log else spread
    nearest = [min(ordered, key=functools.partial(_distance, t)) for t in targets]
    return list(dict.fromkeys(nearest))


def _distance(a: float, b: float) -> float:
    return abs(a - b)


def write_figure(fig: Figure, path: Path, param: str, dpi: int = 150) -> None:
    """Save `fig` to `path` in the format its suffix names (.png, .svg, .pdf), whole or not at
    all (`files.write_new`: `UsageError` naming `param` when it cannot be written, and no
    folder made for it left behind)."""
    write_new(path, functools.partial(fig.savefig, dpi=dpi, format=path.suffix.lstrip(".") or "png"), param)


def _ok_lines(rows: pd.DataFrame, x: str | None = None) -> dict[str, pd.DataFrame]:
    """The `ok` rows of one panel by line, in order of first appearance (sorted by `x`)."""
    ok = rows[rows["status"] == Status.OK]
    if ok.empty:
        return {}
    return {label: line.sort_values(x) if x else line
            for label, line in ok.groupby(ok.apply(_line, axis=1), sort=False)}


def line_values(rows: pd.DataFrame, x: str, metric: str) -> dict[str, pd.Series]:
    """The lines one panel draws: {line label: `metric` of its `ok` rows indexed by `x`},
    in order of first appearance; points without the metric are left out."""
    lines = {}
    for label, line in _ok_lines(rows, x).items():
        values = line.set_index(x)[metric].dropna().astype(float)
        if len(values):
            lines[label] = values
    return lines


def coinciding(lines: dict[str, pd.Series], tolerance: float = 0.0) -> dict[str, str]:
    """The lines drawn on top of an earlier one: {line: the first earlier line it equals}.
    Two lines coincide when they differ by at most `tolerance` at every x both have, and
    share two x or more (one where either line is a single point); lines that only meet
    at some x do not coincide."""
    found: dict[str, str] = {}
    labels = list(lines)
    for j, later in enumerate(labels):
        for earlier in labels[:j]:
            a, b = lines[earlier], lines[later]
            shared = a.index.intersection(b.index)
            if len(shared) == 0 or len(shared) < min(2, len(a), len(b)):
                continue
            gap = a.loc[shared].to_numpy(dtype=float) - b.loc[shared].to_numpy(dtype=float)
            if abs(gap).max() <= tolerance:
                found[later] = earlier
                break
    return found


def _shifts(lines: dict[str, pd.Series], follows: dict[str, str]) -> dict[str, float]:
    """Sideways marker shift (points) of each coinciding line: +1, −1, +2, … steps of
    _SHIFT_PT within each group of lines that coincide, the first of the group unshifted."""
    ranks: dict[str, int] = defaultdict(int)
    shifts = {}
    for label in lines:
        root = label
        while root in follows:
            root = follows[root]
        if root != label:
            ranks[root] += 1
            rank = ranks[root]
            shifts[label] = _SHIFT_PT * ((rank + 1) // 2) * (1 if rank % 2 else -1)
    return shifts


def _draw_line(ax: Axes, values: pd.Series, style: Style, shift: float) -> None:
    """A line; with `shift`, its markers drawn `shift` points to the side (an offset
    transform: the data and the axis limits are untouched)."""
    xs, ys = values.index.to_numpy(dtype=float), values.to_numpy(dtype=float)
    if not shift:
        ax.plot(xs, ys, **style)
        return
    ax.plot(xs, ys, **{**style, "marker": "None"})
    offset = ax.transData + ScaledTranslation(shift / 72, 0, ax.figure.dpi_scale_trans)
    markers = {k: v for k, v in style.items() if k not in ("linewidth", "linestyle")}
    ax.add_artist(Line2D(xs, ys, linestyle="none", transform=offset, **markers))  # add_artist: no data limits


def _coincide_notes(ax: Axes, lines: dict[str, pd.Series], follows: dict[str, str],
                    styles: dict[str, Style]) -> None:
    """"= <line>" in each coinciding line's colour at its right end: just outside the
    panel's right edge for a line that reaches it, else just right of its last point.
    Notes that would overlap are pushed down, 9 pt apart (on the panel's approximate
    height). Call once the axis limits are final."""
    ax.get_xlim()  # brings the x limits up to date
    y0, y1 = ax.get_ylim()
    to_axes = ax.transScale + ax.transLimits
    figure = cast(Figure, ax.figure)  # plt.subplots's, never a SubFigure
    height = ax.get_position().height * figure.get_figheight() * 72 * 0.7  # points, about, after layout
    ends = sorted(((label, lines[label].index[-1], lines[label].iloc[-1]) for label in follows),
                  key=lambda end: -end[2])  # from the top; ties in legend order
    below = math.inf
    for label, x, y in ends:
        at = (y - y0) / (y1 - y0) * height
        shift = min(at, below - 9) - at
        below = at + shift
        edge = to_axes.transform((x, y))[0] > 0.9
        ax.annotate(f"= {follows[label]}", (1, y) if edge else (x, y),
                    xycoords=ax.get_yaxis_transform() if edge else "data", xytext=(4 if edge else 9, shift),
                    textcoords="offset points", ha="left", va="center", fontsize=7.5,
                    color=styles[label]["color"], annotation_clip=False,
                    clip_on=False)  # unclipped: the layout makes room for it


def _failure_strip(ax: Axes, failed: pd.DataFrame, x: str | None, styles: dict[str, Style]) -> Axes | None:
    """A strip just above `ax`, off its data scale, labelled STRIP_LABEL: a row of red
    crosses per failing line (at their x, sharing the panel's x axis; at the left of the
    strip without one), labelled with the line and status in its colour. None when
    nothing failed."""
    if failed.empty:
        return None
    groups = list(failed.groupby(failed.apply(_line, axis=1), sort=False))
    # Placed in points above the panel's top edge (a fixed size, whatever the panel's), so
    # the constrained layout makes room for it in one pass.
    axes_box = cast(Affine2DBase, ax.transAxes)  # a BboxTransformTo: affine
    above_top = Affine2D().scale(1 / 72) + ax.figure.dpi_scale_trans + ScaledTranslation(0, 1, axes_box)
    where = blended_transform_factory(ax.transAxes, above_top)
    strip = ax.inset_axes((0, 5, 1, 6 + 13 * len(groups)), transform=where, sharex=ax if x else None)
    strip.set_label(STRIP_LABEL)
    strip.set_ylim(len(groups) - 0.5, -0.5)  # first row on top
    strip.yaxis.set_major_locator(NullLocator())
    strip.tick_params(axis="x", which="both", bottom=False, labelbottom=False)
    strip.set_ylabel(STRIP_LABEL, rotation=0, fontsize=7, ha="right", va="center")
    if x:
        strip.grid(axis="x", alpha=0.3)
    else:
        strip.set_xlim(0, 1)
        strip.xaxis.set_major_locator(NullLocator())
    crosses = [sorted(rows[x]) if x else [0.03] for _, rows in groups]
    for row, xs in enumerate(crosses):
        strip.plot(xs, [row] * len(xs), clip_on=False, zorder=5, **_FAIL_STYLE)
    ax.get_xlim()  # brings the x limits, shared with the strip's crosses, up to date
    to_axes = ax.transScale + ax.transLimits
    for row, ((label, rows), xs) in enumerate(zip(groups, crosses, strict=True)):
        at = [to_axes.transform((v, 1))[0] for v in xs] if x else xs
        # The label goes in the widest free stretch of its row: left of the first cross, or
        # right of a cross.
        edges = [0.0, *at, 1.0]
        _, gap = max((edges[k + 1] - edges[k], k) for k in range(len(edges) - 1))
        left = gap == 0
        status = "/".join(sorted(rows["status"].unique()))
        strip.annotate(f"{label}: {status}", (xs[0] if left else xs[gap - 1], row), fontsize=7,
                       color=styles[label]["color"], va="center", ha="right" if left else "left",
                       xytext=(-8 if left else 8, 0), textcoords="offset points", annotation_clip=False)
    return strip


def _scales_note(tops: dict[str, list[float]]) -> str:
    """A line for the title when the panels' axis maxima (`tops`, per axis name) differ by
    more than SCALES_DIFFER×, or ''."""
    differ = [(name, max(t) / min(t) if min(t) > 0 else math.inf) for name, t in tops.items()
              if len(t) > 1 and max(t) > SCALES_DIFFER * min(t)]
    if not differ:
        return ""
    axes = " and ".join(name for name, _ in differ)
    spread = ", ".join((f"{ratio:.1f}×" if math.isfinite(ratio) else "a lot") + (f" ({name})" * (len(differ) > 1))
                       for name, ratio in differ)
    return f"{axes} scales differ between panels: each panel has its own, maxima apart up to {spread}"


def _legend(fig: Figure, frame: pd.DataFrame, styles: dict[str, Style], extra: list,
            names: dict[str, str] | None = None) -> None:
    """The figure's legend: every line (named as in `names`, else its label), `extra`, and
    the failure crosses when a row failed."""
    names = names or {}
    handles = [Line2D([], [], label=names.get(label, label), **style) for label, style in styles.items()] + extra
    if frame["status"].isin(FAILED).any():
        handles.append(Line2D([], [], label="oom / error / timeout (in the strip above a panel)", **_FAIL_STYLE))
    # An entry takes its handle (~0.6 in) and its text (~0.065 in a character at 8 pt).
    entry = 0.7 + 0.065 * max(len(h.get_label()) for h in handles)
    ncols = max(1, min(len(handles), int(fig.get_figwidth() // max(entry, 2.8))))
    fig.legend(handles=handles, loc="outside lower center", ncols=ncols, fontsize=8, frameon=False)


def _styles(labels: list[str]) -> dict[str, Style]:
    """A colour and marker per line; earlier lines drawn wider, so coinciding lines stay visible.
    tab10 without its red, which is kept for failures."""
    tab10 = cast(ListedColormap, plt.get_cmap("tab10")).colors  # a tuple of RGB tuples
    palette = [c for i, c in enumerate(cast(tuple[tuple[float, float, float], ...], tab10)) if i != 3]
    return {label: dict(color=palette[i % len(palette)], marker=_MARKERS[i % len(_MARKERS)],
                        markersize=max(9 - 1.5 * i, 4.5), linewidth=max(3.2 - 0.6 * i, 1.4))
            for i, label in enumerate(labels)}


def _equal_names(equal: dict[str, dict[str, int]], shown: dict[str, int]) -> dict[str, str]:
    """Legend names of lines that coincide with another: 'L (= E)', or 'L (= E in 2 of 4
    panels)' where they coincide in some of the panels that draw L only."""
    names = {}
    for label, earlier in equal.items():
        parts = [e if n == shown[label] else f"{e} in {n} of {shown[label]} panels" for e, n in earlier.items()]
        names[label] = f"{label} (= {'; '.join(parts)})"
    return names


def _against_x(frame: pd.DataFrame, x: str, metric: str, styles: dict[str, Style], budget: int | None = None,
               ) -> Figure:
    """Memory (`peak_delta_bytes`), a model's whole step (`step_peak_bytes`, with `budget`
    drawn across) or time (`time_ms_median`) against `x`."""
    memory, step = metric == "peak_delta_bytes", metric == "step_peak_bytes"
    modeled = frame["step_peak_bytes"].notna().any()
    varying, panels, left_out = _panels(frame, [p for p in PARAMS if p != x], x)
    unit, scale = (_memory_unit(frame) if memory else ("ms", 1) if not step
                   else memory_unit(max(frame["step_peak_bytes"].max(), budget or 0)))
    fig, axes = _figure(len(panels))
    xs = sorted(float(v) for v in frame[x].unique())
    single = len(xs) == 1  # every line a single point: markers alone, references as levels across
    if single:
        styles = _markers_only(styles)
    equal: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    shown: dict[str, int] = defaultdict(int)
    tops = []
    for ax, (title, rows) in zip(axes, panels, strict=False):
        found = line_values(rows, x, metric)
        lines = {label: found[label] / scale for label in styles if label in found}  # in legend order
        reach = [values.max() for values in lines.values()]
        if step:
            if budget:
                ax.axhline(budget / scale, **BUDGET_STYLE)
                reach.append(budget / scale)
            limit, limit_style = pd.Series(dtype=float), BOUND_STYLE
        elif memory and modeled:  # a model's step: the loss's own references do not bound it
            limit, limit_style = pd.Series(dtype=float), BOUND_STYLE
        elif memory:
            ref = rows.groupby(x)["logits_fp32_bytes"].first() / scale
            _reference(ax, ref, REFERENCE_STYLE, single)
            reach.append(ref.max())
            limit, limit_style = rows.groupby(x)["lower_bound_bytes"].first() / scale, BOUND_STYLE
        else:
            for label, line in _ok_lines(rows, x).items():
                at, low, high = (line[c].to_numpy(dtype=float) for c in (x, "time_ms_p25", "time_ms_p75"))
                if single:  # a band one x wide is not seen: a bar
                    ax.vlines(at, low, high, color=styles[label]["color"], alpha=0.45, linewidth=6)
                else:
                    ax.fill_between(at, low, high, color=styles[label]["color"], alpha=0.2, linewidth=0)
                reach.append(line["time_ms_p75"].max())
            limit, limit_style = rows.groupby(x)["matmul_floor_ms"].median().dropna(), _FLOOR_STYLE
        if len(limit):
            _reference(ax, limit, limit_style, single)
            reach.append(limit.max())
        top = 1.05 * max((r for r in reach if pd.notna(r)), default=0.0)
        follows = coinciding(lines, COINCIDE_TOLERANCE * top)
        shifts = _shifts(lines, follows)
        for label, values in lines.items():
            _draw_line(ax, values, styles[label], shifts.get(label, 0.0))
            shown[label] += 1
        for label, earlier in follows.items():
            equal[label][earlier] += 1
        _x_axis(ax, x, xs)
        if top > 0:
            ax.set_ylim(0, top)
            if lines:
                tops.append(top)
        else:
            ax.set_ylim(bottom=0)
        _failure_strip(ax, rows[rows["status"].isin(FAILED)], x, styles)
        _coincide_notes(ax, lines, follows, styles)
        ax.set_ylabel(f"memory added by the step ({unit})" if memory else f"peak of the whole step ({unit})" if step
                      else "step time (ms)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    one = ("one training step" if frame["step_peak_bytes"].notna().any() else
           f"one {frame['workload'].iloc[0]} step" if frame["workload"].nunique() == 1 else "one step")
    what = (f"Peak memory {one} adds (peak_delta_bytes) vs {x}" if memory
            else f"Peak of the whole training step (step_peak_bytes) vs {x}" if step
            else f"Step time vs {x}: median, {'bar' if single else 'band'} p25–p75")
    _title(fig, what, frame, varying, x, "\n".join(filter(None, (_scales_note({"y": tops}), left_out))))
    extra: list[Line2D | Patch]
    extra = ([] if memory and modeled else [Line2D([], [], label=REFERENCE, **REFERENCE_STYLE)] if memory
             else [Line2D([], [], label=f"budget {format_bytes(budget)}", **BUDGET_STYLE)] if step and budget
             else [] if step else [_SPREAD_BAR if single else Patch(color="0.6", alpha=0.4, label="p25–p75")])
    extra += _limit_handles(frame, bound=memory and not modeled, floor=not memory and not step)
    _legend(fig, frame, styles, extra, _equal_names(equal, shown))
    return fig


def _markers_only(styles: dict[str, Style]) -> dict[str, Style]:
    """`styles` drawing markers and no line: where x takes one value a line is one point, and
    the legend shows what was drawn."""
    return {label: {**style, "linestyle": "None"} for label, style in styles.items()}


def _reference(ax: Axes, values: pd.Series, style: Style, single: bool) -> None:
    """A reference (`values` by x) as a line in `style`; with `single` (x takes one value,
    where a line of one point would not be seen) its level across the panel."""
    if single:
        ax.axhline(float(values.iloc[0]), **style)
    else:
        ax.plot(values.index.to_numpy(dtype=float), values.to_numpy(dtype=float), **style)


def _single_x_note(frame: pd.DataFrame, x: str) -> str:
    """The note where `x` takes one value in `frame`: each line is one point, and how to get a
    curve (a parameter that varies to put on --x, else a sweep over several values of x)."""
    value = frame[x].dropna().iloc[0]
    flag = AXES_BY_NAME[x].flag if x in AXES_BY_NAME else f"--{x.replace('_', '-')}"
    text = f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, float) and not value.is_integer():
        more = f"{flag} with several values"
    else:
        n = int(value)
        more = f"{flag} {','.join(map(str, (n // 2, n, 2 * n) if n > 1 else (1, 2, 4)))}"
    others = [p for p in X_PARAMS if p != x and frame[p].nunique() > 1]
    how = (f"plot against a parameter that varies with --x {others[0]}, or sweep several {x} values ({more})"
           if others else f"sweep several values ({more}), or sweep another parameter and plot against it with --x")
    return f"{x} takes one value ({text}): each line is a single point, drawn as markers; for a curve, {how}"


def _limit_handles(frame: pd.DataFrame, bound: bool, floor: bool) -> list[Line2D]:
    """Legend entries of the lower bound (with `bound`) and the matmul floor (with `floor`,
    when a row of `frame` has one)."""
    handles = [Line2D([], [], label=LOWER_BOUND, **BOUND_STYLE)] if bound else []
    if floor and frame["matmul_floor_ms"].notna().any():
        handles.append(Line2D([], [], label=FLOOR, **_FLOOR_STYLE))
    return handles


def _tradeoff(frame: pd.DataFrame, styles: dict[str, Style], x: str) -> Figure:
    """Memory against time, one point per variant and ce_chunk, one panel per configuration
    (`x`: the other figures' x axis, which a hint to --filter does not name)."""
    varying, panels, left_out = _panels(frame, list(PARAMS), x)
    unit, scale = _memory_unit(frame)
    fig, axes = _figure(len(panels))
    tops: dict[str, list[float]] = {"x": [], "y": []}
    for ax, (title, rows) in zip(axes, panels, strict=False):
        ok = rows[rows["status"] == Status.OK]
        for _, row in ok.iterrows():
            label, t = _line(row), row["time_ms_median"]
            spread = [[t - row["time_ms_p25"]], [row["time_ms_p75"] - t]]
            ax.errorbar([t], [row["peak_delta_bytes"] / scale], xerr=spread, capsize=3, elinewidth=1.5, **styles[label])
        reference = rows["logits_fp32_bytes"].iloc[0] / scale
        ax.axhline(reference, **REFERENCE_STYLE)
        ax.axhline(rows["lower_bound_bytes"].iloc[0] / scale, **BOUND_STYLE)
        if ok["matmul_floor_ms"].notna().any():
            ax.axvline(ok["matmul_floor_ms"].median(), **_FLOOR_STYLE)
        ax.set_xlim(left=0, right=ax.get_xlim()[1] * 1.1)
        ax.set_ylim(0, 1.05 * max(reference, (ok["peak_delta_bytes"] / scale).max() if len(ok) else 0))
        if len(ok):
            tops["x"].append(ax.get_xlim()[1])
            tops["y"].append(ax.get_ylim()[1])
        _failure_strip(ax, rows[rows["status"].isin(FAILED)], None, styles)
        ax.set_xlabel("step time, median (ms); bar p25–p75")
        ax.set_ylabel(f"memory added ({unit})")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    _title(fig, "Memory vs time per configuration: lower left is better", frame, varying, None,
           "\n".join(filter(None, (_scales_note(tops), left_out))))
    _legend(fig, frame, styles, [Line2D([], [], label=REFERENCE, **REFERENCE_STYLE),
                                 *_limit_handles(frame, bound=True, floor=True)])
    return fig


def figures(frame: pd.DataFrame, x: str | None = None, budget: int | None = None) -> dict[str, Figure]:
    """The figures `plot` writes, by name (`memory-vs-<x>`; `step-vs-<x>` when a row has a
    model's step peak, with `budget` bytes drawn across (default: the memory of the rows'
    named GPU target, if one); and `time-vs-<x>` and `memory-vs-time` when a row was timed),
    from `frame` as `results.load` returns it (the last row of a repeated configuration is
    drawn). Close them with `plt.close`."""
    frame = latest(frame)
    if not frame["status"].isin((Status.OK,) + FAILED).any():
        raise UsageError("nothing to draw: every selected row is unsupported")
    x = x or default_x(frame)
    if x not in X_PARAMS:
        raise UsageError(f"'{x}' is not one of {', '.join(X_PARAMS)}", "x")
    styles = _styles(list(dict.fromkeys(frame.apply(_line, axis=1))))
    drawn = {}
    try:
        with warnings.catch_warnings(record=True) as said:  # panels left out: said once, not once per figure
            warnings.simplefilter("always", InputWarning)
            if frame[x].nunique() == 1:
                warnings.warn(InputWarning(_single_x_note(frame, x)), stacklevel=2)
            drawn[f"memory-vs-{x}"] = _against_x(frame, x, "peak_delta_bytes", styles)
            if frame["step_peak_bytes"].notna().any():
                budget = budget or _capacity(frame)
                drawn[f"step-vs-{x}"] = _against_x(frame, x, "step_peak_bytes", styles, budget)
            if frame["time_ms_median"].notna().any():
                drawn[f"time-vs-{x}"] = _against_x(frame, x, "time_ms_median", styles)
                drawn["memory-vs-time"] = _tradeoff(frame, styles, x)
    except BaseException:
        for fig in drawn.values():
            plt.close(fig)
        raise
    for message in {(w.category, str(w.message)): w.message for w in said}.values():
        warnings.warn(message, stacklevel=2)
    return drawn


def _capacity(frame: pd.DataFrame) -> int | None:
    """The memory of the one named GPU target `frame`'s rows are for (None: none, or several)."""
    from cebench.core.targets import BY_NAME as TARGETS

    named = {t for t in frame["device"].dropna().unique() if t in TARGETS}
    return TARGETS[named.pop()].capacity_bytes if len(named) == 1 else None


def plot(frame: pd.DataFrame, out_dir: Path, x: str | None = None, svg: bool = False,
         budget: int | None = None) -> list[Path]:
    """Draw `memory-vs-<x>`, `time-vs-<x>` and `memory-vs-time` from `frame` (rows as
    `results.load` returns them; the last row of a repeated configuration is drawn) as PNG,
    and SVG too with `svg`, into `out_dir`. The two time figures are left out when no row
    was timed (predictions); `step-vs-<x>` is drawn for a model's rows, with `budget`
    (`figures`). Returns the paths written."""
    drawn = figures(frame, x, budget)
    try:
        paths = []
        for ext in ("png", "svg") if svg else ("png",):
            for name, fig in drawn.items():
                path = out_dir / f"{name}.{ext}"
                write_figure(fig, path, "out_dir")
                paths.append(path)
    finally:
        for fig in drawn.values():
            plt.close(fig)
    return paths
