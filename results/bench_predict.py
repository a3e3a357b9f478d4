"""Benchmark: `predict` on 100 configs of the 1B setting, every eager variant it can trace.

Run on demand (not part of the test suite):  .venv/bin/python results/bench_predict.py
Prints the wall time and the process's resident memory after the first 10 and after all
100 configs: the predictions run on `meta` tensors, so memory must stay flat.
"""
from __future__ import annotations

import os
import time

import torch

from cebench.engine.points import predict
from cebench.losses.variants import listed
from cebench.run.grid import GridOptions

BATCHES = tuple(sorted({4 + round(i * 252 / 99) for i in range(100)}))  # 100 batch sizes, 4 … 256


def rss_mib() -> float:
    """Resident set size of this process now, MiB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    eager = tuple(v.name for v in listed() if not v.compiled)
    shape = {"dtype": "bf16", "context": 128, "vocab": 50257, "d_model": 2048}
    probe = GridOptions(variant=eager, batch=BATCHES[:1], ce_chunk=2048, **shape).grid("cuda").expand()
    # The variants predict can trace (not the peers with custom ops or Triton kernels).
    eager = tuple(dict.fromkeys(p.variant for p in probe if predict(p).status == "ok"))
    grid = GridOptions(variant=eager, batch=BATCHES, ce_chunk="2048,8192", **shape).grid("cuda")
    points = grid.expand()
    start = time.perf_counter()
    rss_after_10 = None
    for point in points:
        row = predict(point)
        assert row.status == "ok", row.error
        if point.batch == BATCHES[9] and rss_after_10 is None:
            rss_after_10 = rss_mib()
    elapsed = time.perf_counter() - start
    print(f"{len(BATCHES)} configs (batch {BATCHES[0]}–{BATCHES[-1]}, context 128, vocab 50257, d_model 2048, "
          f"bf16, target cuda) × {len(eager)} eager variants ({', '.join(eager)}; ce_chunk 2048, 8192) "
          f"= {len(points)} predictions")
    print(f"wall time {elapsed:.2f} s ({elapsed / len(points) * 1e3:.1f} ms each), "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"resident memory: {rss_after_10:.0f} MiB after 10 configs, {rss_mib():.0f} MiB after {len(BATCHES)}")


if __name__ == "__main__":
    main()
