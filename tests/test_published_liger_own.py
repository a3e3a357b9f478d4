"""Liger-Kernel's own fused linear cross-entropy, predicted with the release that measured
each published figure: Liger's benchmark rows (provider `liger`) and Liger's row of the Cut
Cross-Entropy paper's Table 1.

Each release is installed beside the suite's (`peer_releases`: pip --no-deps into a cache
shared by every run) and traced in one child process that predicts all of its points. The
harness's loss is cebench's `--variant liger-kernel` itself: Liger's harness calls
`LigerFusedLinearCrossEntropyLoss(ignore_index=-100, reduction="mean")(lin.weight, x, y)`,
which calls the release's autograd Function with every other argument at its default, as
cebench does.

Liger's harness (`benchmark/scripts/benchmark_fused_linear_cross_entropy.py` and `utils.py`;
their memory benchmark is the same from 2024-09-03 to 2025-07): ten iterations of forward +
`backward()`, `.grad` never reset (`--grads keep`), `max_memory_allocated() / 2**20` as float32.
What it holds beside cebench's step, by name (`harness_bytes`):

- `idle_weight`: its torch module's own V × H weight, built beside the Liger module's;
- the autograd thread's cuBLAS workspace: Liger's backward runs no matmul, but the script runs
  every speed benchmark before the memory ones in the same process, torch's backward matmuls
  among them, and the workspace they made stays allocated;
- `split_off`: by then the caching allocator holds the freed blocks of those benchmarks (GBs of
  torch's logits), and each request is split off one of them and charged its size rounded up
  to 512 B. A trace charges a fresh segment, which keeps a remainder of up to 1 MiB: at BT 4096
  a bf16 logits chunk of 31.3125 MiB in a 32 MiB segment, two of them at the peak;
- `RESIDUE`: at BT 8192 and 16384 the published figure is above that by what one block split
  off a cached block keeps of its remainder (at most 1 MiB): which block, and which remainder,
  follows from every allocation the script made before, which no trace of one step sees. The
  three 2024 runs (two GPUs, two releases) agree on it.

The H100 rows (`0.6.0`, 2025) were measured with another fused linear cross-entropy, not a
release: `test_the_h100_rows_are_not_release_0_6_0`.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from cebench.core import devices
from liger_harness import PUBLISHED_DATA, TARGET, V_FLCE, H, float32_mib, idle_weight, ulp
from peer_releases import installed, predict_with

pytestmark = [pytest.mark.needs("triton"), pytest.mark.slow]  # a published row at its full size, seconds each

MIB = 2**20
A100, L40S, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA H100 80GB HBM3"
# linkedin/Liger-Kernel benchmark/data/all_benchmark_data.csv: (GPU, liger_version) → {BT: y_value_50 MiB}
OWN: dict[tuple[str, str], dict[int, float]] = {
    (A100, "0.2.1"): {4096: 4245.546875, 8192: 4466.96875, 16384: 4910.4375, 32768: 5794.625},  # 2024-09-03
    (L40S, "0.2.1"): {4096: 4245.5469, 8192: 4466.9688, 16384: 4910.4375, 32768: 5794.625},  # 2024-09-04
    (A100, "0.4.2"): {4096: 4245.5478515625, 8192: 4466.9697265625, 16384: 4910.4384765625,  # 2024-11-22
                      32768: 5794.6259765625},
    (H100, "0.6.0"): {4096: 8709.0546875, 8192: 12845.10546875, 16384: 21117.20703125,  # 2025-07-23
                      32768: 22503.412109375},
}
RESIDUE = {8192: 131_072, 16384: MIB}  # bytes, BT → (see the module's docstring)
# The H100 rows, less the harness's prediction for release 0.6.0 (MiB; `test_the_h100_rows_are_not_release_0_6_0`).
H100_GAP = {4096: 4478.37890625, 8192: 8455.75390625, 16384: 16410.50390625, 32768: 17162.005859375}
# Cut Cross-Entropy paper (arXiv 2411.09009), Table 1, "Liger Kernels", loss + gradient: MB as printed (MiB, rounded).
TABLE1_MB = 1474
TABLE1 = dict(target="a100-80gb", variant="liger-kernel", dtype="bf16", batch=8192, context=1, vocab=256_000,
              d_model=2304, softcap=30.0)
TABLE1_RELEASE = "0.4.1"  # the release the paper ran: see test_cce_table1_liger_row


def own_grid(gpu: str, bt: int) -> dict:
    """`cebench.api.predict`'s keywords for the harness's step of an own row."""
    return dict(target=TARGET[gpu], variant="liger-kernel", grads="keep", dtype="bf16", batch=bt, context=1,
                vocab=V_FLCE, d_model=H)


def calls(release: str) -> dict[tuple, dict]:
    """Every point this module predicts with `release`, by key: its own rows (charged as split
    off cached blocks), 0.2.1's at BT 4096 on the A100 also as a trace charges it, and Table 1's
    point."""
    points = {("own", gpu, bt): dict(grid=own_grid(gpu, bt), split_off=True)
              for (gpu, version), values in OWN.items() if version == release for bt in values}
    if release == "0.2.1":
        points["fresh", A100, 4096] = dict(grid=own_grid(A100, 4096), split_off=False)
    if release in ("0.2.1", "0.4.2", TABLE1_RELEASE):
        points["table1"] = dict(grid=TABLE1, split_off=False)
    return points


@pytest.fixture(scope="module")
def traced():
    """release → {key → predicted row}: one child process per release, run when first asked."""
    done: dict[str, dict[tuple, dict]] = {}

    def rows(release: str) -> dict[tuple, dict]:
        if release not in done:
            wanted = calls(release)
            answers = predict_with(installed("liger-kernel", release), "liger_kernel", list(wanted.values()))
            done[release] = dict(zip(wanted, answers, strict=True))
        return done[release]

    return rows


def harness_bytes(row: dict, gpu: str) -> int:
    """What the harness's `max_memory_allocated` holds for a predicted own-row step: the step
    (its inputs, kept gradients and forward's workspace included), the idle weight and the
    autograd thread's workspace."""
    assert row["status"] == "ok", row["error"]
    target = TARGET[gpu]
    return row["peak_bytes"] + idle_weight(target) + devices.get(target).workspace_bytes


ROWS_2024 = [(gpu, release, bt, mib) for (gpu, release), values in OWN.items() if release != "0.6.0"
             for bt, mib in values.items()]


@pytest.mark.parametrize(("gpu", "release", "bt", "mib"), ROWS_2024, ids=lambda v: str(v).removeprefix("NVIDIA "))
def test_every_2024_own_row_is_reproduced(traced, gpu, release, bt, mib):
    row = traced(release)["own", gpu, bt]
    assert row["note"].startswith(f"Triton launches skipped (liger_cross_entropy_kernel): their buffers are "
                                  f"liger-kernel {release}'s Python")
    predicted = harness_bytes(row, gpu) + RESIDUE.get(bt, 0)
    assert abs(float32_mib(predicted) - mib) <= ulp(mib), (predicted, predicted / MIB, mib)


def test_the_terms_of_one_row_to_the_byte(traced):
    """A100, 0.2.1, BT 4096 (32 chunks of 128 rows): the published figure is exactly
    representable. Liger's buffers at its peak, the second chunk's `.float()`: its gradients
    (V × H and BT × H bf16), the fp32 losses, the previous chunk's scaled gradient, this
    chunk's bf16 logits and their fp32 copy; beside them the step's inputs, the gradients kept
    from the previous iteration, the two modules' weights and two 8,519,680-byte workspaces.
    A trace's fresh segments would charge the two bf16 chunks 32 MiB each."""
    release = traced("0.2.1")
    row = release["own", A100, 4096]
    bt, chunk = 4096, 128
    weight, x, logits = V_FLCE * H * 2, bt * H * 2, chunk * V_FLCE * 2
    inputs = 3 * weight + 2 * x + bt * 8  # both modules' weights, x, the targets, the kept .grad of x and weight
    liger = weight + x + bt * 4 + 2 * logits + 2 * logits
    workspaces = 2 * 8_519_680
    assert harness_bytes(row, A100) == inputs + liger + workspaces == 4245.546875 * MIB
    assert release["fresh", A100, 4096]["peak_bytes"] - row["peak_bytes"] == 2 * (32 * MIB - logits)


def test_release_0_4_2_holds_1024_bytes_more():
    """0.4.2 keeps the count of real targets and each chunk's scale as 0-dim tensors (two
    512-byte blocks) where 0.2.1 keeps Python numbers: the published rows differ by exactly that
    at every BT (float32 resolves 512 B below 8 GiB)."""
    for bt in OWN[A100, "0.2.1"]:
        assert (OWN[A100, "0.4.2"][bt] - OWN[A100, "0.2.1"][bt]) * MIB == 1024


def test_release_0_4_2_is_traced_1024_bytes_above_0_2_1(traced):
    for bt in OWN[A100, "0.2.1"]:
        assert traced("0.4.2")["own", A100, bt]["peak_bytes"] - traced("0.2.1")["own", A100, bt]["peak_bytes"] == 1024


def test_the_h100_rows_are_not_release_0_6_0(traced):
    """The H100 rows, labelled 0.6.0 (2025-07-23), exceed the harness's prediction for release
    0.6.0 by 4.4 to 17 GiB: they were not measured with it. They were committed, with that
    run's timestamp, by commit 99f0bcea of linkedin/Liger-Kernel ("layer_norm", 2025-07-23: a
    contributor's branch, the head of pull requests #836, #841, #843 and #853, never in a
    release; reverted there on 2025-07-25 by 878ed444), which also rewrote
    `src/liger_kernel/ops/fused_linear_cross_entropy.py`: FP8 matmuls (`torch._scaled_mm` on an
    FP8 copy of the weight made at every forward and on each chunk's inputs), chunks of
    min(16384, BT) rows and, for ∇weight, an FP8 product added into it. The harness is the
    2024 rows'. That file in place of 0.6.0's, traced with the same terms (no residue), gives
    every H100 row to the byte (`test_the_h100_rows_are_commit_99f0bcea`)."""
    for bt, mib in OWN[H100, "0.6.0"].items():
        predicted = harness_bytes(traced("0.6.0")["own", H100, bt], H100)
        assert abs(mib - predicted / MIB - H100_GAP[bt]) <= ulp(mib), (bt, mib - predicted / MIB)


FORK = os.environ.get("CEBENCH_LIGER_99F0BCEA")


@pytest.mark.skipif(not FORK, reason="set CEBENCH_LIGER_99F0BCEA to a directory holding liger-kernel 0.6.0 "
                                     "(pip install --no-deps --target DIR liger-kernel==0.6.0) whose "
                                     "liger_kernel/ops/fused_linear_cross_entropy.py is that of linkedin/Liger-Kernel "
                                     "commit 99f0bcea (refs/pull/836/head holds it)")
def test_the_h100_rows_are_commit_99f0bcea():
    values = OWN[H100, "0.6.0"]
    rows = predict_with(Path(str(FORK)), "liger_kernel", [dict(grid=own_grid(H100, bt), split_off=True)
                                                          for bt in values])
    for (bt, mib), row in zip(values.items(), rows, strict=True):
        assert float32_mib(harness_bytes(row, H100)) == mib, (bt, row)


def test_cce_table1_liger_row(traced):
    """The Cut Cross-Entropy paper's Table 1, Liger: 1474 MB (MiB) for loss + gradient at N 8192,
    vocab 256,000, d 2304, bf16, Gemma 2's softcap 30, A100-SXM4-80GB.

    The release: the paper's first version is of 2024-11-13 and its benchmark applies the
    softcap; Liger's fused linear cross-entropy takes one from 0.4.1 (2024-11-12) on; 0.4.2 came
    on 2024-11-17 and holds the same bytes here (so does 0.3.1 without the softcap, which it
    lacks; 0.5.0, which no longer copies each chunk's logits to fp32, 63.5 MiB less). 0.2.1
    refuses the softcap in one line.

    The harness (apple/ml-cross-entropy `benchmark/memory.py`): after a warm-up run, `.grad`
    set to None, `gc.collect()` and `torch.cuda.empty_cache()`, the peak of allocated bytes
    during forward and backward minus the bytes allocated before: cebench's `peak_delta_bytes`
    for `--grads none` (the workspace the warm-up made is in the base; the emptied cache leaves
    fresh segments, as a trace charges them). Liger at its peak: ∇weight (256,000 × 2304 bf16 in
    a fresh 1126 MiB segment, whose 1 MiB remainder stays with it), ∇h, the fp32 losses, the
    previous chunk's scaled gradient and this chunk's bf16 logits (62.5 MiB each, 128 rows) and
    their fp32 copy (126 MiB segment, the same): 1413.03 MiB.

    Residue, not explained: the paper's figure is 61 ± 0.5 MiB more, about one more bf16
    logits chunk than any release holds. The public benchmark has no `impl="liger"` branch
    (`benchmark/__main__.py` only skips "liger" for the lse kinds): the call the paper made is
    not published."""
    by_release = {release: traced(release)["table1"] for release in ("0.2.1", "0.4.2", TABLE1_RELEASE)}
    row = by_release[TABLE1_RELEASE]
    assert row["status"] == "ok", row["error"]
    assert row["note"].endswith(f"liger-kernel {TABLE1_RELEASE}'s Python, followed on meta")
    chunk, vocab, d, n = 128, 256_000, 2304, 8192
    gradients = (vocab * d * 2 + MIB) + n * d * 2
    assert row["peak_delta_bytes"] == gradients + n * 4 + 2 * chunk * vocab * 2 + 126 * MIB + 2 * 512
    assert round(row["peak_delta_bytes"] / MIB + 61) == TABLE1_MB  # the residue, to the printed MB
    assert by_release["0.4.2"]["peak_delta_bytes"] == row["peak_delta_bytes"]
    assert by_release["0.2.1"]["status"] == "error"
    assert by_release["0.2.1"]["error"] == ("ValueError: liger-kernel 0.2.1 cannot do softcap 30.0: its fused linear "
                                            "cross-entropy has no softcap")


ROWS = PUBLISHED_DATA / "liger_kernel_own_flce_rows.csv"


def test_every_row_of_the_data_file_is_held_here():
    with ROWS.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == sum(len(values) for values in OWN.values())
    for r in rows:
        assert (r["kernel_provider"], r["kernel_name"], r["metric_name"]) == ("liger", "fused_linear_cross_entropy",
                                                                            "memory"), r
        config = json.loads(r["extra_benchmark_config_str"])
        assert (config["H"], config["V"], config["dtype"]) == (H, V_FLCE, "torch.bfloat16")
        assert OWN[r["gpu_name"], r["liger_version"]][int(r["x_value"])] == float(r["y_value_50"]), r
