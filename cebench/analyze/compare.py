"""Comparisons of results rows: each row's ratios to its shape's baseline variant, to the
lower bound and the matmul floor, a model's loss share, and whether its time is noisy.
Values only (floats, None where undefined); `cebench.render.report` formats them."""
from __future__ import annotations

from typing import Any

import pandas as pd

from cebench.losses import variants
from cebench.store.schema import SHAPE_COLUMNS, Status

NOISY = 0.10  # a point whose p25–p75 spread exceeds this fraction of its median is marked


def cell_value(x: Any) -> float | None:
    """A numeric cell of a results frame as a float; None when empty."""
    return None if pd.isna(x) else float(x)


def _over(x: float | None, y: float | None) -> float | None:
    """x / y, or None when either is missing or y is 0."""
    return x / y if x is not None and y else None


def _share(step: float | None, body: float | None) -> float | None:
    return _over(step - body, step) if step is not None and body is not None else None


def loss_share(step: float | None, body: float | None) -> float | None:
    """(step − body) / step: the loss's share of a model's training step, from its peak
    bytes (or time in ms) beside the same step's with a stand-in loss (`body`); None when
    either is missing, `step` is 0, or the share is no share at all (`share_is_noise`)."""
    share = _share(step, body)
    return None if share is None or not 0 <= share <= 1 else share


def share_is_noise(step: float | None, body: float | None) -> bool:
    """Whether (step − body) / step falls outside [0, 1]: the step with a stand-in loss
    measured longer (or larger) than the whole step, which only noise does (a busy machine's
    timings), so there is no share to show."""
    share = _share(step, body)
    return share is not None and not 0 <= share <= 1


def noisy(row: pd.Series | dict[str, Any]) -> bool:
    """Whether the row's p25–p75 spread is more than `NOISY` of its median."""
    median, p25, p75 = (cell_value(row[c]) for c in ("time_ms_median", "time_ms_p25", "time_ms_p75"))
    if median is None or p25 is None or p75 is None:
        return False
    return median > 0 and (p75 - p25) > NOISY * median


def view(frame: pd.DataFrame) -> pd.DataFrame:
    """The table's rows as values: every column of each row (grouped by shape), then the
    baseline variant's name (`baseline`) and the row's ratios to it at the same shape
    (`mem_vs_base`, `time_vs_base`, `predicted_vs_base` of a predicted time; a model's step:
    `step_vs_base`, and `loss_share` = (step − body peak) / step peak, `loss_time_share`
    likewise in time, each None and its `_noise` flag set where it falls outside [0, 1]), to
    the lower bound (`mem_vs_lower_bound` = peak_delta_bytes / lower_bound_bytes) and to the
    matmul floor (`time_vs_floor` = time_ms_median / matmul_floor_ms), the time per row of h
    (`us_per_row` = time_ms_median × 1000 / tokens, in µs: a step's cost per token, which grows with N where its work is
    superlinear), and `noisy`. A row whose kernels ran under an
    interpreter (`variants.INTERPRETED`) is compared with nothing: its ratios are empty."""
    groups: dict[tuple[object, ...], list[dict[str, Any]]] = {}  # by shape, in order of first appearance
    for record in frame.to_dict("records"):
        key = tuple(None if pd.isna(record[c]) else record[c] for c in SHAPE_COLUMNS)
        groups.setdefault(key, []).append(record)
    rows = []
    for group in groups.values():  # plain dicts: a frame's per-group indexing costs ms a group
        baseline = variants.baseline(group[0]["workload"])
        name = None if baseline is None else baseline.name
        base = next((r for r in reversed(group) if r["variant"] == name and r["status"] == Status.OK), None)
        base_mem, base_time, base_step, base_predicted = (
            None if base is None else cell_value(base[c])
            for c in ("peak_delta_bytes", "time_ms_median", "step_peak_bytes", "predicted_time_ms"))
        for row in group:
            mem, time_ms = cell_value(row["peak_delta_bytes"]), cell_value(row["time_ms_median"])
            step, body = cell_value(row["step_peak_bytes"]), cell_value(row["body_peak_bytes"])
            body_ms = cell_value(row["body_time_ms"])
            note = "" if pd.isna(row.get("note", "")) else str(row.get("note", ""))
            compared = not note.startswith(variants.INTERPRETED)
            rows.append({
                **row, "step_peak_bytes": step, "body_peak_bytes": body, "time_ms_median": time_ms,
                "note": note, "baseline": name, "mem_vs_base": _over(mem, base_mem) if compared else None,
                "mem_vs_lower_bound": _over(mem, cell_value(row["lower_bound_bytes"])) if step is None else None,
                "step_vs_base": _over(step, base_step) if compared else None,
                "loss_share": loss_share(step, body) if compared else None,
                "loss_share_noise": compared and share_is_noise(step, body),
                "loss_time_share": loss_share(time_ms, body_ms) if compared else None,
                "loss_time_noise": compared and share_is_noise(time_ms, body_ms),
                "time_vs_base": _over(time_ms, base_time) if compared else None,
                "predicted_vs_base": _over(cell_value(row["predicted_time_ms"]), base_predicted),
                "time_vs_floor": _over(time_ms, cell_value(row["matmul_floor_ms"])) if compared else None,
                "us_per_row": _over(None if time_ms is None else time_ms * 1e3, cell_value(row["tokens"])),
                "noisy": noisy(row),
            })
    return pd.DataFrame(rows)
