"""`cebench variants`: every variant there is, what it is, and whether it runs here."""
from __future__ import annotations

import typer
from rich.text import Text

from cebench.cli.app import command, out, print_table
from cebench.cli.options import DeviceAlias, Wide
from cebench.core import devices
from cebench.core.axes import SEMANTICS
from cebench.core.config import LOSS
from cebench.engine import support
from cebench.losses import variants


@command(name="variants")
def list_variants(
    device: str = typer.Option(None, metavar="DEVICE", show_default=False,
                               help="Say whether each variant runs on this device here: auto (cuda when a GPU is "
                                    "visible), cpu or cuda. Default: auto."),
    target: DeviceAlias = None,
) -> None:
    """List every variant: built-in, installed through the `cebench.variants` entry-point
    group, with its workload, whether it chunks (measured once per --ce-chunk), the
    devices it runs on, whether it can run here and why not, and its summary.

    Any name with -compiled appended is its torch.compile'd twin; a user's function is
    named module:function or file.py:function (see the README, "Bring your own loss").
    """
    chosen = devices.target(devices.one_name(device, target, "device", "target", "auto"), here=True)
    device = chosen.name
    for v in variants.listed(installed=True):
        reason = support.variant_reason(v, chosen, imported=True)
        head = Text(v.name, style="bold")
        head.append(f"  {', '.join(v.workloads)} · {'chunked' if v.chunked else 'not chunked'} · runs on "
                    f"{', '.join(v.devices)} · {v.origin}", style="")
        out.print(head, highlight=False)
        out.print(Text(f"    {v.summary}"), highlight=False)
        if v.workload == LOSS:  # padding reaches every loss; the other semantics those that take them
            takes = [a.flag for a in SEMANTICS if not a.keyword or a.name in v.supports]
            out.print(Text(f"    loss semantics: {', '.join(takes)}", style="dim"), highlight=False)
        if device in v.interpreted_on:
            out.print(Text(f"    {v.interpreter_note(device)}", style="dim"), highlight=False)
        if v.on_request or device in v.on_request_on:
            out.print(Text(f"    measured when named with --variant (not in a default {device} sweep)", style="dim"))
        verdict = Text(reason, style="yellow") if reason else Text("runs", style="green")
        here = Text(f"    here ({device}): ") + verdict
        out.print(here, highlight=False)


@command(name="targets")
def list_targets(wide: Wide = False) -> None:
    """List the named GPU targets that predict, fit and explain take as --target: each
    card's memory (what it reports to torch: fit's default budget), its cuBLAS workspace
    (one per thread that runs a matmul: two in a loss step), its dense BF16 and FP32 rates
    and memory bandwidth (the time model's roofline), the GPU family whose fitted
    efficiencies predict its step times, and where each figure comes from; then each
    family's efficiencies and the published rows they were calibrated on.
    """
    from cebench import api
    from cebench.render.listing import families_table, targets_table

    found = api.targets()
    print_table(targets_table(found), wide)
    for t in found:
        out.print(Text(f"{t.name}: {t.sources}"), highlight=False, soft_wrap=True)
    out.print()
    print_table(families_table(), wide)
    from cebench.core import timemodel

    for family, constants in sorted(timemodel.FAMILIES.items()):
        out.print(Text(f"{family}: calibrated on {constants.rows}"), highlight=False, soft_wrap=True)
    for family, lender in timemodel.BORROWED.items():
        out.print(Text(f"{family}: no published rows to calibrate on; {lender}'s efficiencies are used, and its "
                       "rows say so"), highlight=False, soft_wrap=True)


@command(name="models")
def list_models(wide: Wide = False) -> None:
    """List the preset models (Hugging Face config.json files shipped with cebench): model
    type, blocks, d_model, MLP width, attention heads / key-value heads, vocabulary, whether
    the head is tied to the embedding, the exact parameter count (a tied head once), and
    where the numbers come from; and what each is predicted and measured as: cebench's own
    decoder with fused SDPA attention (hf:<preset> is the transformers model instead, with
    transformers' attention). A preset is also named by the Hugging Face id it cites
    (meta-llama/Llama-3.1-8B). A model is also named by a path to a config.json (llama,
    mistral, qwen2, gemma2, gpt2) or by a user's build, path/to/file.py:build.
    """
    from cebench.models import presets
    from cebench.render.listing import models_notes, models_table

    found = presets()
    print_table(models_table(found), wide)
    for line in models_notes(found):
        out.print(Text(line), highlight=False)
    for m in found:
        out.print(Text(f"{m.name}: {m.source}"), highlight=False, soft_wrap=True)
