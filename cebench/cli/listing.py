"""`cebench variants`: every variant there is, what it is, and whether it runs here."""
from __future__ import annotations

import typer
from rich.text import Text

from cebench.cli.app import command, out
from cebench.core import devices
from cebench.losses import variants


@command(name="variants")
def list_variants(
    device: str = typer.Option("auto", help="Say whether each variant runs on this device here: auto, cpu or cuda."),
) -> None:
    """List every variant: built-in, installed through the `cebench.variants` entry-point
    group, with its workload, whether it chunks (measured once per --ce-chunk), the
    devices it runs on, whether it can run here and why not, and its summary.

    Any name with -compiled appended is its torch.compile'd twin; a user's function is
    named module:function or file.py:function (see the README, "Bring your own loss").
    """
    device = devices.resolve(device).name
    for name in variants.names(None):
        v = variants.get(name)
        reason = v.unsupported_reason(device)
        head = Text(name, style="bold")
        head.append(f"  {v.workload} · {'chunked' if v.chunked else 'not chunked'} · runs on {', '.join(v.devices)}"
                    f" · {v.origin}", style="")
        out.print(head, highlight=False)
        out.print(Text(f"    {v.summary}"), highlight=False)
        if v.on_request or device in v.on_request_on:
            out.print(Text(f"    measured when named with --variant (not in a default {device} sweep)", style="dim"))
        verdict = Text(reason, style="yellow") if reason else Text("runs", style="green")
        here = Text(f"    here ({device}): ") + verdict
        out.print(here, highlight=False)
