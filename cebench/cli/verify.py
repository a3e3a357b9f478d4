"""`cebench verify`: the parity matrix of the loss variants and the samplers' chi-square
tests; exit 1 when a check fails."""
from __future__ import annotations

import typer

from cebench.cli.app import command, out, print_table
from cebench.cli.options import (
    DEVICE_HELP,
    LIST,
    TEMPERATURE,
    Columns,
    DeviceAlias,
    Temperature,
    VariantNames,
    Wide,
    with_axes,
)
from cebench.core import devices
from cebench.core.axes import AXES, BY_NAME, SEMANTICS, VERIFIED
from cebench.render.verify import (
    edge_table,
    failures_text,
    matrix_table,
    reference_note,
    sampler_table,
    shown_table,
    skips_text,
)

# What verify does not take (`Axis.verify` is None): its shapes are its own; a step's steady state and a model's
# step are not a loss's semantics (verify checks values, which they do not change).
NOT_VERIFIED = tuple(a.name for a in AXES if a not in VERIFIED)


@command()
@with_axes(skip=NOT_VERIFIED, defaults={a.name: f"Default: {a.verify}." for a in VERIFIED if a.verify})
def verify(
    ctx: typer.Context,
    variant: VariantNames = None,
    workload: str = typer.Option(None, metavar=LIST, show_default=False,
                                 help="Workloads, comma-separated: loss, logits (each loss variant's form on given "
                                      "logits, where it has one: loss and ∇logits), sample. Default: loss,sample."),
    device: str = typer.Option(None, metavar="DEVICE", show_default=False, help=DEVICE_HELP),
    target: DeviceAlias = None,
    temperature: Temperature = TEMPERATURE,
    vocab: int = typer.Option(16, show_default=False, help="Vocabulary of the sampler test (≥ 2; small, so each "
                                                          "token gets many draws). Default: 16."),
    draws: int = typer.Option(200_003, show_default=False, help="Draws per sampler (rows of h, cycling over 4 "
                                                                "distinct hidden states). Default: 200003."),
    ce_chunk: int = typer.Option(4096, "--ce-chunk", show_default=False,
                                 help="ce_chunk of the chunked sampler. Default: 4096."),
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
    and every target ignored are edge cases: what each variant does there is shown.
    --workload logits checks each loss variant's form on given N × vocab logits instead,
    where it has one (its loss and ∇logits, shown as ∇h); loss,logits,sample checks all. A
    setting a variant does not support is shown, not failed. Samplers: a Pearson chi-square
    test of the draws against the exact softmax(logits / T) probabilities; a p-value below
    0.001 fails.

    A check Triton's interpreter cannot run on a CPU is skipped, neither passed nor failed,
    and the summary names it; a skipped check of a setting asked for (a semantics option
    given) fails verify: what was asked was not verified.

    Exit codes: 0 every check that ran passed, 1 a check failed, one asked for was skipped, or
    none could run (nothing checked is not a pass), 2 bad input.
    """
    from cebench import api

    device = devices.one_name(device, target, "device", "target", "auto")
    semantics = {a.name: ctx.params[a.name] for a in SEMANTICS if ctx.params.get(a.name) is not None}
    with out.status("verifying (compiled variants compile once per variant, dtype and setting)…"):
        verified = api.verify(variant=variant, workload=workload, device=device, dtype=ctx.params["dtype"],
                              temperature=temperature, vocab=vocab, draws=draws, ce_chunk=ce_chunk, **semantics)
    loss_checks, sampler_checks = verified.losses, verified.samplers
    here = "this CPU" if verified.device.is_host else "this GPU"
    for name, reason in verified.skipped.items():
        out.print(f"not checked (cannot run on {here}): {name}: {reason}", style="yellow", highlight=False)
    if loss_checks:
        for dtype in dict.fromkeys(c.dtype for c in loss_checks):
            print_table(matrix_table(loss_checks, verified.settings, dtype), wide, columns)
            out.print()
        print_table(edge_table(loss_checks), wide, columns)
        shown = shown_table(loss_checks, details)
        if shown is not None:
            out.print()
            print_table(shown, wide, columns)
        out.print(reference_note(), highlight=False)
    if sampler_checks:
        print_table(sampler_table(sampler_checks), wide, columns)
    verdicts = [c.passed for c in loss_checks] + [c.passed for c in sampler_checks]
    failed, skips, asked = verified.failed, verified.skips, verified.unverified
    if failed:
        out.print(f"{failed} of {len(verdicts) - verdicts.count(None)} applicable checks failed: "
                  f"{failures_text(loss_checks, sampler_checks)}", style="bold red", highlight=False)
    elif not verified.checked:  # nothing checked is not a pass
        out.print(f"nothing was checked: no check could run on {here}", style="bold red", highlight=False)
    elif skips:  # not "all": a skipped check neither passed nor failed
        out.print(f"{verdicts.count(True)} applicable checks passed, {len(skips)} skipped", style="green")
    else:
        out.print(f"all {verdicts.count(True)} applicable checks passed", style="green")
    if skips:
        out.print(f"skipped (Triton's interpreter cannot run them on {here}): {skips_text(skips)}", style="yellow",
                  highlight=False)
    if asked:
        flags = ", ".join(dict.fromkeys(BY_NAME[k].flag for c in asked for k, _ in c.setting.values))
        out.print(f"not verified: {skips_text(asked)}, asked for with {flags}, was skipped", style="bold red",
                  highlight=False)
    if not verified.passed:
        raise typer.Exit(1)
