"""GPU check, one call: measured peak (CUDA allocator) against `predict --target cuda`.

Run on a machine with a CUDA GPU (not part of the test suite):
    .venv/bin/python results/gpu_check.py [OUT_DIR]
It measures a handful of configs of the seed's 1B setting (bf16, context 128, vocab 50257,
d_model 2048) with `cebench.run.runner.run` on cuda, predicts the same configs, prints both
peak deltas and their ratio, and writes measured.csv and predicted.csv to OUT_DIR (default
the current folder) so `cebench check`/`plot` can read them. `--device cpu` runs the same
comparison on the CPU, for trying the script out.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from cebench.core.grid import Grid
from cebench.analyze.predict import predict
from cebench.store.results import ResultWriter
from cebench.run.runner import Settings, run


def main(argv: list[str]) -> None:
    device = "cpu" if "--device" in argv and argv[argv.index("--device") + 1] == "cpu" else "cuda"
    args = [a for a in argv if a not in ("--device", "cpu", "cuda")]
    out_dir = Path(args[0]) if args else Path(".")
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA GPU visible: run this on a GPU machine (or with --device cpu to try it)")
    if device == "cuda":
        grid = Grid(("dense", "chunked", "dense-sample", "chunked-sample"), "cuda", ("bf16",), (4, 16, 32, 64), (128,),
                    (50257,), (2048,), (2048, 8192))
    else:
        grid = Grid(("dense", "chunked"), "cpu", ("fp32",), (2, 8), (64,), (5000,), (64,), (64,))
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{'variant':<16}{'batch':>6}{'ce_chunk':>9}{'measured Δ':>15}{'predicted Δ':>15}{'pred/meas':>10}")
    with ResultWriter(out_dir / "measured.csv") as measured_csv, ResultWriter(out_dir / "predicted.csv") as pred_csv:
        for point in grid.expand():
            measured, predicted = run(point, Settings(warmup=2, repeats=5)), predict(point)
            measured_csv.write(measured)
            pred_csv.write(predicted)
            if measured.status != "ok" or predicted.status != "ok":
                print(f"{point.variant:<16}{point.batch:>6}{point.ce_chunk or '':>9}  {measured.status} "
                      f"{measured.error} / {predicted.status} {predicted.error}")
                continue
            ratio = predicted.peak_delta_bytes / measured.peak_delta_bytes
            print(f"{point.variant:<16}{point.batch:>6}{point.ce_chunk or '':>9}{measured.peak_delta_bytes:>15,}"
                  f"{predicted.peak_delta_bytes:>15,}{ratio:>10.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
