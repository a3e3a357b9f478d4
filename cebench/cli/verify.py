"""`cebench verify`: the parity matrix of the loss variants and the samplers' chi-square
tests; exit 1 when a check fails."""
from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.text import Text

from cebench.cli.app import command, out, print_table
from cebench.cli.options import DEVICE_HELP, Columns, DeviceAlias, Temperature, VariantNames, Wide, one_name, with_axes
from cebench.core.axes import AXES, SEMANTICS, VERIFIED
from cebench.render.table import Column, Table

if TYPE_CHECKING:
    from cebench.analyze.verify import LossCheck, SamplerCheck, Setting

# What verify does not take (`Axis.verify` is None): its shapes are its own; a step's steady state and a model's
# step are not a loss's semantics (verify checks values, which they do not change).
NOT_VERIFIED = tuple(a.name for a in AXES if a not in VERIFIED)


def _verdict(passed: bool | None) -> Text:
    if passed is None:
        return Text("n/a", style="dim")
    return Text("pass", style="green") if passed else Text("FAIL", style="bold red")


def _table(title: str, specs: list[tuple[str, str, bool, int]]) -> Table:
    """A `cebench.render.table.Table` of (key, header, right-justified, priority) columns."""
    return Table([Column(k, h, right=r, priority=p) for k, h, r, p in specs], title=title)


def _cell(checks: list[LossCheck]) -> Text:
    """One matrix cell: FAIL if a case failed, pass if all passed, – where unsupported,
    skip where Triton's interpreter cannot run it."""
    if any(c.passed is False for c in checks):
        return Text("FAIL", style="bold red")
    if checks and all(c.passed for c in checks):
        return Text("pass", style="green")
    return Text("skip" if any(c.outcome == "interpreter" for c in checks) else "–", style="dim")


def matrix_table(checks: list[LossCheck], settings: list[Setting], dtype: str) -> Table:
    """Variants down, settings across: each cell the verdict over the three shapes."""
    shaped = [c for c in checks if c.dtype == dtype and not c.case.edge]
    names = list(dict.fromkeys(c.variant for c in shaped))
    table = _table(f"Parity with float64 · {dtype} · loss, ∇h and ∇weight ≤ {shaped[0].tolerance:.0e} (max-norm "
                   "relative error) at 3 shapes",
                   [("variant", "variant", False, 0)] + [(s.short, s.short, True, 0) for s in settings])
    for name in names:
        table.add_row(name, *(_cell([c for c in shaped if c.variant == name and c.setting == s]) for s in settings))
    legend = "; ".join(["off = every semantics off", *_legend(settings)])
    table.notes.append(f"Columns: {legend}. –: the variant does not support it (an unsupported row in a sweep); "
                       "skip: Triton's interpreter cannot run it on this CPU.")
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
    for variant, dtype in dict.fromkeys((c.variant, c.dtype) for c in edges):
        cells = []
        for name in cases:
            c = next(c for c in edges if (c.variant, c.dtype, c.case.name) == (variant, dtype, name))
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
    for variant, dtype, setting in dict.fromkeys((c.variant, c.dtype, c.setting) for c in checks):
        group = [c for c in checks if (c.variant, c.dtype, c.setting) == (variant, dtype, setting)]
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


@command()
@with_axes(skip=NOT_VERIFIED, defaults={a.name: f"Default: {a.verify}." for a in VERIFIED if a.verify})
def verify(
    ctx: typer.Context,
    variant: VariantNames = None,
    device: str = typer.Option(None, metavar="DEVICE", show_default=False, help=DEVICE_HELP),
    target: DeviceAlias = None,
    temperature: Temperature = 0.9,
    vocab: int = typer.Option(16, help="Vocabulary of the sampler test (≥ 2; small, so each token gets many draws)."),
    draws: int = typer.Option(200_003, help="Draws per sampler (rows of h, cycling over 4 distinct hidden states)."),
    ce_chunk: int = typer.Option(4096, "--ce-chunk", help="ce_chunk of the chunked sampler."),
    details: bool = typer.Option(False, "--details", help="List every loss check, not only failures and skips."),
    wide: Wide = False,
    columns: Columns = None,
) -> None:
    """Check every variant's loss and gradients, and the samplers' distributions.

    Loss variants (compiled ones and peers included), as a parity matrix: each variant with
    every loss semantics off and with each alone at each value given (--ignore-frac,
    --softcap, --label-smoothing, --z-loss, --reduction; 0 or mean leaves one out), in each
    --dtype on --device, against a float64 reference with torch's definitions (computed there
    too), backpropagating a non-uniform upstream gradient. The error is max|got − ref| /
    max|ref| of the loss, ∇h and ∇weight at three shapes (N divisible by ce_chunk, not
    divisible, ce_chunk > N). What a mismatch looks like is said where it can be told. N = 0
    and every target ignored are edge cases: what each variant does there is shown. A
    setting a variant does not support is shown, not failed. Samplers: a Pearson chi-square
    test of the draws against the exact softmax(logits / T) probabilities; a p-value below
    0.001 fails.

    Exit codes: 0 every check passed, 1 a check failed, 2 bad input.
    """
    from cebench import api
    from cebench.analyze.verify import LOSS_CASES

    device = one_name(device, target, "device", "target", "auto")
    semantics = {a.name: ctx.params[a.name] for a in SEMANTICS if ctx.params.get(a.name) is not None}
    with out.status("verifying (compiled variants compile once per variant, dtype and setting)…"):
        verified = api.verify(variant=variant, device=device, dtype=ctx.params["dtype"], temperature=temperature,
                              vocab=vocab, draws=draws, ce_chunk=ce_chunk, **semantics)
    loss_checks, sampler_checks = verified.losses, verified.samplers
    here = "this CPU" if verified.device == "cpu" else "this GPU"
    for name, reason in verified.skipped.items():
        out.print(f"not checked (cannot run on {here}): {name}: {reason}", style="yellow", highlight=False)
    if loss_checks:
        for dtype in dict.fromkeys(c.dtype for c in loss_checks):
            print_table(matrix_table(loss_checks, verified.settings, dtype), wide, columns)
            out.print()
        print_table(edge_table(loss_checks), wide, columns)
        shown = [c for c in loss_checks if not c.case.edge and (details or c.passed is False or c.warned
                                                                 or c.outcome == "interpreter")]
        if shown:
            out.print()
            title = "Every setting" if details else "Failures, skips and warnings"
            print_table(detail_table(shown, title), wide, columns)
        case = LOSS_CASES[0]
        out.print(f"Reference: float64, written out with torch's definitions, on the same dtype-rounded inputs; vocab "
                  f"{case.vocab}, d_model {case.d_model}.\n", highlight=False)
    if sampler_checks:
        print_table(sampler_table(sampler_checks), wide, columns)
    verdicts = [c.passed for c in loss_checks] + [c.passed for c in sampler_checks]
    failed = verdicts.count(False)
    if failed:
        out.print(f"{failed} of {len(verdicts)} checks failed", style="bold red")
        raise typer.Exit(1)
    out.print(f"all {verdicts.count(True)} applicable checks passed", style="green")
