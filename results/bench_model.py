"""Benchmark: a model's training step predicted on meta tensors, and fit --model.

Run on demand (not part of the test suite):  .venv/bin/python results/bench_model.py
Times, in this process (torch imported, nothing else warm): `cebench predict --model
llama-3.1-8b` at one shape (one variant: its loss's step and its body's, cold and again),
every default variant of that shape, and `cebench fit --model llama-3.2-1b --budget 80GiB`.
"""
from __future__ import annotations

import time

import torch

from cebench import api

SHAPE = {"model": "llama-3.1-8b", "batch": 8, "context": 2048}


def timed(what: str, call: object) -> object:
    start = time.perf_counter()
    value = call()
    print(f"{what}: {time.perf_counter() - start:.2f} s")
    return value


def main() -> None:
    print(f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    (row,) = timed("predict --model llama-3.1-8b --batch 8 --context 2048 --variant dense --target h100-80gb (cold)",
                   lambda: api.predict(target="h100-80gb", variant="dense", **SHAPE))
    timed("the same again (the model on meta and the body's peak cached)",
          lambda: api.predict(target="h100-80gb", variant="dense", **SHAPE))
    rows = timed("predict --model llama-3.1-8b --batch 8 --context 2048 --target h100-80gb (every default variant)",
                 lambda: api.predict(target="h100-80gb", **SHAPE))
    print(f"  step peak {row.step_peak_bytes / 2**30:.1f} GiB, body {row.body_peak_bytes / 2**30:.1f} GiB; "
          f"{sum(r.status == 'ok' for r in rows)} of {len(rows)} rows ok")
    fitted = timed("fit --model llama-3.2-1b --budget 80GiB (target cuda, every default variant)",
                   lambda: api.fit(80 * 2**30, target="cuda", model="llama-3.2-1b"))
    for i, f in enumerate(fitted.fits):
        alone = fitted.alone[i]
        print(f"  {f.config.variant} ce_chunk {f.config.ce_chunk}: batch {f.batch} in the model "
              f"({f.predictions} predictions), {'≥ ' * alone.at_limit}{alone.batch} alone")


if __name__ == "__main__":
    main()
