"""The results table: the variants of one shape grouped under a line naming the shape,
with ratios to the workload's baseline variant (`dense`). Built from a results DataFrame,
so `sweep`, `predict` and `show` render the same thing; the values come from
`cebench.analyze.compare.view` (which `show --format csv|json` prints as they are)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
@dataclass(frozen=True)
class _Kinds:
    """Which kinds of row a results table holds: timed (measured), predicted on a named GPU
    (a predicted time), of a model's step: which columns it has (`Column.when`)."""

    timed: bool
    predicted: bool
    modeled: bool


@dataclass(frozen=True)
class _Row:
    """What one row of a results table is read from: the row (`compare.view`'s, a plain
    dict), memory's `unit`, and why each row is not ok or what an ok one said (`reasons`,
    numbered in the notes; added to here)."""

    row: dict[str, Any]
    unit: str | None
    reasons: list[str]

    def bytes(self, column: str) -> str:
        return format_bytes(cell_value(self.row[column]), self.unit)

    def ratio(self, column: str) -> Text:
        return _ratio(self.row[column])

    def value(self, column: str) -> Any:
        return cell_value(self.row[column])


def _status(r: _Row) -> Text:
    """The row's status, with the number of what it said (its error; an ok row's note) in `reasons`."""
    row = r.row
    status = Text(row["status"], style=_STATUS_STYLE.get(row["status"], ""))
    said = row["error"] if row["status"] != Status.OK else row["note"]
    if said:
        said = f"{row['variant']}: {said}" if row["status"] == Status.OK else said
        if said not in r.reasons:
            r.reasons.append(said)
        status.append(f" [{r.reasons.index(said) + 1}]", style="dim")
    return status


def _median(r: _Row) -> Text:
    return Text(format_ms(r.value("time_ms_median"))) + Text(NOISE_MARK if r.row["noisy"] else " ", style="bold yellow")


def _count(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _timed(kinds: _Kinds) -> bool:
    return kinds.timed


def _predicted(kinds: _Kinds) -> bool:
    return kinds.predicted


def _modeled(kinds: _Kinds) -> bool:
    return kinds.modeled


# The view's columns besides the shape, each declared once in the order shown: key (what --columns names), header,
# its cell, priority (0 is always shown) and which tables have it (`_Kinds`). vs bound / vs floor: the row against
# what any exact implementation must spend (`cebench.measure.limits`); a model's training step (`--model`): its whole
# peak, that against the baseline's, and the loss's share of it; predicted rows on a named GPU: the time model's step
# time (`cebench.core.timemodel`), never a measured column.
_STATUS = Column("status", "status", right=False, read=_status)
_COLUMNS: tuple[Column, ...] = (
    Column("variant", "variant", right=False, read=lambda r: r.row["variant"]),
    Column("ce_chunk", "chunk", read=lambda r: "" if pd.isna(r.row["ce_chunk"]) else f"{int(r.row['ce_chunk']):,}"),
    Column("peak_delta_bytes", "peak Δ", read=lambda r: r.bytes("peak_delta_bytes")),
    Column("mem_vs_base", "Δ vs base", priority=1, read=lambda r: r.ratio("mem_vs_base")),
    Column("mem_vs_lower_bound", "vs bound", priority=3,
           read=lambda r: format_sig3(r.value("mem_vs_lower_bound"), "×")),
    Column("peak_bytes", "peak", priority=6, read=lambda r: r.bytes("peak_bytes")),
    Column("step_peak_bytes", "step peak", read=lambda r: r.bytes("step_peak_bytes"), when=_modeled),
    Column("step_vs_base", "step vs base", priority=1, read=lambda r: r.ratio("step_vs_base"), when=_modeled),
    Column("loss_share", "loss share", priority=1, when=_modeled,
           read=lambda r: _share_cell(r.row["loss_share"], r.row["loss_share_noise"])),
    Column("loss_time_share", "loss time", priority=2, when=_modeled,
           read=lambda r: _share_cell(r.row["loss_time_share"], r.row["loss_time_noise"])),
    Column("time_ms_median", "time", read=_median, when=_timed),
    Column("time_ms_p25_p75", "p25–p75", priority=5, when=_timed,
           read=lambda r: Text(format_ms_range(r.value("time_ms_p25"), r.value("time_ms_p75"),
                                               r.value("time_ms_median")), style="dim")),
    Column("time_vs_base", "time vs base", priority=2, read=lambda r: r.ratio("time_vs_base"), when=_timed),
    Column("time_vs_floor", "vs floor", priority=4, read=lambda r: format_sig3(r.value("time_vs_floor"), "×"),
           when=_timed),
    Column("tflops_per_s", "TFLOP/s", priority=7, read=lambda r: format_sig3(r.value("tflops_per_s")), when=_timed),
    Column("tokens_per_s", "tokens/s", priority=8, read=lambda r: _count(r.value("tokens_per_s")), when=_timed),
    Column("us_per_row", "time/row", priority=8, when=_timed,
           read=lambda r: format_ms(None if (per_row := r.value("us_per_row")) is None else per_row / 1e3)),
    Column("compile_s", "compile", priority=9, when=_timed,
           read=lambda r: "–" if (s := r.value("compile_s")) is None else f"{s:.1f} s"),
    Column("predicted_time_ms", "pred. time", when=_predicted,
           read=lambda r: Text("–", style="dim") if (ms := r.value("predicted_time_ms")) is None else format_ms(ms)),
    Column("predicted_vs_base", "pred. vs base", priority=4, read=lambda r: r.ratio("predicted_vs_base"),
           when=_predicted),
    Column("predicted_tokens_per_s", "pred. tokens/s", priority=5, when=_predicted,
           read=lambda r: _count(r.value("predicted_tokens_per_s"))),
    _STATUS,
)


def column_keys(timed: bool | None = True) -> list[str]:
    """The keys of `results_table`'s columns (for `--columns`); `timed`: with its time columns,
    False with its predicted time's, None with both (a file's rows may be either)."""
    kinds = _Kinds(timed=timed is not False, predicted=timed is not True, modeled=True)
    return [c.key for c in _COLUMNS if c.when is None or c.when(kinds)]


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


def _raw(key: str) -> Column:
    """A column that shows the CSV's own cell of `key` as it is (`show --columns` asks for any)."""
    return Column(key, key, read=lambda r: "" if pd.isna(value := r.row.get(key)) else f"{value}")


def results_table(frame: pd.DataFrame, title: str | None = None, unit: str | None = None,
                  raw: Sequence[str] = ()) -> Table:
    """`frame` (a results CSV's rows) as a `Table`: one group per shape, one row per
    variant and ce_chunk, memory in binary units, the median time marked `~` when noisy.
    Time columns are left out when no row was timed (predictions); why a row is not ok
    is numbered in the status column and spelled out below, as is an ok row's note (what
    the implementation warned, an interpreter). `unit`: memory in that unit
    (`cebench.core.units.BYTE_UNITS`) rather than each cell's own. `raw`: the CSV's own columns
    to show too, each as its cells are (before the status)."""
    rows = view(frame)
    timed = rows["time_ms_median"].notna().any()
    predicted = rows["predicted_time_ms"].notna().any()
    modeled = rows["step_peak_bytes"].notna().any()
    kinds = _Kinds(timed, predicted, modeled)
    shown = [c for c in _COLUMNS if c is not _STATUS] + [_raw(k) for k in raw if k not in column_keys(None)]
    table = Table.of([*shown, _STATUS], kinds, title=title)
    multi = frame[["workload", "device", "dtype"]].drop_duplicates().shape[0] > 1
    reasons: list[str] = []
    shape = None
    for row in rows.to_dict("records"):  # plain dicts: a frame's rows as Series cost ms apiece
        if shape != tuple(row[c] for c in SHAPE_COLUMNS):
            shape = tuple(row[c] for c in SHAPE_COLUMNS)
            table.add_group(shape_label(row, multi))
        table.add(_Row(row, unit, reasons))
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
