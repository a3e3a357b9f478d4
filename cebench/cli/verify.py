"""`cebench verify`: check the seed's correctness claims; exit 1 when one fails."""
from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from cebench.cli.app import command, out
from cebench.cli.options import Dtype, Temperature, VariantNames
from cebench.config import WORKLOADS
from cebench.errors import UsageError
from cebench.grid import check_temperature, check_vocab, parse_dtypes, select_variants

if TYPE_CHECKING:
    from cebench.verify import LossCheck, SamplerCheck


def _verdict(passed: bool | None) -> Text:
    if passed is None:
        return Text("n/a", style="dim")
    return Text("pass", style="green") if passed else Text("FAIL", style="bold red")


def loss_table(checks: list[LossCheck]) -> Table:
    """One row per variant, case and dtype: the three relative errors beside the limit."""
    table = Table(title="Claim: the chunked loss matches F.cross_entropy within fp32 accumulation-order rounding, "
                        "and gradients flow to h and weight exactly as the dense path",
                  title_justify="left", header_style="bold")
    for name in ("variant", "case", "N", "ce_chunk", "dtype", "loss", "grad h", "grad weight", "limit", "result", "note"):
        table.add_column(name, justify="right" if name in ("N", "ce_chunk", "loss", "grad h", "grad weight") else "left",
                         style="dim" if name == "note" else None)
    for c in checks:
        if c.case.tokens == 0:
            errors, limit = [f"{c.errors['loss']:g}", "", ""], "loss = 0"
        else:
            errors, limit = [f"{c.errors[q]:.1e}" for q in ("loss", "grad h", "grad weight")], f"≤ {c.tolerance:.0e}"
        table.add_row(c.variant, c.case.name, str(c.case.tokens), str(c.case.ce_chunk), c.dtype, *errors, limit,
                      _verdict(c.passed), c.note)
    return table


def sampler_table(checks: list[SamplerCheck]) -> Table:
    """One row per sampler: chi-square, degrees of freedom and p-value."""
    table = Table(title="Claim: chunked sampling draws from the same distribution as one dense multinomial "
                        "over softmax(logits / T)", title_justify="left", header_style="bold")
    for name in ("variant", "vocab", "ce_chunk", "T", "draws", "χ²", "dof", "p-value", "limit", "result", "note"):
        table.add_column(name, justify="left" if name in ("variant", "limit", "result", "note") else "right",
                         style="dim" if name == "note" else None)
    for c in checks:
        table.add_row(c.variant, str(c.case.vocab), f"{c.case.ce_chunk:,}", f"{c.case.temperature:g}",
                      f"{c.case.rows:,}", f"{c.statistic:.1f}", str(c.dof), f"{c.p_value:.3g}",
                      f"≥ {c.floor:g}", _verdict(c.passed), c.note)
    return table


@command()
def verify(
    variant: VariantNames = None,
    dtype: Dtype = None,
    temperature: Temperature = 0.9,
    vocab: int = typer.Option(16, help="Vocabulary of the sampler test (≥ 2; small, so each token gets many draws)."),
    draws: int = typer.Option(200_003, help="Draws per sampler (rows of h, cycling over 4 distinct hidden states)."),
    ce_chunk: int = typer.Option(4096, "--ce-chunk", help="ce_chunk of the chunked sampler."),
) -> None:
    """Check the correctness claims of the system under test.

    Loss variants (compiled ones included): the loss and the gradients of h and weight
    against a float64 dense reference, as max-norm relative error max|got − ref| / max|ref|,
    at N divisible by ce_chunk, N not divisible, ce_chunk > N, and N = 0, in each --dtype
    (default fp32). Samplers: a Pearson chi-square test of the draws against the exact
    softmax(logits / T) probabilities; a p-value below 0.001 fails.

    Exit codes: 0 every check passed, 1 a check failed, 2 bad input.
    """
    names = list(select_variants(variant, ",".join(WORKLOADS)))
    dtypes = list(parse_dtypes(dtype)) if dtype is not None else ["fp32"]
    check_vocab((vocab,))
    if draws < 100:
        raise UsageError("--draws: at least 100 draws are needed for a chi-square test")
    if ce_chunk < 1:
        raise UsageError(f"--ce-chunk: {ce_chunk} must be a positive integer")
    check_temperature(temperature)

    from cebench.verify import LOSS_CASES, SampleCase, run_all

    sample = SampleCase(rows=draws, vocab=vocab, ce_chunk=ce_chunk, temperature=temperature)
    with out.status("verifying (compiled variants compile once per variant and dtype)…"):
        loss_checks, sampler_checks, skipped = run_all(names, dtypes, sample)
    for name, reason in skipped.items():
        out.print(f"not checked (cannot run on this CPU): {name}: {reason}", style="yellow", highlight=False)
    if loss_checks:
        out.print(loss_table(loss_checks))
        case = LOSS_CASES[0]
        out.print(f"Reference: float64 F.cross_entropy on the same dtype-rounded inputs; vocab {case.vocab}, "
                  f"d_model {case.d_model}. Error = max|got − ref| / max|ref|.\n", highlight=False)
    if sampler_checks:
        out.print(sampler_table(sampler_checks))
    verdicts = [c.passed for c in loss_checks] + [c.passed for c in sampler_checks]
    failed = verdicts.count(False)
    if failed:
        out.print(f"{failed} of {len(verdicts)} checks failed", style="bold red")
        raise typer.Exit(1)
    out.print(f"all {verdicts.count(True)} applicable checks passed", style="green")
