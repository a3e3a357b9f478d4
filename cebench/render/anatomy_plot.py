"""The figure of `cebench explain --model`, drawn headless: one horizontal bar per loss
variant and ce_chunk, its predicted step peak stacked by part (parameters, optimizer state,
gradients, what FSDP has in flight, activations, the loss's buffers, the optimizer step's
temporaries, the rest), with the target's memory drawn across where it has one."""
from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display needed

import matplotlib.pyplot as plt  # noqa: E402

from cebench.analyze.anatomy import PARTS, Anatomy  # noqa: E402
from cebench.core.axes import Checkpointing, Compile  # noqa: E402
from cebench.core.units import format_bytes  # noqa: E402
from cebench.render.explain_plot import CHARS_PER_INCH  # noqa: E402
from cebench.render.plot import memory_unit, write_figure  # noqa: E402

COLORS = dict(zip(PARTS, ("tab:gray", "tab:purple", "tab:green", "tab:cyan", "tab:blue", "tab:red", "tab:orange",
                          "0.8"), strict=True))


def label(a: Anatomy) -> str:
    """'chunked · ce_chunk 2,048' or 'dense'."""
    c = a.config
    return c.variant.name if c.ce_chunk is None else f"{c.variant} · ce_chunk {c.ce_chunk:,}"


def save(anatomies: Sequence[Anatomy], path: Path) -> Path:
    """Draw `anatomies` (one model, one shape) to `path` (.png, .svg or .pdf) whole or not at all
    (`UsageError` when it cannot be written); returns it."""
    c = anatomies[0].config
    top = max(a.peak_bytes for a in anatomies)
    capacity = c.device.capacity_bytes
    unit, scale = memory_unit(max(top, capacity or 0))
    fig, ax = plt.subplots(figsize=(9, 1.9 + 0.55 * len(anatomies)), layout="constrained")
    names = [label(a) for a in anatomies][::-1]
    for part in PARTS:
        left = [sum(a.parts[p] for p in PARTS[:PARTS.index(part)]) / scale for a in anatomies][::-1]
        width = [a.parts[part] / scale for a in anatomies][::-1]
        ax.barh(names, width, left=left, color=COLORS[part], label=part, height=0.6)
    for y, a in enumerate(anatomies[::-1]):
        ax.text(a.peak_bytes / scale, y, f" {format_bytes(a.peak_bytes)} ({a.when})", va="center", fontsize=8)
    if capacity:
        ax.axvline(capacity / scale, color="black", linestyle=(0, (4, 2)), linewidth=1)
        ax.text(capacity / scale, 0.03, f"{c.device} memory ", ha="right", va="bottom", fontsize=8,
                transform=ax.get_xaxis_transform())  # inside the axes, left of the line, whatever the bars
    ax.set_xlabel(f"predicted step peak ({unit})")
    ax.set_xlim(0, max(top, capacity or 0) / scale * 1.25)
    checkpointing = "blocks checkpointed" if c.activation_checkpointing == Checkpointing.BLOCKS else "no checkpointing"
    sharded = f" · {c.world.label} (per rank)" if c.world.sharded else ""
    sharded = (" · compiled blocks" if c.compile == Compile.BLOCKS else "") + sharded
    title = (f"{c.model} · {c.optimizer} · {checkpointing}{sharded} · batch {c.batch} × context {c.context} · "
             f"{c.dtype} · {c.device}")
    chars = int(ax.get_position().width * fig.get_figwidth() * CHARS_PER_INCH)  # centred over the axes alone
    ax.set_title(textwrap.fill(title, chars, break_long_words=False), fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), ncols=len(PARTS), fontsize=8, loc="outside lower center",
               frameon=False)
    try:
        write_figure(fig, path, "out", dpi=120)
    finally:
        plt.close(fig)
    return path
