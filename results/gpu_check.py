"""GPU check, one call: measured peak (CUDA allocator) against `predict --target cuda`.

Run on a machine with a CUDA GPU (not part of the test suite):
    .venv/bin/python results/gpu_check.py [OUT_DIR]
It sweeps a handful of configs of the seed's 1B setting (bf16, context 128, vocab 50257,
d_model 2048) on cuda through `cebench.api.sweep` (each point isolated, as on the command
line), predicts the same configs with `cebench.api.predict`, prints both peak deltas and
their ratio, and leaves measured.csv and predicted.csv in OUT_DIR (default the current
folder) for `cebench check`/`plot`. `--device cpu` runs the same comparison on the CPU, for
trying the script out.
"""
from __future__ import annotations

import sys
from pathlib import Path

from cebench import api


def main(argv: list[str]) -> None:
    device = "cpu" if "--device" in argv and argv[argv.index("--device") + 1] == "cpu" else "cuda"
    args = [a for a in argv if a not in ("--device", "cpu", "cuda")]
    out_dir = Path(args[0]) if args else Path(".")
    if device == "cuda":
        grid = dict(variant="dense,chunked,dense-sample,chunked-sample", dtype="bf16", batch="4,16,32,64",
                    context=128, vocab=50257, d_model=2048, ce_chunk="2048,8192")
    else:
        grid = dict(variant="dense,chunked", dtype="fp32", batch="2,8", context=64, vocab=5000, d_model=64,
                    ce_chunk=64)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        measured = api.sweep(device=device, warmup=2, repeats=5, out=out_dir / "measured.csv", **grid)
    except api.UsageError as exc:
        sys.exit(f"{exc} (run this on a GPU machine, or with --device cpu to try it)")
    predicted = api.predict(target=device, out=out_dir / "predicted.csv", **grid)
    print(f"{'variant':<16}{'batch':>6}{'ce_chunk':>9}{'measured Δ':>15}{'predicted Δ':>15}{'pred/meas':>10}")
    by_point = {(p.variant, p.batch, p.ce_chunk): p for p in predicted}  # sweep leaves out what cannot run here
    for m in measured:
        p = by_point[(m.variant, m.batch, m.ce_chunk)]
        if m.status != "ok" or p.status != "ok":
            print(f"{m.variant:<16}{m.batch:>6}{m.ce_chunk or '':>9}  {m.status} {m.error} / {p.status} {p.error}")
            continue
        ratio = p.peak_delta_bytes / m.peak_delta_bytes
        print(f"{m.variant:<16}{m.batch:>6}{m.ce_chunk or '':>9}{m.peak_delta_bytes:>15,}{p.peak_delta_bytes:>15,}"
              f"{ratio:>10.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
