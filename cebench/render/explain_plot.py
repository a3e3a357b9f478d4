"""The figure of `cebench explain`, drawn headless (matplotlib's Agg backend).

One panel per explained variant and `ce_chunk`, side by side on one y scale: the bytes the
step holds after each of its allocations and frees, stacked by kind (gradient, saved for
backward, temporary), the backward shaded, the peak marked and labelled with its largest
groups of tensors, and two references drawn across: the full fp32 logits (N × vocab × 4)
and the lower bound (`lower_bound_bytes`: the gradients of h and weight, and the loss).
"""
from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display needed

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from cebench.analyze.explain import GRADIENT, KINDS, SAVED, TEMPORARY, Explanation, group_text, sizes_text  # noqa: E402
from cebench.core.units import format_bytes  # noqa: E402
from cebench.measure.timeline import FORWARD  # noqa: E402
from cebench.render.plot import BOUND_STYLE, REFERENCE, REFERENCE_STYLE, memory_unit, write_figure  # noqa: E402
from cebench.store.schema import PREDICTED  # noqa: E402

COLORS = {GRADIENT: "tab:green", SAVED: "tab:blue", TEMPORARY: "tab:orange"}
LABELS = {GRADIENT: "gradient (of h or weight)", SAVED: "saved for backward", TEMPORARY: "temporary"}
BOUND = "lower bound (gradients of h, weight + loss)"
_PEAK_STYLE: dict[str, Any] = dict(color="black", linewidth=0.9, linestyle=(0, (2, 2)))
BACKWARD_SHADE = "0.92"
CONTRIBUTORS = 3  # groups named at the peak
CHARS_PER_INCH = 12  # characters of the 10-point title a figure's width holds


def panel_title(e: Explanation) -> str:
    """'chunked · ce_chunk 256', its peak and where the step was then (three lines)."""
    name = e.config.variant if e.config.ce_chunk is None else f"{e.config.variant} · ce_chunk {e.config.ce_chunk:,}"
    peak = e.peak_block
    where = "" if peak is None else f" in {peak.phase}"
    node = "" if peak is None or peak.node is None else f"\n({'in ' * (peak.phase == FORWARD)}{peak.node})"
    return f"{name}\npeak Δ {format_bytes(e.peak_delta_bytes)}{where}{node}"


def _peak_label(e: Explanation) -> str:
    """The peak and its largest groups of tensors, one a line."""
    groups = [g for g in e.groups[:CONTRIBUTORS] if g.nbytes >= 0.01 * e.peak_delta_bytes] or e.groups[:1]
    lines = [f"{group_text(g, e.config)}: {format_bytes(g.nbytes)}" for g in groups]
    rest = len(e.groups) - len(groups)
    if rest:
        lines.append(f"+ {rest} smaller group{'s' * (rest > 1)}: "
                     f"{format_bytes(e.breakdown_bytes - sum(g.nbytes for g in groups))}")
    return "\n".join([f"peak Δ {format_bytes(e.peak_delta_bytes)}", *lines])


def _panel(ax: Axes, e: Explanation, scale: int) -> None:
    series = e.live_by_kind()
    events = len(e.timeline.events)
    xs = list(range(events + 1))  # x = i + 1: after event i; x = 0: before the step
    ax.stackplot(xs, [[0.0] + [v / scale for v in series[k]] for k in KINDS], colors=[COLORS[k] for k in KINDS],
                 step="post", linewidth=0, alpha=0.85)
    start = e.timeline.backward_start
    if start is not None:
        ax.axvspan(start + 1, events + 1, color=BACKWARD_SHADE, zorder=0, linewidth=0)
        spans = [(0, start + 1, "forward"), (start + 1, events + 1, "backward")]  # each named, however short
        phases = ax.secondary_xaxis("top")
        phases.set_xticks([(x0 + x1) / 2 for x0, x1, _ in spans], labels=[text for _, _, text in spans])
        phases.tick_params(length=0, labelsize=8, labelcolor="0.3")
    ax.axhline(e.config.logits_fp32_bytes / scale, **REFERENCE_STYLE)
    ax.axhline(e.config.lower_bound_bytes / scale, **BOUND_STYLE)
    if e.peak_event is not None:
        x, y = e.peak_event + 1.5, e.peak_delta_bytes / scale  # the middle of the peak's step
        ax.axvline(x, **_PEAK_STYLE)
        ax.plot([x], [y], marker="v", color="black", markersize=6, linestyle="none", zorder=5)
        right = x > (events + 1) / 2  # the label goes in the top corner away from the peak
        label = ax.annotate(_peak_label(e), (x, y), xytext=(0.03 if right else 0.97, 0.97),
                            textcoords="axes fraction", ha="left" if right else "right", va="top", fontsize=7.5,
                            zorder=6, arrowprops=dict(arrowstyle="-", color="0.4", linewidth=0.8),
                            bbox=dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor="0.7", alpha=0.9))
        label.set_in_layout(False)
    ax.set_xlim(0, events + 1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # events are counted: whole ticks only
    ax.set_title(panel_title(e), fontsize=9)
    ax.set_xlabel("allocations and frees, in order")
    ax.grid(axis="y", alpha=0.3)


def _title(fig: Figure, explanations: Sequence[Explanation]) -> None:
    c = dataclasses.replace(explanations[0].config, ce_chunk=None)  # each panel's title says its own ce_chunk
    how = (f"predicted for {c.device} on meta tensors (dispatcher tracker)" if explanations[0].method == PREDICTED
           else f"{c.device}: allocator events (torch.profiler)")
    inputs = format_bytes(explanations[0].base_bytes)
    lines = ("Memory one loss step (forward + backward) adds, allocation by allocation, stacked by kind",
             f"{sizes_text(c)} · {c.dtype} · {how}",
             f"not drawn: the inputs h, weight, targets ({inputs}), live throughout")
    width = int(fig.get_figwidth() * CHARS_PER_INCH)  # a one-panel figure is narrower than the lines
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in lines), fontsize=10)


def figure(explanations: Sequence[Explanation]) -> Figure:
    """One panel per explanation (same shape, device and dtype), on one y scale. Close it
    with `plt.close`."""
    n = len(explanations)
    ncols = 1 if n == 1 else 2 if n in (2, 4) else 3
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.4 * ncols + 0.6, 4.1 * nrows + 1.6), sharey=True,
                             squeeze=False, layout="constrained")
    top = max(max(e.peak_delta_bytes, e.config.logits_fp32_bytes, e.config.lower_bound_bytes) for e in explanations)
    unit, scale = memory_unit(top)
    flat = list(axes.flat)
    for ax, e in zip(flat, explanations, strict=False):
        _panel(ax, e, scale)
    for ax in flat[n:]:
        ax.set_visible(False)
    flat[0].set_ylim(0, 1.3 * top / scale)  # room above the highest peak for its label
    for ax in axes[:, 0]:
        ax.set_ylabel(f"memory added by the step ({unit})")
    _title(fig, explanations)
    handles: list[Patch | Line2D] = [Patch(color=COLORS[k], alpha=0.85, label=LABELS[k]) for k in reversed(KINDS)]
    handles += [Line2D([], [], label=REFERENCE, **REFERENCE_STYLE), Line2D([], [], label=BOUND, **BOUND_STYLE),
                Line2D([], [], marker="v", label="peak", **_PEAK_STYLE),
                Patch(color=BACKWARD_SHADE, label="backward (shaded)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4 if ncols > 1 else 2),
               fontsize=8, frameon=False)
    return fig


def save(explanations: Sequence[Explanation], path: Path) -> Path:
    """Draw `figure(explanations)` into `path` (.png, .svg or .pdf; its folder made as needed),
    whole or not at all (`UsageError` when it cannot be written)."""
    fig = figure(explanations)
    try:
        write_figure(fig, path, "out")
    finally:
        plt.close(fig)
    return path
