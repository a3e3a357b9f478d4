"""`cebench verify`: check the seed's correctness claims; exit 1 when one fails."""
from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.text import Text

from cebench.cli.app import command, out, print_table
from cebench.cli.options import Columns, Temperature, VariantNames, Wide, with_axes
from cebench.render.table import Column, Table

if TYPE_CHECKING:
    from cebench.analyze.verify import LossCheck, SamplerCheck


def _verdict(passed: bool | None) -> Text:
    if passed is None:
        return Text("n/a", style="dim")
    return Text("pass", style="green") if passed else Text("FAIL", style="bold red")


def _table(title: str, specs: list[tuple[str, str, bool, int]]) -> Table:
    """A `cebench.render.table.Table` of (key, header, right-justified, priority) columns."""
    return Table([Column(k, h, right=r, priority=p) for k, h, r, p in specs], title=title)


def loss_table(checks: list[LossCheck]) -> Table:
    """One row per variant, case and dtype: the three relative errors beside the limit."""
    table = _table("Claim: the chunked loss matches F.cross_entropy within fp32 accumulation-order rounding, and "
                   "gradients flow to h and weight exactly as the dense path",
                   [("variant", "variant", False, 0), ("case", "case", False, 5), ("N", "N", True, 0),
                    ("ce_chunk", "ce_chunk", True, 0), ("dtype", "dtype", False, 0), ("loss", "loss", True, 0),
                    ("grad_h", "grad h", True, 0), ("grad_weight", "grad weight", True, 0),
                    ("limit", "limit", False, 2), ("result", "result", False, 0), ("note", "note", False, 3)])
    for c in checks:
        if c.case.tokens == 0:
            errors, limit = [f"{c.errors['loss']:g}", "", ""], "loss = 0"
        else:
            errors, limit = [f"{c.errors[q]:.1e}" for q in ("loss", "grad h", "grad weight")], f"≤ {c.tolerance:.0e}"
        table.add_row(c.variant, c.case.name, str(c.case.tokens), str(c.case.ce_chunk), c.dtype, *errors, limit,
                      _verdict(c.passed), Text(c.note, style="dim"))
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
@with_axes(skip=("batch", "context", "vocab", "d_model", "ce_chunk", "ignore_frac"),
           defaults={"dtype": "Default: fp32."})
def verify(
    ctx: typer.Context,
    variant: VariantNames = None,
    temperature: Temperature = 0.9,
    vocab: int = typer.Option(16, help="Vocabulary of the sampler test (≥ 2; small, so each token gets many draws)."),
    draws: int = typer.Option(200_003, help="Draws per sampler (rows of h, cycling over 4 distinct hidden states)."),
    ce_chunk: int = typer.Option(4096, "--ce-chunk", help="ce_chunk of the chunked sampler."),
    wide: Wide = False,
    columns: Columns = None,
) -> None:
    """Check the correctness claims of the system under test.

    Loss variants (compiled ones included): the loss and the gradients of h and weight
    against a float64 dense reference, as max-norm relative error max|got − ref| / max|ref|,
    at N divisible by ce_chunk, N not divisible, ce_chunk > N, and N = 0, in each --dtype
    (default fp32). Samplers: a Pearson chi-square test of the draws against the exact
    softmax(logits / T) probabilities; a p-value below 0.001 fails.

    Exit codes: 0 every check passed, 1 a check failed, 2 bad input.
    """
    from cebench import api
    from cebench.analyze.verify import LOSS_CASES

    with out.status("verifying (compiled variants compile once per variant and dtype)…"):
        verified = api.verify(variant=variant, dtype=ctx.params["dtype"], temperature=temperature, vocab=vocab,
                              draws=draws, ce_chunk=ce_chunk)
    loss_checks, sampler_checks, skipped = verified.losses, verified.samplers, verified.skipped
    for name, reason in skipped.items():
        out.print(f"not checked (cannot run on this CPU): {name}: {reason}", style="yellow", highlight=False)
    if loss_checks:
        print_table(loss_table(loss_checks), wide, columns)
        case = LOSS_CASES[0]
        out.print(f"Reference: float64 F.cross_entropy on the same dtype-rounded inputs; vocab {case.vocab}, "
                  f"d_model {case.d_model}. Error = max|got − ref| / max|ref|.\n", highlight=False)
    if sampler_checks:
        print_table(sampler_table(sampler_checks), wide, columns)
    verdicts = [c.passed for c in loss_checks] + [c.passed for c in sampler_checks]
    failed = verdicts.count(False)
    if failed:
        out.print(f"{failed} of {len(verdicts)} checks failed", style="bold red")
        raise typer.Exit(1)
    out.print(f"all {verdicts.count(True)} applicable checks passed", style="green")
