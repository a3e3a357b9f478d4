"""`cebench verify`'s tables, from `verify`'s answer: the parity matrix per dtype, the edge
cases, the failures (or every setting), and the samplers' chi-square tests."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.text import Text

from cebench.core.axes import SEMANTICS
from cebench.core.config import LOSS
from cebench.render.table import Column, Table

if TYPE_CHECKING:
    from cebench.analyze.verify import LossCheck, SamplerCheck, Setting


def _verdict(passed: bool | None) -> Text:
    if passed is None:
        return Text("n/a", style="dim")
    return Text("pass", style="green") if passed else Text("FAIL", style="bold red")


def _table(title: str, specs: list[tuple[str, str, bool, int]]) -> Table:
    """A `cebench.render.table.Table` of (key, header, right-justified, priority) columns."""
    return Table([Column(k, h, right=r, priority=p) for k, h, r, p in specs], title=title)


def _cell(checks: list[LossCheck]) -> Text:
    """One matrix cell: FAIL if a case failed, pass if all passed, – where unsupported,
    skip where Triton's interpreter cannot run it, n/a where no target is left."""
    from cebench.analyze.verify import NO_TARGET

    if any(c.passed is False for c in checks):
        return Text("FAIL", style="bold red")
    if checks and all(c.passed for c in checks):
        return Text("pass", style="green")
    if any(c.outcome == NO_TARGET for c in checks):
        return Text("n/a", style="dim")
    return Text("skip" if any(c.skipped for c in checks) else "–", style="dim")


def matrix_table(checks: list[LossCheck], settings: list[Setting], dtype: str) -> Table:
    """Variants down, settings across: each cell the verdict over the three shapes."""
    shaped = [c for c in checks if c.dtype == dtype and not c.case.edge]
    names = list(dict.fromkeys(c.shown for c in shaped))
    table = _table(f"Parity with float64 · {dtype} · loss, ∇h and ∇weight ≤ {shaped[0].tolerance:.0e} (max-norm "
                   "relative error) at 3 shapes",
                   [("variant", "variant", False, 0)] + [(s.short, s.short, True, 0) for s in settings])
    for name in names:
        table.add_row(name, *(_cell([c for c in shaped if c.shown == name and c.setting == s]) for s in settings))
    legend = "; ".join(["off = every semantics off", *_legend(settings)])
    table.notes.append(f"Columns: {legend}. –: the variant does not support it (an unsupported row in a sweep); "
                       "skip: Triton's interpreter cannot run it on this CPU; n/a: every target ignored at a shape.")
    if any(c.workload != LOSS for c in shaped):
        table.notes.append("· logits: the variant's form on given N × vocab logits (--workload logits): its ∇h is the "
                           "logits' gradient, and there is no ∇weight.")
    return table


def _legend(settings: list[Setting]) -> list[str]:
    """['ign = --ignore-frac', 'sum, none = --reduction']: what the headers abbreviate."""
    parts = []
    for axis in SEMANTICS:
        values = [v for s in settings for k, v in s.values if k == axis.name]
        if values:
            prefix = axis.short.replace("{:g}", "").replace("{}", "").strip()
            parts.append(f"{prefix or ', '.join(map(axis.text, values))} = {axis.flag}")
    return parts


def _footnote(notes: list[str], text: str) -> str:
    """' [k]', `text` numbered among `notes` (added once)."""
    if text not in notes:
        notes.append(text)
    return f" [{notes.index(text) + 1}]"


def edge_table(checks: list[LossCheck]) -> Table:
    """What each variant does with no rows and with every target ignored (torch's mean is
    NaN there: 0/0); an exception's message is a numbered note."""
    edges = [c for c in checks if c.case.edge]
    cases = list(dict.fromkeys(c.case.name for c in edges))
    table = _table("Edge cases (torch's mean over no targets is NaN: 0 / 0)",
                   [("variant", "variant", False, 0), ("dtype", "dtype", False, 0)]
                   + [(name, name, False, 0) for name in cases])
    notes: list[str] = []
    for variant, dtype in dict.fromkeys((c.shown, c.dtype) for c in edges):
        cells = []
        for name in cases:
            c = next(c for c in edges if (c.shown, c.dtype, c.case.name) == (variant, dtype, name))
            style = "" if c.passed is None else "green" if c.passed else "bold red"
            text = c.outcome
            if text.startswith("raises "):
                kind = text.split(":")[0]
                text = kind + _footnote(notes, f"{variant} · {name}: {text}")
            elif c.note:
                text += _footnote(notes, f"{variant} · {name}: {c.note}")
            cells.append(Text(text, style=style))
        table.add_row(variant, dtype, *cells)
    table.notes += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return table


def detail_table(checks: list[LossCheck], title: str) -> Table:
    """One row per variant, dtype and setting: the largest errors over its shapes beside
    the limit, the verdict, and (as numbered notes) what a mismatch looks like."""
    table = _table(title, [("variant", "variant", False, 0), ("setting", "setting", False, 0),
                           ("dtype", "dtype", False, 2), ("loss", "loss", True, 0), ("grad_h", "∇h", True, 0),
                           ("grad_weight", "∇weight", True, 0), ("limit", "limit", False, 1),
                           ("result", "result", False, 0)])
    notes: list[str] = []
    for variant, dtype, setting in dict.fromkeys((c.shown, c.dtype, c.setting) for c in checks):
        group = [c for c in checks if (c.shown, c.dtype, c.setting) == (variant, dtype, setting)]
        errors = [f"{max(c.errors[q] for c in group):.1e}" if all(q in c.errors for c in group) else ""
                  for q in ("loss", "grad h", "grad weight")]
        result = _cell(group)
        failed = [c.case.name for c in group if c.passed is False]
        said = "; ".join(dict.fromkeys(c.note for c in group if c.note))
        if failed and len(failed) < len(group):
            said = f"at {', '.join(failed)}" + (f": {said}" if said else "")
        if said:
            result.append(_footnote(notes, f"{variant} · {setting.label}: {said}"))
        table.add_row(variant, setting.label, dtype, *errors, f"≤ {group[0].tolerance:.0e}", result)
    table.notes += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return table


def _by_setting(losses: list[LossCheck], which: Callable[[LossCheck], bool]) -> list[str]:
    """The checks `which` picks, one part per variant and setting (and dtype, where verify
    checked more than one) with their number of shapes: 'chunked · 25% ignored at 3 shapes'."""
    dtypes = len({c.dtype for c in losses}) > 1
    picked: dict[str, int] = {}
    for c in losses:
        if which(c):
            key = f"{c.shown} · {c.setting.label}" + (f" · {c.dtype}" if dtypes else "")
            picked[key] = picked.get(key, 0) + 1
    return [f"{key} at {n} shape{'s' * (n > 1)}" for key, n in picked.items()]


def failures_text(losses: list[LossCheck], samplers: list[SamplerCheck]) -> str:
    """What failed, per variant and setting (`_by_setting`), and a sampler's 'dense-sample's
    draws'. The checks a count of failed checks counts."""
    return "; ".join(_by_setting(losses, lambda c: c.passed is False)
                     + [f"{c.variant}'s draws" for c in samplers if c.passed is False])


def skips_text(losses: list[LossCheck]) -> str:
    """What was `skipped`, per variant and setting (`_by_setting`); '' when nothing was."""
    return "; ".join(_by_setting(losses, lambda c: c.skipped))


def sampler_table(checks: list[SamplerCheck]) -> Table:
    """One row per sampler: chi-square, degrees of freedom and p-value."""
    table = _table("Claim: chunked sampling draws from the same distribution as one dense multinomial over "
                   "softmax(logits / T)",
                   [("variant", "variant", False, 0), ("vocab", "vocab", True, 2), ("ce_chunk", "ce_chunk", True, 2),
                    ("T", "T", True, 2), ("draws", "draws", True, 1), ("chi2", "χ²", True, 0), ("dof", "dof", True, 0),
                    ("p", "p-value", True, 0), ("limit", "limit", False, 1), ("result", "result", False, 0),
                    ("note", "note", False, 3)])
    for c in checks:
        table.add_row(c.variant, str(c.case.vocab), f"{c.case.ce_chunk:,}", f"{c.case.temperature:g}",
                      f"{c.case.rows:,}", f"{c.statistic:.1f}", str(c.dof), f"{c.p_value:.3g}",
                      f"≥ {c.floor:g}", _verdict(c.passed), Text(c.note, style="dim"))
    return table


def shown_table(checks: list[LossCheck], details: bool) -> Table | None:
    """The detail table of the shaped checks that failed, skipped or warned (`details`: of
    every one); None when there are none."""
    from cebench.analyze.verify import NO_TARGET

    shown = [c for c in checks if not c.case.edge and (details or c.passed is False or c.warned
                                                       or c.skipped or c.outcome == NO_TARGET)]
    return detail_table(shown, "Every setting" if details else "Failures, skips and warnings") if shown else None


def reference_note() -> str:
    """What the checks compare with: the float64 reference and the cases' vocab and d_model."""
    from cebench.analyze.verify import LOSS_CASES

    case = LOSS_CASES[0]
    return (f"Reference: float64, written out with torch's definitions, on the same dtype-rounded inputs; vocab "
            f"{case.vocab}, d_model {case.d_model}.\n")
