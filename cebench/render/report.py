"""The results table: the variants of one shape grouped under a line naming the shape,
with ratios to the workload's baseline variant (`dense`). Built from a results DataFrame,
so `sweep`, `predict` and `show` render the same thing; the values come from
`cebench.analyze.compare.view` (which `show --format csv|json` prints as they are)."""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
from rich.text import Text

from cebench.analyze.compare import NOISY, cell_value, view
from cebench.core.axes import heading
from cebench.core.units import format_bytes, format_ms, format_ms_range, format_sig3
from cebench.losses import variants
from cebench.render.table import Column, ColumnNote, Table
from cebench.store.schema import SHAPE_COLUMNS, Status

NOISE_MARK = "~"
NOISE_SHARE = "noise"  # a loss share outside [0, 100 %]
_STATUS_STYLE = {Status.OK: "green", Status.OOM: "bold red", Status.ERROR: "red", Status.TIMEOUT: "red",
                 Status.UNSUPPORTED: "yellow"}
# The view's columns besides the shape: (key, header, priority; 0 is always shown).
# vs bound / vs floor: the row against what any exact implementation must spend (`cebench.measure.limits`).
_MEMORY = [("variant", "variant", 0), ("ce_chunk", "chunk", 0), ("peak_delta_bytes", "peak Δ", 0),
           ("mem_vs_base", "Δ vs base", 1), ("mem_vs_lower_bound", "vs bound", 3), ("peak_bytes", "peak", 6)]
# A model's training step (`--model`): its whole peak, that against the baseline's, and the loss's share of it.
_MODEL = [("step_peak_bytes", "step peak", 0), ("step_vs_base", "step vs base", 1), ("loss_share", "loss share", 1),
          ("loss_time_share", "loss time", 2)]
# Predicted rows on a named GPU: the time model's step time (`cebench.core.timemodel`), never a measured column.
_PREDICTED = [("predicted_time_ms", "pred. time", 0), ("predicted_vs_base", "pred. vs base", 4),
              ("predicted_tokens_per_s", "pred. tokens/s", 5)]
_TIME = [("time_ms_median", "time", 0), ("time_ms_p25_p75", "p25–p75", 5), ("time_vs_base", "time vs base", 2),
         ("time_vs_floor", "vs floor", 4), ("tflops_per_s", "TFLOP/s", 7), ("tokens_per_s", "tokens/s", 8),
         ("us_per_row", "time/row", 8), ("compile_s", "compile", 9)]


def column_keys(timed: bool | None = True) -> list[str]:
    """The keys of `results_table`'s columns (for `--columns`); `timed`: with its time columns,
    False with its predicted time's, None with both (a file's rows may be either)."""
    times = {True: _TIME, False: _PREDICTED, None: _TIME + _PREDICTED}[timed]
    return [key for key, _, _ in _MEMORY + _MODEL + times] + ["status"]


def _share_cell(share: float | None, noise: bool) -> Text | str:
    """A loss share as a percentage; `NOISE_SHARE` where it fell outside [0, 1]."""
    if noise:
        return Text(NOISE_SHARE, style="bold yellow")
    return "–" if share is None or pd.isna(share) else f"{share:.0%}"


def _ratio(r: float | None) -> Text:
    if r is None or pd.isna(r):
        return Text("–", style="dim")
    return Text(f"{r:.2f}×", style="green" if r < 0.95 else "red" if r > 1.05 else "")


def shape_label(row: Mapping[str, object], multi: bool = True) -> str:
    """The group heading of a row or a point's key columns (`cebench.core.axes.heading`:
    'batch 8 × context 128 · vocab 50,257 · d_model 128', a model's name and step settings
    before, every other axis that is not off after) and (`multi`) the workload, device and dtype."""
    return heading(row) + (f" · {row['workload']} {row['device']} {row['dtype']}" if multi else "")


def results_table(frame: pd.DataFrame, title: str | None = None, unit: str | None = None) -> Table:
    """`frame` (a results CSV's rows) as a `Table`: one group per shape, one row per
    variant and ce_chunk, memory in binary units, the median time marked `~` when noisy.
    Time columns are left out when no row was timed (predictions); why a row is not ok
    is numbered in the status column and spelled out below, as is an ok row's note (what
    the implementation warned, an interpreter). `unit`: memory in that unit
    (`cebench.core.units.BYTE_UNITS`) rather than each cell's own."""
    rows = view(frame)
    timed = rows["time_ms_median"].notna().any()
    predicted = rows["predicted_time_ms"].notna().any()
    modeled = rows["step_peak_bytes"].notna().any()
    specs = (_MEMORY + (_MODEL if modeled else []) + (_TIME if timed else []) + (_PREDICTED if predicted else [])
             + [("status", "status", 0)])
    table = Table([Column(k, h, right=k not in ("variant", "status"), priority=p) for k, h, p in specs], title=title)
    multi = frame[["workload", "device", "dtype"]].drop_duplicates().shape[0] > 1
    reasons: list[str] = []
    shape = None
    for row in rows.to_dict("records"):  # plain dicts: a frame's rows as Series cost ms apiece
        if shape != tuple(row[c] for c in SHAPE_COLUMNS):
            shape = tuple(row[c] for c in SHAPE_COLUMNS)
            table.add_group(shape_label(row, multi))
        status = Text(row["status"], style=_STATUS_STYLE.get(row["status"], ""))
        said = row["error"] if row["status"] != Status.OK else row["note"]
        if said:
            said = f"{row['variant']}: {said}" if row["status"] == Status.OK else said
            if said not in reasons:
                reasons.append(said)
            status.append(f" [{reasons.index(said) + 1}]", style="dim")
        cells: dict[str, Text | str] = {
            "variant": row["variant"], "ce_chunk": "" if pd.isna(row["ce_chunk"]) else f"{int(row['ce_chunk']):,}",
            "peak_delta_bytes": format_bytes(cell_value(row["peak_delta_bytes"]), unit),
            "mem_vs_base": _ratio(row["mem_vs_base"]),
            "mem_vs_lower_bound": format_sig3(cell_value(row["mem_vs_lower_bound"]), "×"),
            "peak_bytes": format_bytes(cell_value(row["peak_bytes"]), unit), "status": status,
            "step_peak_bytes": format_bytes(cell_value(row["step_peak_bytes"]), unit),
            "step_vs_base": _ratio(row["step_vs_base"]),
            "loss_share": _share_cell(row["loss_share"], row["loss_share_noise"]),
            "loss_time_share": _share_cell(row["loss_time_share"], row["loss_time_noise"])}
        if timed:
            median, tps, compile_s = (cell_value(row[c]) for c in ("time_ms_median", "tokens_per_s", "compile_s"))
            cells["time_ms_median"] = Text(format_ms(median)) + Text(NOISE_MARK if row["noisy"] else " ",
                                                                     style="bold yellow")
            p25, p75 = cell_value(row["time_ms_p25"]), cell_value(row["time_ms_p75"])
            cells["time_ms_p25_p75"] = Text(format_ms_range(p25, p75, median), style="dim")
            cells["time_vs_base"] = _ratio(row["time_vs_base"])
            cells["time_vs_floor"] = format_sig3(cell_value(row["time_vs_floor"]), "×")
            cells["tflops_per_s"] = format_sig3(cell_value(row["tflops_per_s"]))
            cells["tokens_per_s"] = "–" if tps is None else f"{tps:,.0f}"
            per_row = cell_value(row["us_per_row"])
            cells["us_per_row"] = format_ms(None if per_row is None else per_row / 1e3)
            cells["compile_s"] = "–" if compile_s is None else f"{compile_s:.1f} s"
        if predicted:
            ms, tps = cell_value(row["predicted_time_ms"]), cell_value(row["predicted_tokens_per_s"])
            cells["predicted_time_ms"] = format_ms(ms) if ms is not None else Text("–", style="dim")
            cells["predicted_vs_base"] = _ratio(row["predicted_vs_base"])
            cells["predicted_tokens_per_s"] = "–" if tps is None else f"{tps:,.0f}"
        table.add_row(*(cells[c.key] for c in table.columns))
    bases = ", ".join(f"{n} ({w})" for w, n in rows.groupby("workload", sort=False)["baseline"].first().items() if n)
    if bases:
        ratios = ", ".join(["Δ vs base", *(["time vs base"] if timed else []),
                            *(["pred. vs base"] if predicted else [])])
        table.notes.append(f"peak Δ = peak − memory live before the step; {ratios}: ratios to {bases} at the same "
                           "shape")
    if modeled:
        table.notes.append("step peak: the whole training step's (parameters, optimizer state, activations, loss); "
                           "loss share: (step peak − the same step's with a stand-in loss) / step peak; loss time: "
                           "(time − that step's time) / time")
        if (rows["loss_share_noise"] | rows["loss_time_noise"]).any():
            table.notes.append(f"{NOISE_SHARE}: the step with a stand-in loss measured more than the whole step, "
                               "which only noise does (other processes loading the machine): no share to show")
    against = []  # the notes on some columns, each said only when its column is shown
    if rows["mem_vs_lower_bound"].notna().any():
        against.append(("mem_vs_lower_bound",
                        "vs bound: peak Δ / lower_bound_bytes, what any exact step must allocate"))
    if timed and rows["time_vs_floor"].notna().any():
        against.append(("time_vs_floor", "vs floor: time / matmul_floor_ms, the step's full-size matmuls timed alone"))
    if timed:
        against.append(("us_per_row", "time/row: time / N (batch × context rows)"))
    if predicted:
        against.append(("predicted_time_ms", "pred. time: the time model's step time on the target (a roofline over "
                                             "the traced ops, calibrated on published rows), not a measurement"))
    if timed and (rows["variant"].str.endswith(variants.COMPILED) & rows["tflops_per_s"].notna()).any():
        against.append(("tflops_per_s", "TFLOP/s of a compiled variant counts its eager twin's FLOPs"))
    if against:
        table.notes.append(ColumnNote(tuple(against)))
    if timed and rows["noisy"].any():
        table.notes.append(f"{NOISE_MARK} noisy: p25–p75 spread over {NOISY:.0%} of the median; "
                           "read its ratios with care")
    table.notes.extend(f"[{i}] {reason}" for i, reason in enumerate(reasons, 1))
    return table


def markdown(table: Table) -> str:
    """`table` as a GitHub-flavoured Markdown table (every column; group lines as bold rows)."""
    def escape(cell: Text | str) -> str:
        return str(cell).replace("|", "\\|").strip()

    lines = [f"**{table.title}**", ""] if table.title else []
    lines.append("| " + " | ".join(c.header for c in table.columns) + " |")
    lines.append("|" + "|".join("---:" if c.right else ":---" for c in table.columns) + "|")
    for row in table.rows:
        if isinstance(row, str):
            lines.append(f"| **{escape(row)}** |" + " |" * (len(table.columns) - 1))
        else:
            lines.append("| " + " | ".join(escape(cell) for cell in row) + " |")
    lines.extend(["", *(n if isinstance(n, str) else n.text() for n in table.notes)] if table.notes else [])
    return "\n".join(lines)
