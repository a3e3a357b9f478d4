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
    """One row per named GPU: its memory (bytes), cuBLAS workspace (bytes) and dense BF16 rate (TFLOP/s)."""
    table = Table([Column("name", "target", right=False), Column("model", "GPU", right=False, priority=2),
                   Column("cc", "sm", priority=1), Column("memory", "memory"), Column("bytes", "bytes", priority=1),
                   Column("workspace", "cuBLAS workspace"), Column("bf16", "BF16 dense")],
                  title="cebench targets · for predict, fit and explain --target (cuda: any NVIDIA GPU, no card's "
                        "figures)")
    for t in found:
        table.add_row(t.name, t.model, f"{t.capability[0]}.{t.capability[1]}", format_bytes(t.capacity_bytes),
                      f"{t.capacity_bytes:,}", f"{t.workspace_bytes:,} B", f"{t.bf16_flops / 1e12:,.1f} TFLOP/s")
    return table


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
