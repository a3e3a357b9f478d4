"""The findings on a loss inside its model: regenerates the blocks `model-hf`, `model-fit`,
`model-fsdp` and `model-cpu` of results/README.md (and results/model-cpu.csv).

    .venv/bin/python results/model_findings.py            # every block (a few minutes on 2 cores)
    .venv/bin/python results/model_findings.py model-hf   # that block alone

model-hf: four model types (Llama, Qwen2, Gemma 2, GPT-2; their published configs with two
blocks, results/models/*-2l.json) as the transformers model itself (`--model hf:`) measured on
this CPU with its own loss, that model predicted on meta, and cebench's reference decoder of the
same config predicted. model-fit: `cebench fit --model M --target h100-80gb --context 2048 --variant PEERS --ce-chunk
2048` for llama-3.2-1b and llama-3.1-8b, AdamW, with and without activation checkpointing,
beside the loss alone's answer at the same vocab and d_model (predicted on meta tensors). model-fsdp: the
same for llama-3.1-8b with every block checkpointed, on one H100 and per rank of 8 under FSDP, with the
loss's share of the step's peak at each answer. model-cpu: a small
Llama-shaped model's training step measured and timed on this CPU with each eager loss.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from blocks import splice  # noqa: E402

from cebench import api  # noqa: E402
from cebench.analyze.compare import loss_share  # noqa: E402
from cebench.core.units import format_bytes, format_ms  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("llama-3.2-1b", "llama-3.1-8b")
TARGET, CONTEXT, CHUNK, MAX_BATCH = "h100-80gb", 2048, 2048, 4096
PEERS = "dense,chunked,torch-lce,liger-kernel,cut-cross-entropy"  # the losses users choose between
SMALL = "results/models/small-llama.json"
CPU_GRID = {"variant": "dense,chunked,torch-lce-auto", "ce_chunk": "256,1024", "batch": 4, "context": 256}
HF_MODELS = ("results/models/llama-3.2-1b-2l.json", "results/models/qwen2.5-0.5b-2l.json",
             "results/models/gemma-2-2b-2l.json", "results/models/gpt2-2l.json")
HF_GRID = {"variant": "hf-loss", "batch": 1, "context": 512, "optimizer": "none"}  # activations at the peaks


def chunk(config: object) -> str:
    return "" if config.ce_chunk is None else f"{config.ce_chunk:,}"


def within(fitted: api.Fitted) -> str:
    """'its 79.2 GiB less 5% headroom: 75.2 GiB', the bytes `fit` let a peak reach."""
    assert fitted.budget is not None and fitted.limit is not None
    return (f"its {format_bytes(fitted.budget)} less {float(fitted.headroom):.0%} headroom: "
            f"{format_bytes(fitted.limit)}")


def fit_block() -> str:
    lines = ["| model | activation checkpointing | loss | ce_chunk | batch in the model's step | loss alone |",
             "|---|---|---|---:|---:|---:|"]
    for model in MODELS:
        for checkpointing in ("none", "blocks"):
            fitted = api.fit(target=TARGET, model=model, context=CONTEXT, activation_checkpointing=checkpointing,
                             variant=PEERS, ce_chunk=CHUNK, max_batch=MAX_BATCH)
            for i, f in enumerate(fitted.fits):
                alone = fitted.alone[i]
                lines.append(f"| {model} | {checkpointing} | {f.config.variant} | {chunk(f.config)} | {f.batch:,} "
                             f"({format_bytes(f.peak_bytes)}) | {'≥ ' * alone.at_limit}{alone.batch:,} |")
            lines += [f"| {model} | {checkpointing} | {name} | | not fitted: {why} | |"
                      for name, why in fitted.not_fitted.items()]
    return "\n".join(lines) + (f"\n\nPredicted for {TARGET} (the whole step within {within(fitted)}), "
                               f"bf16, context {CONTEXT}, AdamW; in parentheses the step's peak; loss alone: the "
                               f"loss's own step at the model's vocab and d_model, searched up to batch "
                               f"{MAX_BATCH:,}.")


def fsdp_block(model: str = "llama-3.1-8b", ranks: int = 8) -> str:
    lines = ["| loss | ce_chunk | one GPU: batch | loss's share of the peak | "
             f"{ranks} GPUs, FSDP: batch per rank | loss's share of a rank's peak |", "|---|---:|---:|---:|---:|---:|"]
    grid = {"target": TARGET, "model": model, "context": CONTEXT, "activation_checkpointing": "blocks"}
    fitted = api.fit(variant=PEERS, ce_chunk=CHUNK, fsdp=f"1,{ranks}", max_batch=MAX_BATCH, **grid)
    cells: dict[tuple[str, str], list[str]] = {}
    for f in fitted.fits:
        c = f.config
        share = "–"
        if f.batch:
            row = api.predict(variant=c.variant, ce_chunk=c.ce_chunk or CHUNK, batch=f.batch, fsdp=c.fsdp, **grid)[0]
            value = loss_share(row.step_peak_bytes, row.body_peak_bytes)
            share = "–" if value is None else f"{value:.0%}"
        cells.setdefault((c.variant, chunk(c)), []).extend([f"{f.batch:,} ({format_bytes(f.peak_bytes)})", share])
    lines += [f"| {variant} | {size} | {' | '.join(answer)} |" for (variant, size), answer in cells.items()]
    return "\n".join(lines) + (f"\n\nPredicted for {TARGET} (each within {within(fitted)}), {model}, bf16, "
                               f"context {CONTEXT}, AdamW, every block checkpointed; FSDP2 on "
                               f"each block and the root, rank 0's peak; in parentheses the peak; loss's share: "
                               f"(step peak − the same step's with a stand-in loss) / step peak at that batch.")


def cpu_block() -> str:
    out = ROOT / "results" / "model-cpu.csv"
    out.unlink(missing_ok=True)
    rows = api.sweep(device="cpu", model=SMALL, out=out, **CPU_GRID)
    lines = ["| loss | ce_chunk | step peak | loss's share of it | step time | loss's share of it |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.status != "ok" or r.body_peak_bytes is None or r.body_time_ms is None:
            lines.append(f"| {r.variant} | {chunk(r)} | {r.status}: {r.error or 'no body step'} | | | |")
            continue
        share = loss_share(r.step_peak_bytes, r.body_peak_bytes)
        time_share = loss_share(r.time_ms_median, r.body_time_ms)
        shares = ["noise" if s is None else f"{s:.0%}" for s in (share, time_share)]  # outside [0, 100 %]: noise
        lines.append(f"| {r.variant} | {chunk(r)} | {format_bytes(r.step_peak_bytes)} | {shares[0]} | "
                     f"{format_ms(r.time_ms_median)} | {shares[1]} |")
    r = next(r for r in rows if r.status == "ok")
    return "\n".join(lines) + (f"\n\n{SMALL} ({r.n_params / 1e6:.1f} M parameters, vocab {r.vocab:,}, d_model "
                               f"{r.d_model}), batch {r.batch} × context {r.context}, fp32, AdamW, {r.device_name}, "
                               f"{r.threads} threads; the body's step alone: {format_bytes(r.body_peak_bytes)}, "
                               f"{format_ms(r.body_time_ms)}.")


def hf_block() -> str:
    """The transformers model measured and predicted, beside cebench's decoder of its config measured."""
    lines = ["| model | step peak, measured | predicted − measured | body step, measured | predicted − measured | "
             "cebench's decoder: body step, measured | decoder vs model |", "|---|---:|---:|---:|---:|---:|---:|"]
    for path in HF_MODELS:
        [measured] = api.sweep(device="cpu", model=f"hf:{path}", repeats=1, warmup=1, **HF_GRID)
        [predicted] = api.predict(target="cpu", model=f"hf:{path}", **HF_GRID)
        if measured.status != "ok" or predicted.status != "ok":
            lines.append(f"| {path} | {measured.status}: {measured.error} | {predicted.error} | | | | |")
            continue
        cells = [f"`hf:{Path(path).name}`", f"{measured.step_peak_bytes:,} B",
                 f"{predicted.step_peak_bytes - measured.step_peak_bytes:+,} B", f"{measured.body_peak_bytes:,} B",
                 f"{predicted.body_peak_bytes - measured.body_peak_bytes:+,} B"]
        [decoder] = api.sweep(device="cpu", model=path, repeats=1, warmup=1, **{**HF_GRID, "variant": "dense"})
        body = measured.body_peak_bytes
        cells += [f"{decoder.body_peak_bytes:,} B", f"{(decoder.body_peak_bytes - body) / body:+.1%}"]
        lines.append(f"| {' | '.join(cells)} |")
    r = measured
    return "\n".join(lines) + (f"\n\nEach config as published with two blocks, batch {r.batch} × context {r.context}, "
                               f"fp32, no optimizer (the activations make the peaks), the model's own loss "
                               f"(`hf-loss`: transformers' `ForCausalLMLoss`), {r.device_name}, {r.threads} threads; "
                               f"body step: the same step with cebench's stand-in loss, where the model's own "
                               f"activations make the peak; cebench's decoder: `--model <config>`, measured the same "
                               f"way.")


BLOCKS = {"model-hf": hf_block, "model-cpu": cpu_block, "model-fit": fit_block, "model-fsdp": fsdp_block}


def main(names: list[str]) -> None:
    """Regenerate the blocks `names` (none: every block)."""
    readme = ROOT / "results" / "README.md"
    for name in names or BLOCKS:
        splice(readme, name, BLOCKS[name]())


if __name__ == "__main__":
    main(sys.argv[1:])
