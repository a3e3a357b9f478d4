"""Judge the time model on published timing rows it was not calibrated on.

    .venv/bin/python results/judge_time.py --liger-repo ../Liger-Kernel   # write results/time-judged.csv, figure
    .venv/bin/python results/judge_time.py --summary                      # the error table of the committed CSV

`--liger-repo` as in `results/calibrate_time.py`: each Liger row traced with the commit that ran it.

Every row of `results/published/liger_kernel_speed_rows_later.csv` (Liger-Kernel's benchmark
data after the 2024 calibration rows: other GPUs, years and releases) that cebench models
(`liger_kernel.point_of`) is predicted with `cebench.predict` for its GPU, as a user would, and
set beside the published median. `summary` gives the figures the time model is held to
(rows of at least `LONG_MS`): the median and 90th percentile of |error|, the largest factor
off, and how often the faster of two providers at the same shape and run is named rightly
where their published times differ by more than `APART`. `tests/test_time_model.py` checks
them on the committed CSV and repredicts a sample of its rows.
"""
from __future__ import annotations

import csv
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "results" / "published" / "liger_kernel_speed_rows_later.csv"
JUDGED = ROOT / "results" / "time-judged.csv"
FIGURE = ROOT / "results" / "time-vs-published.png"
LONG_MS = 1.0  # rows shorter than this are mostly fixed costs: reported apart
APART = 0.15  # pairs whose published times differ by more than this share are ranked
FLAT = 0.15  # a logits row whose time grows by less than this share when its logits double: a fixed cost
FIELDS = ("gpu", "source", "timestamp", "version", "harness", "kernel", "provider", "N", "V", "D", "dtype", "ms_p50",
          "predicted_ms", "error", "traced_with", "note")


def harness_point_of():
    """`liger_kernel.point_of`: a published row's `cebench.predict` arguments."""
    sys.path.insert(0, str(ROOT / "results"))
    from calibrate_time import harness

    return harness().point_of


def judge(path: Path = ROWS, repo: Path | None = None) -> list[dict[str, object]]:
    """Each modelled row of `path` with its prediction (`predicted_ms`), relative `error`
    (predicted / published − 1) and the Liger code it was traced with (`calibrate_time.predicted`,
    `repo` a clone of Liger-Kernel); distinct points are predicted once."""
    sys.path.insert(0, str(ROOT / "results"))
    from calibrate_time import predicted
    from releases import CACHE

    rows = []
    for row in predicted(path, repo=repo)[0]:
        answer = row["predicted"]
        ms = answer.get("predicted_time_ms")
        rows.append({**{k: row[k] for k in FIELDS if k in row}, "predicted_ms": ms,
                     "traced_with": "" if row["code"] is None else " ".join(row["code"]),
                     "error": None if ms is None else ms / float(row["ms_p50"]) - 1,
                     "note": (answer.get("note") or answer.get("error") or "").replace(str(CACHE), "<peer cache>")})
    return rows


def committed(path: Path = JUDGED) -> list[dict[str, object]]:
    """The judged rows as `main` wrote them (numbers as numbers)."""
    with path.open(newline="") as f:
        return [{**r, "predicted_ms": float(r["predicted_ms"]) if r["predicted_ms"] else None,
                 "error": float(r["error"]) if r["error"] else None} for r in csv.DictReader(f)]


def fixed_cost(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """The rows of cross-entropy on given logits whose published time grows by less than
    `FLAT` from them to the next row of their run with at least twice the logits (the same
    GPU, source, timestamp, provider and dtype). Every byte that kernel moves is a multiple of
    its logits, so a time that does not grow with them was set by a fixed cost (the host's
    launches, the harness), not by the GPU's work: no roofline speaks to it. Decided on the
    published times alone, never on a prediction."""
    runs = defaultdict(list)
    for r in rows:
        if r["kernel"] == "cross_entropy":
            runs[(r["gpu"], r["source"], r["timestamp"], r["provider"], r["dtype"])].append(r)
    found = []
    for run in runs.values():
        run.sort(key=lambda r: int(r["N"]) * int(r["V"]))
        for i, r in enumerate(run):
            size = int(r["N"]) * int(r["V"])
            later = next((b for b in run[i + 1:] if int(b["N"]) * int(b["V"]) >= 2 * size), None)
            if later is not None and float(later["ms_p50"]) < (1 + FLAT) * float(r["ms_p50"]):
                found.append(r)
    return found


def judged(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """The rows of `rows` the model is judged on: predicted, of at least `LONG_MS`, their time
    set by no fixed cost (`fixed_cost`)."""
    fixed = {id(r) for r in fixed_cost(rows)}
    return [r for r in rows if float(r["ms_p50"]) >= LONG_MS and r["error"] is not None and id(r) not in fixed]


def summary(rows: list[dict[str, object]]) -> dict[str, float]:
    """The figures the model is judged by, over the `judged` of `rows` (errors as shares)."""
    long = judged(rows)
    if not long:
        raise ValueError("no judged row of at least 1 ms")
    errors = sorted(abs(float(r["error"])) for r in long)
    factors = [max(1 + float(r["error"]), 1 / (1 + float(r["error"]))) for r in long]
    groups = defaultdict(list)
    for r in long:
        groups[(r["gpu"], r["source"], r["kernel"], r["N"], r["V"], r["D"], r["dtype"])].append(r)
    pairs = right = 0
    for group in groups.values():
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                ta, tb = float(a["ms_p50"]), float(b["ms_p50"])
                if a["provider"] == b["provider"] or max(ta, tb) / min(ta, tb) - 1 <= APART:
                    continue
                pairs += 1
                right += (ta < tb) == (float(a["predicted_ms"]) < float(b["predicted_ms"]))
    return {"rows": len(long), "short": sum(1 for r in rows if float(r["ms_p50"]) < LONG_MS),
            "fixed": sum(1 for r in fixed_cost(rows) if float(r["ms_p50"]) >= LONG_MS),
            "median": statistics.median(errors), "p90": errors[math.ceil(0.9 * len(errors)) - 1],
            "max_factor": max(factors), "within_2x": sum(f <= 2 for f in factors) / len(factors),
            "pairs": pairs, "ranked": right / pairs if pairs else math.nan}


def by_gpu(rows: list[dict[str, object]]) -> list[tuple[str, dict[str, float]]]:
    """`summary` per GPU and kernel, then of every row."""
    groups = defaultdict(list)
    for r in rows:
        groups[f"{r['gpu']} · {r['kernel']}"].append(r)
    return [(name, summary(g)) for name, g in sorted(groups.items())
            if judged(g)] + [("every row", summary(rows))]


def table(rows: list[dict[str, object]]) -> str:
    """The error table results/README.md shows (Markdown)."""
    lines = ["| rows (≥ 1 ms) | n | median \\|error\\| | 90th pct | worst factor | within 2× | pairs ranked "
             "| fixed cost, apart |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, s in by_gpu(rows):
        ranked = "–" if not s["pairs"] else f"{s['ranked']:.0%} of {s['pairs']}"
        lines.append(f"| {name} | {s['rows']} | {s['median']:.1%} | {s['p90']:.1%} | {s['max_factor']:.2f}× | "
                     f"{s['within_2x']:.0%} | {ranked} | {s['fixed'] or '–'} |")
    return "\n".join(lines)


def draw(rows: list[dict[str, object]], out: Path = FIGURE) -> Path:
    """Predicted against published time, one point per row, per GPU; the diagonal and ±2×."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 6.2), layout="constrained")
    gpus = sorted({str(r["gpu"]) for r in rows})
    markers = {"cross_entropy": "o", "fused_linear_cross_entropy": "^"}
    fixed = [r for r in fixed_cost(rows) if r["predicted_ms"] is not None]
    for i, gpu in enumerate(gpus):
        for kernel, marker in markers.items():
            mine = [r for r in rows if r["gpu"] == gpu and r["kernel"] == kernel and r["predicted_ms"] is not None
                    and not any(r is f for f in fixed)]
            if mine:
                ax.scatter([float(r["ms_p50"]) for r in mine], [float(r["predicted_ms"]) for r in mine], s=14,
                           marker=marker, color=f"C{i}", alpha=0.6,
                           label=f"{gpu} · {'CE' if kernel == 'cross_entropy' else 'FLCE'} ({len(mine)})")
    if fixed:
        ax.scatter([float(r["ms_p50"]) for r in fixed], [float(r["predicted_ms"]) for r in fixed], s=40,
                   facecolors="none", edgecolors="black", lw=0.8,
                   label=f"time a fixed cost set: not judged ({len(fixed)})")
    low, high = 0.05, 2000
    ax.plot([low, high], [low, high], color="black", lw=1)
    for factor in (0.5, 2):
        ax.plot([low, high], [low * factor, high * factor], color="grey", lw=0.8, ls="--")
    ax.axvspan(low, LONG_MS, color="grey", alpha=0.1, lw=0)
    ax.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high), xlabel="published median step (ms)",
           ylabel="cebench predicted (ms)")
    s = summary(rows)
    ax.set_title(f"Time model on {s['rows']} published rows it never saw (≥ 1 ms): median |error| "
                 f"{s['median']:.0%}, 90th pct {s['p90']:.0%}", fontsize=10)
    ax.text(0.06, 0.3, "< 1 ms: fixed costs\n(not judged)", fontsize=8, color="grey")
    ax.text(300, 120, "÷2", color="grey", fontsize=8)
    ax.text(120, 300, "×2", color="grey", fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--liger-repo", type=Path, help="a git clone of linkedin/Liger-Kernel: trace each Liger row "
                        "with the commit that ran it, not the release named on it")
    parser.add_argument("--summary", action="store_true", help=f"print the error table of the committed "
                        f"{JUDGED.relative_to(ROOT)} (seconds), predicting nothing")
    parser.add_argument("--readme", action="store_true", help="also write that table into results/README.md")
    args = parser.parse_args(argv)
    if args.summary:
        rows, s = committed(), summary(committed())
        print(table(rows))
        print(f"\n{s['rows']} rows of 1 ms or more: median error {s['median']:.1%}, 90th percentile {s['p90']:.1%}, "
              f"{s['within_2x']:.1%} within a factor of 2; the faster of two providers named rightly in "
              f"{round(s['ranked'] * s['pairs'])} of {s['pairs']} pairs; {s['fixed']} rows whose time a fixed cost "
              f"set, apart")
        if args.readme:
            from blocks import splice

            splice(ROOT / "results" / "README.md", "time-judged", table(committed()))
        return 0
    rows = judge(repo=args.liger_repo)
    with JUDGED.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    draw(rows)
    print(table(rows))
    print(f"wrote {JUDGED.relative_to(ROOT)}, {FIGURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
