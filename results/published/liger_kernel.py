"""Liger-Kernel's plain-PyTorch fused-linear benchmark loss (provider `huggingface`) as a cebench
user variant, op for op from `benchmark/scripts/benchmark_fused_linear_cross_entropy.py` of
linkedin/Liger-Kernel (2024-09 to 2025-07), and the cebench point of each published timing
row (`point_of`). Written here from what those scripts do; no code copied. Its
`cross_entropy` benchmark (`nn.CrossEntropyLoss()` on a (B·T, V) fp32 input) is cebench's
logits workload (`--workload logits --variant dense`).

Both harnesses call `.backward()` on the mean loss and never reset `.grad` (cebench's
`--grads keep`), and report `torch.cuda.max_memory_allocated() / 2**20` as float32 MiB.

    cebench predict --variant results/published/liger_kernel.py:flce_huggingface \\
        --target a100-80gb --grads keep --dtype bf16 --batch 4096 --context 1 --vocab 128256 --d-model 4096

The same script's `liger` provider needs no function here: `LigerLMHeadCE` calls
`LigerFusedLinearCrossEntropyLoss(ignore_index=-100, reduction="mean")(lin.weight, x, y)`,
which calls the release's autograd Function with its other arguments at their defaults, as
cebench's `--variant liger-kernel` does (`tests/test_published_liger_own.py` traces it with
each release that measured a row).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def flce_huggingface(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """`TorchLMHeadCE`: `nn.Linear(H, V, bias=False)` in the input dtype, then
    `nn.CrossEntropyLoss(ignore_index=-100, reduction="mean")` on the logits as they are (no
    fp32 upcast)."""
    logits = F.linear(h, weight)
    return F.cross_entropy(logits, targets, ignore_index=-100, reduction="mean")


# Liger-Kernel's benchmark rows (`liger_kernel_speed_rows_*.csv`) → the cebench point that runs the same step.
HERE = "results/published/liger_kernel.py"
GPUS = {"NVIDIA A100-SXM4-80GB": "a100-80gb", "NVIDIA A100 80GB PCIe": "a100-80gb-pcie", "NVIDIA L40S": "l40s",
        "NVIDIA H100 80GB HBM3": "h100-80gb", "NVIDIA H100 NVL": "h100-nvl", "NVIDIA H200": "h200",
        "NVIDIA B200": "b200", "AMD Instinct MI300X": "mi300x"}
PLAIN = ("huggingface", "torch")  # plain PyTorch: the provider's name before and after the 2026 refactor
LIGER = ("liger", "liger_triton")  # Liger's Triton kernels, likewise
COMPILED = ("torchcompile",)  # `torch.compile(nn.CrossEntropyLoss())`: cebench's dense-compiled
# Harnesses whose `full` mode resets the input's `.grad` before every call (the FLCE weight's still accumulates) and
# backpropagates a random upstream gradient, not 1.0: Liger's backward then scales its gradients in extra passes.
REFACTORED = ("liger-2026-05",)


def point_of(row: dict[str, str]) -> dict[str, object] | str:
    """The `cebench.predict` arguments of a published timing row, or why it is not modelled.
    Its `full` mode is the loss and its backward with `.grad` accumulating (`grads="keep"`;
    where the harness resets the input's gradient, the cross-entropy of given logits has
    none to accumulate: `grads="none"`); `cross_entropy` is the logits workload,
    `fused_linear_cross_entropy` the loss workload; the compiled provider is `dense-compiled`.
    Not modelled: the `forward`, `backward` and `no-grad-forward` modes (cebench times
    forward and backward), Liger's fp32-accumulating and CuTe/cuTile kernels, Liger's rows of the 2026 harness (its
    random upstream gradient makes Liger's backward scale the gradients in passes a step
    that backpropagates 1.0 skips), a GPU no target describes."""
    if row["mode"] != "full":
        return f"mode {row['mode']}: cebench predicts forward + backward"
    target = GPUS.get(row["gpu"])
    if target is None:
        return f"{row['gpu']}: no named target"
    if row["provider"] not in PLAIN + LIGER + COMPILED:
        return f"provider {row['provider']}: not modelled"
    if row["provider"] in LIGER and row["harness"] in REFACTORED:
        return f"harness {row['harness']}: Liger's backward scales by a random upstream gradient, not modelled"
    n, v, d = int(row["N"]), int(row["V"]), int(row["D"])
    common = {"target": target, "batch": n, "context": 1, "grads": "keep", "dtype": row["dtype"]}
    if row["kernel"] == "cross_entropy":
        grads = "none" if row["harness"] in REFACTORED else "keep"
        variant = ("dense" if row["provider"] in PLAIN else "liger-kernel" if row["provider"] in LIGER
                   else "dense-compiled")
        return {**common, "grads": grads, "workload": "logits", "variant": variant, "vocab": v}
    if row["kernel"] == "fused_linear_cross_entropy":
        if row["provider"] in COMPILED:
            return "a compiled fused-linear provider: not modelled"
        variant = f"{HERE}:flce_huggingface" if row["provider"] in PLAIN else "liger-kernel"
        return {**common, "variant": variant, "vocab": v, "d_model": d}
    return f"kernel {row['kernel']}: not modelled"
