"""Benchmark: how long predictions take, as a user runs them (issue #29's targets).

Run on demand on a quiet machine (not part of the test suite):

    .venv/bin/python results/bench_speed.py            # prints a markdown table
    .venv/bin/python results/bench_speed.py --out F    # and writes it to F

Each command runs as a command (a fresh `cebench` process, cold: torch imported, its meta
kernels loaded, the model built), `REPEATS` times; the table gives the fastest and the
slowest. The warm row is in one process: `cebench.predict` at one shape of Llama 3.1 8B,
then the time of the same call at another batch (every default variant; the model and
torch's meta kernels are loaded, the new shapes' ops are not cached).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from findings import run  # noqa: E402  (a command as a reader runs it, cold, and its wall time)

REPEATS = 2
# (what it shows, the command, the target in seconds)
COMMANDS = [
    ("loss alone, N = 10¹⁰ rows, every default variant",
     "predict --batch 100000 --context 100000 --vocab 256000 --d-model 8192 --target h100-80gb", 5),
    ("loss alone fit, ~10⁵ chunks at its answer",
     "fit --budget 1.5GiB --context 8 --vocab 512 --d-model 16 --ce-chunk 4 --target cpu --variant dense,chunked", 5),
    ("loss alone fit, the default grid",
     "fit --budget 80GiB", 5),
    ("model fit, every default variant",
     "fit --model llama-3.2-1b --context 2048 --target h100-80gb", 20),
    ("model predict, every default variant",
     "predict --model llama-3.1-8b --target h100-80gb --context 2048 --batch 4", None),
]


def warm_model_predict() -> float:
    from cebench import api

    api.predict(model="llama-3.1-8b", target="h100-80gb", context=2048, batch=2)
    start = time.perf_counter()
    api.predict(model="llama-3.1-8b", target="h100-80gb", context=2048, batch=3)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the table here")
    out = parser.parse_args().out
    lines = [f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)", "",
             "| what | command | time (s) | target |", "| --- | --- | --- | --- |"]
    for what, args, target in COMMANDS:
        times = sorted(run(f"cebench {args}")[1] for _ in range(REPEATS))
        goal = f"< {target} s" if target else "–"
        lines.append(f"| {what} | `cebench {args}` | {times[0]:.1f}–{times[-1]:.1f} | {goal} |")
        print(lines[-1], flush=True)
    warm = warm_model_predict()
    lines.append(f"| model predict, warm, every default variant | `cebench.predict(model='llama-3.1-8b', "
                 f"target='h100-80gb', context=2048, batch=3)` after batch 2 | {warm:.1f} | < 2 s |")
    print(lines[-1])
    lines.append(f"\nload average after: {os.getloadavg()[0]:.2f}")
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
