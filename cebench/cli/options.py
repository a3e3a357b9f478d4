"""Option definitions shared by the commands (sweep, predict, fit, verify, show), and the
grid's options gathered into one `GridOptions` value. Help texts only: nothing here
parses, and nothing imports torch."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from cebench.cli.app import LOSS_VARIANTS, VARIANTS

LIST = "LIST"
Batch = Annotated[Optional[str], typer.Option(metavar=LIST, help="Batch sizes, comma-separated. Default: cpu 2,8; "
                                                                  "cuda 4,8,16,32.")]
Context = Annotated[Optional[str], typer.Option(metavar=LIST, help="Context lengths (tokens per sequence). "
                                                                    "Default: 128.")]
Vocab = Annotated[Optional[str], typer.Option(metavar=LIST, help="Vocabulary sizes (≥ 2). Default: 50257.")]
DModel = Annotated[Optional[str], typer.Option("--d-model", metavar=LIST, help="Hidden sizes. Default: cpu 128; "
                                                                                "cuda 2048.")]
CeChunk = Annotated[Optional[str], typer.Option(
    "--ce-chunk", metavar=LIST, help="Rows per chunk, for chunked variants. Default: cpu 256,512; cuda 2048,8192.")]
VariantNames = Annotated[Optional[str], typer.Option(
    metavar=LIST, help=f"Variants, comma-separated, from: {VARIANTS}. Default: every variant of the workload(s).")]
LossVariantNames = Annotated[Optional[str], typer.Option(
    "--variant", metavar=LIST, help=f"Loss variants, comma-separated, from: {LOSS_VARIANTS}. Default: every eager "
                                    "one.")]
Workload = Annotated[Optional[str], typer.Option(
    metavar=LIST, help="Workloads, comma-separated: loss (forward + backward of the loss), sample (one no-grad "
                       "sampling call). Default: loss.")]
Temperature = Annotated[float, typer.Option(help="Sampling temperature of the sample workload (> 0).")]
Dtype = Annotated[Optional[str], typer.Option(
    metavar=LIST, help="Dtypes of h and weight, comma-separated: fp32, bf16, fp16. Default: cpu fp32; cuda bf16.")]
Wide = Annotated[bool, typer.Option("--wide", help="Show every column, however wide the terminal.")]
Columns = Annotated[Optional[str], typer.Option(
    metavar=LIST, help="Show these columns besides the ones always shown, comma-separated by key (the footer "
                       "of a narrow table names the keys it left out).")]

