"""Options shared by the commands that take a grid of sizes (sweep, predict, fit)."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from cebench import variants
from cebench.config import (DEFAULTS, Grid, check_temperature, check_vocab, parse_ints, resolve_dtype,
                            select_variants)
from cebench.workloads import WORKLOADS

Batch = Annotated[Optional[str], typer.Option(help="Batch sizes, comma-separated. Default: cpu 2,8; cuda 4,8,16,32.")]
Context = Annotated[Optional[str], typer.Option(help="Context lengths (tokens per sequence). Default: 128.")]
Vocab = Annotated[Optional[str], typer.Option(help="Vocabulary sizes (≥ 2). Default: 50257.")]
DModel = Annotated[Optional[str], typer.Option("--d-model", help="Hidden sizes. Default: cpu 128; cuda 2048.")]
CeChunk = Annotated[Optional[str], typer.Option(
    "--ce-chunk", help="Rows per chunk, for chunked variants. Default: cpu 256,512; cuda 2048,8192.")]
VariantNames = Annotated[Optional[str], typer.Option(
    help=f"Variants, comma-separated, from: {', '.join(variants.names())}. Default: every variant of --workload.")]
Workload = Annotated[Optional[str], typer.Option(
    help=f"Workloads, comma-separated: {', '.join(WORKLOADS)} (forward + backward of the loss; one no-grad "
         "sampling call). Default: loss.")]
Temperature = Annotated[float, typer.Option(help="Sampling temperature of the sample workload (> 0).")]
Dtype = Annotated[Optional[str], typer.Option(
    help="fp32, bf16 or fp16 for h and weight. Default: cpu fp32; cuda bf16.")]


def build_grid(device: str, batch: str | None, context: str | None, vocab: str | None, d_model: str | None,
               ce_chunk: str | None, variant: str | None, workload: str | None, dtype: str | None,
               temperature: float) -> Grid:
    """Parse the grid options for `device` ('cpu' or 'cuda'); unset ones take its defaults."""
    d = DEFAULTS[device]
    return Grid(
        variants=select_variants(variant, workload),
        device=device,
        dtype=resolve_dtype(dtype) if dtype else d.dtype,
        batch=parse_ints(batch, "--batch") if batch else d.batch,
        context=parse_ints(context, "--context") if context else d.context,
        vocab=check_vocab(parse_ints(vocab, "--vocab") if vocab else d.vocab),
        d_model=parse_ints(d_model, "--d-model") if d_model else d.d_model,
        ce_chunk=parse_ints(ce_chunk, "--ce-chunk") if ce_chunk else d.ce_chunk,
        temperature=check_temperature(temperature),
    )
