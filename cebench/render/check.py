"""`cebench check`'s table and verdict line, from a `CheckReport`."""
from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from rich.text import Text

from cebench.core.units import format_bytes, format_ms
from cebench.render.table import Column, Table

if TYPE_CHECKING:
    from cebench.analyze.check import CheckReport


def _percent(fraction: Fraction) -> str:
    return f"{float(fraction * 100):g}%"


def check_table(report: CheckReport, unit: str | None = None) -> Table:
    """Every regressed, improved and missing point of a `cebench.analyze.check.CheckReport`, one row
    each, grouped under its shape; memory in `unit` (`cebench.core.units.BYTE_UNITS`; None: each
    number its own)."""
    from cebench.analyze.check import MEMORY, TIME, Finding
    from cebench.render.report import shape_label

    table = Table([Column("verdict", "verdict", right=False), Column("variant", "variant", right=False),
                   Column("ce_chunk", "chunk"), Column("metric", "metric", right=False),
                   Column("baseline", "baseline"), Column("results", "results"), Column("change", "change"),
                   Column("p", "p", priority=1), Column("detail", "detail", right=False, priority=2)])
    missing_style = "bold red" if report.strict else "yellow"
    items = ([(Text("regressed", style="bold red"), f) for f in report.regressed]
             + [(Text("improved", style="green"), f) for f in report.improved]
             + [(Text(f"only in {m.only_in}", style=missing_style), m) for m in report.missing])
    shape = None
    for verdict, item in sorted(items, key=lambda vi: shape_label(vi[1].config)):
        if shape_label(item.config) != shape:
            shape = shape_label(item.config)
            table.add_group(shape)
        c = item.config
        cells: list[Text | str] = [verdict, str(c["variant"]), "" if c["ce_chunk"] is None else f"{c['ce_chunk']:,}"]
        if isinstance(item, Finding):
            formats: dict[str, Callable[[Any], str]] = {MEMORY: functools.partial(format_bytes, unit=unit),
                                                        TIME: format_ms}
            fmt = formats.get(item.metric, str)
            change = "" if item.change is None else f"{item.change:+.1%}"
            detail = f"{int(item.current) - int(item.baseline):+,} B" if item.metric == MEMORY else ""
            cells += [{MEMORY: "peak Δ", TIME: "time"}.get(item.metric, item.metric), fmt(item.baseline),
                      fmt(item.current), change, "" if item.p_value is None else f"{item.p_value:.2g}", detail]
        else:
            cells += ["", "", "", "", "", item.detail]
        table.add_row(*cells)
    return table


def summary(report: CheckReport) -> Text:
    """'PASS: …' or 'FAIL: …' with the counts and the tolerances applied."""
    from cebench.analyze.check import ALPHA

    time = ("time not gated" if report.time_tol is None
            else f"time tolerance {_percent(report.time_tol)} (Mann-Whitney p < {ALPHA:g}) on {report.timed} "
                 "points timed on both sides" if report.timed
            else f"time tolerance {_percent(report.time_tol)}, but no point was timed on both sides: no time compared")
    strict = " (--strict: each one fails)" if report.strict and report.missing else ""
    verdict = Text("PASS" if report.passed else "FAIL", style="bold green" if report.passed else "bold red")
    return verdict.append(f": {report.matched} points matched; {len(report.regressed)} regressed, "
                          f"{len(report.improved)} improved, {len(report.missing)} missing{strict}; "
                          f"peak Δ tolerance {_percent(report.mem_tol)}, {time}", style="")
