"""Figures from a results CSV, drawn headless with matplotlib (Agg).

- `memory-vs-<x>`: `peak_delta_bytes` (what one step adds) against a parameter, one line
  per variant and `ce_chunk`, with the full fp32 logits (`logits_fp32_bytes`) dashed.
- `time-vs-<x>`: median step time against it, the p25–p75 spread as a band.
- `memory-vs-time`: one point per variant and `ce_chunk`, one panel per configuration.

Parameters that vary besides x split a figure into panels, one per combination. `oom` and
`error` points are red crosses at the top of their panel, never dropped.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display needed

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from cebench.errors import UsageError  # noqa: E402
from cebench.results import FAILED, KEY_COLUMNS, SHAPE_COLUMNS, latest  # noqa: E402

X_PARAMS = ("batch", "context", "vocab", "d_model")
# Each configuration parameter not on the x axis that takes several values splits a
# figure into panels.
PARAMS = SHAPE_COLUMNS
MAX_PANELS = 16
REFERENCE = "fp32 logits (N × vocab × 4)"
_MEMORY_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_FAIL_STYLE = dict(marker="x", color="red", markersize=9, markeredgewidth=2.2, linestyle="none")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")

Style = dict[str, object]  # Line2D keyword arguments of one line: colour, marker, sizes


def default_out_dir(csv_path: Path) -> Path:
    """A folder next to the CSV named after it: results/sweep-1.csv → results/sweep-1/."""
    return csv_path.with_suffix("") if csv_path.suffix else csv_path.with_name(csv_path.name + "-plots")


def select(frame: pd.DataFrame, filters: list[str]) -> pd.DataFrame:
    """Rows matching every 'COLUMN=VALUE[,VALUE...]' filter (values compared as CSV text)."""
    for text in filters:
        column, sep, value = (part.strip() for part in text.partition("="))
        if not sep or not column or not value:
            raise UsageError(f"--filter: '{text}' is not COLUMN=VALUE (example: --filter context=128)")
        if column not in frame.columns:
            raise UsageError(f"--filter: unknown column '{column}' (for example {', '.join(KEY_COLUMNS)})")
        cells = frame[column].map(lambda v: "" if pd.isna(v) else str(v))
        kept = frame[cells.isin({v.strip() for v in value.split(",")})]
        if kept.empty:
            raise UsageError(f"--filter {text}: no row matches; '{column}' takes "
                             f"{', '.join(sorted(set(cells), key=_natural)[:12])}")
        frame = kept
    return frame


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
    return str(value) if param in ("workload", "device", "dtype") else f"{param} {value:,}"


def _panels(frame: pd.DataFrame, by: list[str], x: str | None) -> tuple[list[str], list[tuple[str, pd.DataFrame]]]:
    """Split `frame` on the parameters of `by` that vary: (those parameters, [(panel title,
    rows)]). Too many panels is a `UsageError` naming a `--filter` to give."""
    varying = [p for p in by if frame[p].nunique() > 1]
    if not varying:
        return [], [("", frame)]
    groups = list(frame.groupby(varying, sort=True))
    if len(groups) > MAX_PANELS:
        widest = max(varying, key=lambda p: frame[p].nunique())
        values = sorted(frame[widest].unique())
        besides = f" besides --x {x}" if x else ""
        raise UsageError(f"{len(groups)} panels (more than {MAX_PANELS}): the CSV varies {', '.join(varying)}"
                         f"{besides}; narrow it, e.g. --filter {widest}={values[0]} "
                         f"({widest} takes {', '.join(map(str, values))})")
    titles = [" · ".join(_value_text(p, v) for p, v in zip(varying, key)) for key, _ in groups]
    return varying, list(zip(titles, (g for _, g in groups)))


def _memory_unit(frame: pd.DataFrame) -> tuple[str, int]:
    """The largest binary unit (GiB, MiB, KiB) that the peaks or the fp32 logits reach."""
    top = max(frame["peak_delta_bytes"].fillna(0).max(), frame["logits_fp32_bytes"].max())
    return next(((u, s) for u, s in _MEMORY_UNITS if top >= s), _MEMORY_UNITS[-1])


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


def _title(fig: Figure, what: str, frame: pd.DataFrame, varying: list[str], x: str | None) -> None:
    """Suptitle: what is drawn, then every parameter held fixed (and the machine)."""
    fixed = [p for p in PARAMS if p != x and p not in varying]
    parts = [_value_text(p, frame[p].iloc[0]) for p in fixed]
    parts.insert(min(2, len(parts)), ", ".join(sorted(frame["device_name"].unique())))
    lines = [what, " · ".join(parts)]
    unsupported = frame.loc[frame["status"] == "unsupported"].apply(_line, axis=1).value_counts(sort=False)
    if len(unsupported):
        lines.append("not drawn, unsupported here: " + ", ".join(f"{k} ({n} point{'s' * (n > 1)})"
                                                                 for k, n in unsupported.items()))
    fig.suptitle("\n".join(lines), fontsize=11)


def _x_axis(ax: Axes, x: str, values: list[int]) -> None:
    """Log base 2 for powers of two, log 10 over a wide range, else linear; a tick at
    every measured value."""
    if all(v > 0 and v & (v - 1) == 0 for v in values) and len(values) > 1:
        ax.set_xscale("log", base=2)
    elif len(values) > 1 and max(values) / min(values) >= 10:
        ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(values))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel(x)


def _mark_failures(ax: Axes, failed: pd.DataFrame, x: str | None, styles: dict[str, Style]) -> int:
    """Red crosses at the top of the panel (at their x, or at the right edge without one),
    one row per failing line, each labelled in its line's colour. Returns the rows used."""
    xform = ax.get_xaxis_transform() if x else ax.transAxes
    groups = list(failed.groupby(failed.apply(_line, axis=1), sort=False)) if len(failed) else []
    for i, (label, rows) in enumerate(groups):
        y = 0.95 - 0.07 * i
        xs = sorted(rows[x]) if x else [0.96]
        ax.plot(xs, [y] * len(xs), transform=xform, clip_on=False, zorder=5, **_FAIL_STYLE)
        at = ax.transAxes.inverted().transform(xform.transform((xs[0], y)))[0]
        left = at > 0.6  # label on the side with room: left of a cross near the right edge
        status = "/".join(sorted(rows["status"].unique()))
        ax.annotate(f"{label}: {status}", (xs[0] if left else xs[-1], y), xycoords=xform, fontsize=7,
                    color=styles[label]["color"], va="center", ha="right" if left else "left",
                    xytext=(-8 if left else 8, 0), textcoords="offset points", annotation_clip=False)
    return len(groups)


def _headroom(ax: Axes, failed_rows: int) -> None:
    """y from 0, with room above the data for the rows of failure crosses."""
    ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * (1.12 + 0.08 * failed_rows))


def _legend(fig: Figure, frame: pd.DataFrame, styles: dict[str, Style], extra: list) -> None:
    handles = [Line2D([], [], label=label, **style) for label, style in styles.items()] + extra
    if frame["status"].isin(FAILED).any():
        handles.append(Line2D([], [], label="oom / error (top of panel)", **_FAIL_STYLE))
    ncols = max(1, min(len(handles), int(fig.get_figwidth() // 2.8)))  # ~2.8 in per entry
    fig.legend(handles=handles, loc="outside lower center", ncols=ncols, fontsize=8, frameon=False)


def _styles(labels: list[str]) -> dict[str, Style]:
    """A colour and marker per line; earlier lines drawn wider, so coinciding lines stay visible.
    tab10 without its red, which is kept for failures."""
    palette = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 3]
    return {label: dict(color=palette[i % len(palette)], marker=_MARKERS[i % len(_MARKERS)],
                        markersize=max(9 - 1.5 * i, 4.5), linewidth=max(3.2 - 0.6 * i, 1.4))
            for i, label in enumerate(labels)}


def _against_x(frame: pd.DataFrame, x: str, metric: str, styles: dict[str, Style]) -> Figure:
    """Memory (`peak_delta_bytes`) or time (`time_ms_median`) against `x`."""
    memory = metric == "peak_delta_bytes"
    varying, panels = _panels(frame, [p for p in PARAMS if p != x], x)
    unit, scale = _memory_unit(frame) if memory else ("ms", 1)
    fig, axes = _figure(len(panels))
    xs = sorted(int(v) for v in frame[x].unique())
    for ax, (title, rows) in zip(axes, panels):
        for label, line in rows[rows["status"] == "ok"].groupby(rows.apply(_line, axis=1), sort=False):
            line = line.sort_values(x)
            ax.plot(line[x], line[metric] / scale, **styles[label])
            if not memory:
                ax.fill_between(line[x], line["time_ms_p25"], line["time_ms_p75"], color=styles[label]["color"],
                                alpha=0.2, linewidth=0)
        if memory:
            ref = rows.groupby(x)["logits_fp32_bytes"].first()
            ax.plot(ref.index, ref / scale, linestyle="--", color="0.45", linewidth=1.2)
        _x_axis(ax, x, xs)
        _headroom(ax, _mark_failures(ax, rows[rows["status"].isin(FAILED)], x, styles))
        ax.set_ylabel(f"memory added by the step ({unit})" if memory else "step time (ms)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    step = f"one {frame['workload'].iloc[0]} step" if frame["workload"].nunique() == 1 else "one step"
    what = (f"Peak memory {step} adds (peak_delta_bytes) vs {x}" if memory
            else f"Step time vs {x}: median, band p25–p75")
    _title(fig, what, frame, varying, x)
    extra = ([Line2D([], [], linestyle="--", color="0.45", label=REFERENCE)] if memory
             else [Patch(color="0.6", alpha=0.4, label="p25–p75")])
    _legend(fig, frame, styles, extra)
    return fig


def _tradeoff(frame: pd.DataFrame, styles: dict[str, Style]) -> Figure:
    """Memory against time, one point per variant and ce_chunk, one panel per configuration."""
    varying, panels = _panels(frame, list(PARAMS), None)
    unit, scale = _memory_unit(frame)
    fig, axes = _figure(len(panels))
    for ax, (title, rows) in zip(axes, panels):
        for _, row in rows[rows["status"] == "ok"].iterrows():
            label, t = _line(row), row["time_ms_median"]
            spread = [[t - row["time_ms_p25"]], [row["time_ms_p75"] - t]]
            ax.errorbar([t], [row["peak_delta_bytes"] / scale], xerr=spread, capsize=3, elinewidth=1.5, **styles[label])
        ax.axhline(rows["logits_fp32_bytes"].iloc[0] / scale, linestyle="--", color="0.45", linewidth=1.2)
        ax.set_xlim(left=0, right=ax.get_xlim()[1] * 1.1)
        _headroom(ax, _mark_failures(ax, rows[rows["status"].isin(FAILED)], None, styles))
        ax.set_xlabel("step time, median (ms); bar p25–p75")
        ax.set_ylabel(f"memory added ({unit})")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    _title(fig, "Memory vs time per configuration: lower left is better", frame, varying, None)
    _legend(fig, frame, styles, [Line2D([], [], linestyle="--", color="0.45", label=REFERENCE)])
    return fig


def plot(frame: pd.DataFrame, out_dir: Path, x: str | None = None, svg: bool = False) -> list[Path]:
    """Draw `memory-vs-<x>`, `time-vs-<x>` and `memory-vs-time` from `frame` (rows as
    `results.load` returns them; the last row of a repeated configuration is drawn) as PNG,
    and SVG too with `svg`, into `out_dir`. The two time figures are left out when no row
    was timed (predictions). Returns the paths written."""
    frame = latest(frame)
    if not frame["status"].isin(("ok",) + FAILED).any():
        raise UsageError("nothing to draw: every selected row is unsupported")
    x = x or default_x(frame)
    if x not in X_PARAMS:
        raise UsageError(f"--x: '{x}' is not one of {', '.join(X_PARAMS)}")
    styles = _styles(list(dict.fromkeys(frame.apply(_line, axis=1))))
    figures = {f"memory-vs-{x}": _against_x(frame, x, "peak_delta_bytes", styles)}
    if frame["time_ms_median"].notna().any():
        figures[f"time-vs-{x}"] = _against_x(frame, x, "time_ms_median", styles)
        figures["memory-vs-time"] = _tradeoff(frame, styles)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for ext in ("png", "svg") if svg else ("png",):
            for name, fig in figures.items():
                path = out_dir / f"{name}.{ext}"
                fig.savefig(path, dpi=150)
                paths.append(path)
    except OSError as exc:
        raise UsageError(f"--out-dir {out_dir}: cannot write there ({exc.strerror or exc})") from None
    finally:
        for fig in figures.values():
            plt.close(fig)
    return paths
