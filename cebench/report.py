"""The results table: variants of one config grouped together, with ratios to the
workload's baseline (`dense`). Built from a results DataFrame, so `sweep` and `show`
render the same thing."""
from __future__ import annotations

import pandas as pd
from rich.table import Table
from rich.text import Text

from cebench.results import SHAPE_COLUMNS
from cebench.units import format_bytes, format_ms, format_ms_range
from cebench.workloads import BASELINE

_STATUS_STYLE = {"ok": "green", "oom": "bold red", "error": "red", "unsupported": "yellow"}


def _value(x: object) -> float | None:
    return None if pd.isna(x) else float(x)


def _ratio(value: float | None, base: float | None) -> Text:
    if value is None or not base:
        return Text("–", style="dim")
    r = value / base
    style = "green" if r < 0.95 else "red" if r > 1.05 else ""
    return Text(f"{r:.2f}×", style=style)


def _baseline_row(group: pd.DataFrame, workload: str) -> pd.Series | None:
    rows = group[(group["variant"] == BASELINE.get(workload)) & (group["status"] == "ok")]
    return None if rows.empty else rows.iloc[-1]


def results_table(frame: pd.DataFrame, title: str | None = None) -> Table:
    """A rich table of `frame` (a results CSV's rows): one block per shape, one row per
    variant and ce_chunk, memory in binary units, times as median with the p25–p75 spread.
    Time columns are left out when no row was timed (predictions); why a row is not ok
    is numbered in the status column and spelled out in the caption."""
    multi_dtype = frame[["device", "dtype"]].drop_duplicates().shape[0] > 1
    timed = frame["time_ms_median"].notna().any()
    table = Table(title=title, header_style="bold", title_justify="left", caption_justify="left")
    columns = ["b×ctx", "vocab", "d_model"] + (["device\ndtype"] if multi_dtype else []) + \
        ["variant", "ce_chunk", "peak Δ", "vs\ndense", "peak\n(abs)"]
    if timed:
        columns += ["time\nmedian", "p25–p75", "vs\ndense ", "tokens/s", "compile"]
    for name in columns + ["status"]:
        table.add_column(name.strip(), justify="left" if name in ("variant", "device\ndtype", "status") else "right",
                         style="dim" if name == "p25–p75" else None, no_wrap=name == "p25–p75")
    reasons: list[str] = []
    groups = list(frame.groupby(list(SHAPE_COLUMNS), sort=False, dropna=False))
    for gi, (key, group) in enumerate(groups):
        workload, device, dtype, batch, context, vocab, d_model = key
        base = _baseline_row(group, workload)
        base_mem = None if base is None else _value(base["peak_delta_bytes"])
        base_time = None if base is None else _value(base["time_ms_median"])
        for ri, (_, row) in enumerate(group.iterrows()):
            first = ri == 0
            mem, time_ms = _value(row["peak_delta_bytes"]), _value(row["time_ms_median"])
            status = Text(row["status"], style=_STATUS_STYLE.get(row["status"], ""))
            if row["status"] != "ok" and row["error"]:
                if row["error"] not in reasons:
                    reasons.append(row["error"])
                status.append(f" [{reasons.index(row['error']) + 1}]", style="dim")
            cells: list[object] = [f"{batch}×{context}" if first else "",
                                   f"{vocab:,}" if first else "", f"{d_model:,}" if first else ""]
            if multi_dtype:
                cells.append(f"{device} {dtype}" if first else "")
            cells += [row["variant"], "" if pd.isna(row["ce_chunk"]) else f"{row['ce_chunk']:,}",
                      format_bytes(mem), _ratio(mem, base_mem), format_bytes(_value(row["peak_bytes"]))]
            if timed:
                tps, compile_s = _value(row["tokens_per_s"]), _value(row["compile_s"])
                cells += [format_ms(time_ms),
                          format_ms_range(_value(row["time_ms_p25"]), _value(row["time_ms_p75"]), time_ms),
                          _ratio(time_ms, base_time), "–" if tps is None else f"{tps:,.0f}",
                          "–" if compile_s is None else f"{compile_s:.1f} s"]
            table.add_row(*cells, status, end_section=ri == len(group) - 1 and gi < len(groups) - 1)
    if reasons:
        table.caption = "\n".join(f"[{i}] {reason}" for i, reason in enumerate(reasons, 1))
    return table
