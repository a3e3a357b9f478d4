"""Calibrate the time model's efficiencies (`cebench.core.timemodel.FAMILIES`) on Liger-Kernel's
2024 timing rows, and only on them.

    .venv/bin/python results/calibrate_time.py --liger-repo ../Liger-Kernel   # fit, print each row, rewrite
    .venv/bin/python results/calibrate_time.py --check ...   # fit, and fail if the committed constants differ

`--liger-repo`: a git clone of linkedin/Liger-Kernel (all branches): each Liger row is traced
with the commit that ran it; without it, with the release named on the row (pip, cached).

Each modelled row of `results/published/liger_kernel_speed_rows_2024.csv` (`liger_kernel.point_of`:
the `full` mode of cross-entropy on given logits and of fused linear cross-entropy, plain
PyTorch and Liger's) is traced once on meta for its GPU, a Liger row with the code that ran
it (`predicted`; `cebench.engine.costs`: every op's class, FLOPs and bytes); then, per GPU
family, the six constants that minimise the squared log error of the predicted against the
published median are found (Nelder-Mead over their logarithms, each efficiency within
[0.05, 1], launches within [1, 20] µs). The rows later
published (`liger_kernel_speed_rows_later.csv`) are never read here: `results/judge_time.py`
judges the constants on them.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS = ROOT / "results" / "published" / "liger_kernel_speed_rows_2024.csv"
MODULE = ROOT / "cebench" / "core" / "timemodel.py"
START, END = "# <generated: results/calibrate_time.py>\n", "# </generated>\n"
FIRST = (0.7, 0.7, 0.8, 0.7, 0.7, 5.0)  # the search's start: each `Efficiency` field's, in order
LOW, HIGH = (0.05,) * 5 + (1.0,), (1.0,) * 5 + (20.0,)


def harness():
    """results/published/liger_kernel.py as a module (its name would shadow the real liger_kernel)."""
    spec = importlib.util.spec_from_file_location("liger_harness", ROOT / "results" / "published" / "liger_kernel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMMIT = re.compile(r"benchmarks/([0-9a-f]{7,40})[^/]*/benchmark\.csv|@ ([0-9a-f]{7,40})")


def code_of(row: dict[str, str], repo: Path | None) -> tuple[str, str] | None:
    """The Liger code a row ran: ('commit', sha) where `repo` (a clone of Liger-Kernel) is
    given and the row names a commit (a nightly build's directory is the main commit it
    built; else the commit that published the row), else ('release', its version label);
    None for a row that runs no Liger code."""
    if row["grid"]["variant"] != "liger-kernel":
        return None
    found = COMMIT.search(row["source"]) if repo is not None else None
    return ("commit", found.group(1) or found.group(2)) if found else ("release", row["version"])


def predicted(path: Path, ops: bool = False, repo: Path | None = None) -> tuple[list[dict], list[tuple[dict, str]]]:
    """The rows of `path` that are modelled (`liger_kernel.point_of`), each with its `grid`,
    the Liger code it is traced with (`code`: `code_of`) and its `predicted` row
    (`releases.FIELDS`; with `ops`, the ops its step ran), and the others with why not. A
    Liger row is traced with the code that ran it (its Python decides the chunks, buffers
    and kernels), the others with this environment's code; each distinct point once."""
    import releases

    from cebench.core.timemodel import OpCost

    point_of = harness().point_of
    modelled, skipped = [], []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            grid = point_of(row)
            if isinstance(grid, str):
                skipped.append((row, grid))
            else:
                modelled.append({**row, "grid": grid})
    by_code: dict[tuple[str, str] | None, dict[tuple, dict]] = defaultdict(dict)
    for r in modelled:
        r["code"] = code_of(r, repo)
    for r in modelled:  # a commit the clone lacks (a fork's): the release named on the row
        if r["code"] is not None and r["code"][0] == "commit" and not _has(repo, r["code"][1]):
            r["code"] = ("release", r["version"])
        by_code[r["code"]][key(r["grid"])] = {"grid": r["grid"], "ops": ops}
    answers = {}
    for code, calls in by_code.items():
        if code is None:
            found = releases.answer(list(calls.values()))
        else:
            try:
                directory = (releases.installed("liger-kernel", code[1]) if code[0] == "release"
                             else releases.from_commit(repo, code[1]))  # type: ignore[arg-type]
            except releases.Unavailable as exc:
                found = [{"status": "unavailable", "error": str(exc)}] * len(calls)
            else:
                found = releases.predict_with(directory, "liger_kernel", list(calls.values()))
        for k, answer in zip(calls, found, strict=True):
            if "ops" in answer:
                answer["ops"] = Counter({OpCost(kind, precision, flops, nbytes, op): n
                                         for kind, precision, flops, nbytes, op, n in answer["ops"]})
            answers[(code, k)] = answer
    for r in modelled:
        r["predicted"] = answers[(r["code"], key(r["grid"]))]
    return modelled, skipped


def _has(repo: Path | None, commit: str) -> bool:
    """Whether the git repository `repo` holds `commit`."""
    import subprocess

    return repo is not None and subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
                                               capture_output=True).returncode == 0


def key(grid: dict[str, object]) -> tuple:
    """A point's identity among the rows (its `predict` arguments)."""
    return tuple(sorted(grid.items()))


def fit(rows: list[dict], family: str):
    """The `Efficiency` that minimises the squared log error over `rows` (all of one family)."""
    import numpy as np
    from scipy.optimize import minimize

    from cebench.core import targets, timemodel

    measured = np.log([float(r["ms_p50"]) for r in rows])
    cards = [targets.BY_NAME[r["grid"]["target"]] for r in rows]

    def constants(theta) -> timemodel.Efficiency:
        values = np.clip(np.exp(theta), LOW, HIGH)
        return timemodel.Efficiency(*map(float, values), rows="")

    def loss(theta) -> float:
        c = constants(theta)
        predicted = [timemodel.step_ms(r["ops"], card, c) for r, card in zip(rows, cards, strict=True)]
        return float(np.mean((np.log(predicted) - measured) ** 2))

    best = minimize(loss, np.log(FIRST), method="Nelder-Mead",
                    options={"maxiter": 4000, "xatol": 1e-4, "fatol": 1e-10})
    c = constants(best.x)
    gpus = sorted({r["gpu"] for r in rows})
    shares = (c.matmul, c.matmul_memory, c.elementwise, c.reduction, c.fused)
    return timemodel.Efficiency(*(round(v, 4) for v in shares), round(c.launch_us, 2),
                                rows=f"{len(rows)} rows of {', '.join(gpus)} (Liger-Kernel 2024)")


def block(found: dict[str, object]) -> str:
    """The generated block of `cebench.core.timemodel` holding `found` (family → Efficiency)."""
    lines = [START, "FAMILIES: dict[str, Efficiency] = {\n"]
    for family, c in sorted(found.items()):
        lines.append(f'    "{family}": Efficiency({c.matmul}, {c.matmul_memory}, {c.elementwise}, {c.reduction}, '
                     f'{c.fused}, {c.launch_us},\n'
                     f'                          rows="{c.rows}"),\n')
    lines += ["}\n", END]
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed constants differ from a fit")
    parser.add_argument("--liger-repo", type=Path, help="a git clone of linkedin/Liger-Kernel: trace each Liger row "
                        "with the commit that ran it, not the release named on it")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "results"))
    from cebench.core import targets, timemodel

    modelled, skipped = predicted(ROWS, ops=True, repo=args.liger_repo)
    failed = [r for r in modelled if r["predicted"]["status"] != "ok"]
    for r in failed:
        print(f"not predicted: {r['gpu']} {r['kernel']} {r['provider']} {r['version']}: {r['predicted']['error']}")
    by_family: dict[str, list[dict]] = defaultdict(list)
    for r in modelled:
        if r["predicted"]["status"] == "ok":
            r["ops"] = r["predicted"]["ops"]
            by_family[targets.BY_NAME[r["grid"]["target"]].arch].append(r)
    found = {family: fit(rows, family) for family, rows in by_family.items()}
    print(f"{len(modelled) - len(failed)} rows modelled, {len(skipped)} not "
          f"({Counter(why.split(':')[0] for _, why in skipped)}), {len(failed)} failed")
    for family, rows in sorted(by_family.items()):
        c = found[family]
        errors = [timemodel.step_ms(r["ops"], targets.BY_NAME[r["grid"]["target"]], c) / float(r["ms_p50"]) - 1
                  for r in rows]
        print(f"{family}: {c}; |error| median {sorted(map(abs, errors))[len(errors) // 2]:.1%}, "
              f"max {max(map(abs, errors)):.1%}")
        for r, e in zip(rows, errors, strict=True):
            print(f"  {r['gpu'][:22]:22} {r['kernel'][:14]:14} {r['provider'][:11]:11} N {r['N']:>6} V {r['V']:>6}"
                  f"  {float(r['ms_p50']):8.3f} ms  {e:+.1%}")
    text = MODULE.read_text()
    new = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block(found), text, flags=re.S)
    if args.check:
        if new != text:
            print("the committed constants differ from this fit: run results/calibrate_time.py", file=sys.stderr)
            return 1
        return 0
    MODULE.write_text(new)
    print(f"wrote {MODULE.relative_to(ROOT)}")
    return 0 if all(math.isfinite(c.launch_us) for c in found.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
