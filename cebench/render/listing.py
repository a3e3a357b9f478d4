"""The tables of `cebench targets` and `cebench models`: the named GPU targets and the preset
models, one row each."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cebench.core.units import format_bytes
from cebench.render.table import Column, Table

if TYPE_CHECKING:
    from cebench.core.targets import Target
    from cebench.models.model import Model


def targets_table(found: Sequence[Target]) -> Table:
    """One row per named GPU: its memory (bytes), cuBLAS workspace (bytes), dense BF16 and FP32
    rates (TFLOP/s), memory bandwidth (TB/s) and the family whose time-model constants apply."""
    from cebench.core import timemodel

    table = Table([Column("name", "target", right=False), Column("model", "GPU", right=False, priority=3),
                   Column("cc", "sm", priority=2), Column("memory", "memory"), Column("bytes", "bytes", priority=4),
                   Column("workspace", "cuBLAS ws", priority=1), Column("bf16", "BF16 TFLOP/s"),
                   Column("fp32", "FP32", priority=2), Column("fp8", "FP8", priority=2), Column("bandwidth", "TB/s"),
                   Column("family", "time model", right=False)],
                  title="cebench targets · for predict, fit and explain --target (cuda: any NVIDIA GPU, no card's "
                        "figures)")
    for t in found:
        constants, borrowed = timemodel.efficiency(t)
        family = t.arch if constants is not None and not borrowed else f"{t.arch} (none)" if constants is None \
            else f"{t.arch} (as {timemodel.BORROWED[t.arch]})"
        table.add_row(t.name, t.model, f"{t.capability[0]}.{t.capability[1]}", format_bytes(t.capacity_bytes),
                      f"{t.capacity_bytes:,}", f"{t.workspace_bytes:,} B", f"{t.bf16_flops / 1e12:,.1f}",
                      f"{t.fp32_flops / 1e12:,.1f}", "–" if t.fp8_flops is None else f"{t.fp8_flops / 1e12:,.1f}",
                      f"{t.hbm_bytes_per_s / 1e12:.2f}", family)
    return table


def families_table() -> Table:
    """One row per GPU family of the time model: its fitted efficiencies (a share of the peak
    rate or bandwidth; launch in µs); a family without its own, dashes."""
    from cebench.core import timemodel

    table = Table([Column("family", "family", right=False), Column("matmul", "matmul"),
                   Column("matmul_memory", "mm bytes"), Column("elementwise", "elementwise"),
                   Column("reduction", "reduction"), Column("fused", "fused"), Column("launch", "launch")],
                  title="time model · efficiencies per GPU family (results/calibrate_time.py)")
    for family, c in sorted(timemodel.FAMILIES.items()):
        table.add_row(family, f"{c.matmul:.2f}", f"{c.matmul_memory:.2f}", f"{c.elementwise:.2f}",
                      f"{c.reduction:.2f}", f"{c.fused:.2f}", f"{c.launch_us:.1f} µs")
    for family in timemodel.BORROWED:
        table.add_row(family, *(["–"] * 6))
    return table


def models_notes(found: Sequence[Model]) -> list[str]:
    """What each preset in `found` is predicted and measured as, one line each
    (`Model.modelled_as`), then what ``hf:`` and a Hugging Face id name."""
    lines = [f"{m.name}: {m.modelled_as}" for m in found]
    lines.append("fused SDPA: torch's scaled_dot_product_attention, its kernel by the target: flash (bf16, fp16) or "
                 "memory-efficient (fp32) on every named GPU, the CPU's flash kernel on a CPU. hf:<preset> is the "
                 "transformers model of that preset instead, with the attention transformers picks: sdpa, or eager "
                 "where the model has none (Gemma 2: softcapped, every block's scores materialised, so fewer "
                 "sequences fit). A preset is also named by its Hugging Face id, as cited below (case ignored).")
    return lines


def models_table(found: Sequence[Model]) -> Table:
    """One row per preset model: its type, blocks, widths, heads, vocabulary, tied head and parameter count."""
    table = Table([Column("name", "model", right=False), Column("type", "type", right=False),
                   Column("layers", "blocks"), Column("d_model", "d_model"), Column("heads", "heads / kv"),
                   Column("d_ff", "MLP", priority=1), Column("vocab", "vocab"), Column("tied", "tied", right=False),
                   Column("n_params", "parameters")],
                  title="cebench models · presets (a model is also a config.json path, either after hf: for the "
                        "transformers model, or file.py:build)")
    for m in found:
        s = m.spec
        assert s is not None  # a preset is a config.json: it has a spec
        table.add_row(m.name, s.model_type, str(s.n_layers), f"{s.d_model:,}", f"{s.n_heads}/{s.n_kv_heads}",
                      f"{s.d_ff:,}", f"{s.vocab:,}", "yes" if s.tied else "no", f"{m.n_params:,}")
    return table
