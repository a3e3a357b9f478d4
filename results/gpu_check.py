"""GPU check, one call: measured peak (CUDA allocator) against `predict --target cuda`.

Run on a machine with a CUDA GPU (not part of the test suite):
    .venv/bin/python results/gpu_check.py [OUT_DIR]
It sweeps a handful of configs of the 1B setting (bf16, context 128, vocab 50257,
d_model 2048) on cuda through `cebench.api.sweep` (each point isolated, as on the command
line), predicts the same configs with `cebench.api.predict`, prints both peak deltas and
their ratio (the compiled losses too: inductor's Triton code, predicted without a GPU), and
the measured median step time beside the time model's for the named target this GPU is
(`cebench targets`; on the CPU, the probe's), then
does the same for a model's whole training step (gpt2, whose head is tied: for-each AdamW
and fused AdamW stepped in backward, with and without activation checkpointing and compiled
blocks, dense and torchtune's compiled chunked loss: absolute peaks, the body's peak and the
model state), and leaves measured.csv, predicted.csv, model-measured.csv and
model-predicted.csv in
OUT_DIR (default the current folder) for `cebench check`/`plot`. `--device cpu` runs the
same comparisons on the CPU at small sizes, for trying the script out.
"""
from __future__ import annotations

import sys
from pathlib import Path

from cebench import api
from cebench.core import targets


def main(argv: list[str]) -> None:
    device = "cpu" if "--device" in argv and argv[argv.index("--device") + 1] == "cpu" else "cuda"
    args = [a for a in argv if a not in ("--device", "cpu", "cuda")]
    out_dir = Path(args[0]) if args else Path(".")
    if device == "cuda":
        grid = dict(variant="dense,chunked,dense-compiled,chunked-compiled,dense-sample,chunked-sample",
                    dtype="bf16", batch="4,16,32,64", context=128, vocab=50257, d_model=2048, ce_chunk="2048,8192")
        model = dict(variant="dense,torchtune-compiled", model="gpt2", dtype="bf16", batch="8", context=512,
                     optimizer="adamw,adamw-in-backward", compile="none,blocks", activation_checkpointing="none,blocks")
    else:
        grid = dict(variant="dense,chunked,chunked-compiled", dtype="fp32", batch="2,8", context=64, vocab=5000,
                    d_model=64, ce_chunk=64)
        model = dict(variant="dense,torchtune-compiled", model="results/models/gpt2-2l.json", dtype="fp32",
                     batch="1", context=64, optimizer="adamw-in-backward", compile="none,blocks",
                     activation_checkpointing="none,blocks")
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        measured = api.sweep(device=device, warmup=2, repeats=5, out=out_dir / "measured.csv", **grid)
    except api.UsageError as exc:
        sys.exit(f"{exc} (run this on a GPU machine, or with --device cpu to try it)")
    predicted = api.predict(target=device, out=out_dir / "predicted.csv", **grid)
    named = targets.match(measured[0].device_name) if device == "cuda" else "cpu"
    timed = {(p.variant, p.batch, p.ce_chunk): p for p in api.predict(target=named, **grid)} if named else {}
    print(f"time model: {named or 'none (this GPU is no named target)'}")
    print(f"{'variant':<16}{'batch':>6}{'ce_chunk':>9}{'measured Δ':>15}{'predicted Δ':>15}{'pred/meas':>10}"
          f"{'meas. ms':>10}{'pred. ms':>10}")
    by_point = {(p.variant, p.batch, p.ce_chunk): p for p in predicted}  # sweep leaves out what cannot run here
    for m in measured:
        p = by_point[(m.variant, m.batch, m.ce_chunk)]
        if m.status != "ok" or p.status != "ok":
            print(f"{m.variant:<16}{m.batch:>6}{m.ce_chunk or '':>9}  {m.status} {m.error} / {p.status} {p.error}")
            continue
        ratio = p.peak_delta_bytes / m.peak_delta_bytes
        t = timed.get((m.variant, m.batch, m.ce_chunk))
        time_ms = "–" if t is None or t.predicted_time_ms is None else f"{t.predicted_time_ms:.3f}"
        print(f"{m.variant:<16}{m.batch:>6}{m.ce_chunk or '':>9}{m.peak_delta_bytes:>15,}{p.peak_delta_bytes:>15,}"
              f"{ratio:>10.4f}{m.time_ms_median:>10.3f}{time_ms:>10}", flush=True)
    compare_model_steps(device, out_dir, model)


def compare_model_steps(device: str, out_dir: Path, grid: dict) -> None:
    """A model's training step measured and predicted: the absolute step peak, the body's
    step peak and the model state (parameters + gradients + optimizer state), and their deltas."""
    measured = api.sweep(device=device, warmup=2, repeats=3, out=out_dir / "model-measured.csv", **grid)
    predicted = api.predict(target=device, out=out_dir / "model-predicted.csv", **grid)
    def key(r: object) -> tuple:
        return r.variant, r.ce_chunk, r.optimizer, r.compile, r.activation_checkpointing

    by_point = {key(p): p for p in predicted}
    print(f"\n{grid['model']} training step, measured − predicted in bytes")
    print(f"{'variant':<19}{'optimizer':>12}{'compile':>8}{'ckpt':>7}{'step peak':>16}{'Δ':>10}{'body peak':>16}"
          f"{'Δ':>10}{'state':>16}{'Δ':>8}")
    for m in measured:
        p = by_point[key(m)]
        head = f"{m.variant:<19}{m.optimizer:>12}{m.compile:>8}{m.activation_checkpointing:>7}"
        if m.status != "ok" or p.status != "ok":
            print(f"{head}  {m.status} {m.error} / {p.status} {p.error}")
            continue
        print(f"{head}{m.step_peak_bytes:>16,}"
              f"{m.step_peak_bytes - p.step_peak_bytes:>10,}{m.body_peak_bytes:>16,}"
              f"{m.body_peak_bytes - p.body_peak_bytes:>10,}{m.model_state_bytes:>16,}"
              f"{m.model_state_bytes - p.model_state_bytes:>8,}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
