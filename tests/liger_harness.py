"""What Liger-Kernel's benchmark harness publishes, and holds beside the step it measures:
shared by the tests that reproduce its rows (`test_published.py`: the plain-PyTorch
provider; `test_published_liger_own.py`: Liger's own). The figures are facts copied from
the public sources each test names.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cebench.core import devices

ROOT = Path(__file__).resolve().parents[1]
HARNESS = str(ROOT / "results" / "published" / "liger_kernel.py")
PUBLISHED_DATA = ROOT / "results" / "published"  # the published data files, with their sources (README.md there)
# The GPU each row was measured on → the target it is predicted for. MI300X (ROCm, Oct 2024)
# and H100 NVL (not a named target) are the generic `cuda`: no cuBLAS workspace counted,
# which the MI300X rows confirm (hipBLAS then kept its workspace outside the caching
# allocator) and the H100 NVL rows do not test (cross_entropy alone runs no matmul).
TARGET = {"NVIDIA A100-SXM4-80GB": "a100-80gb", "NVIDIA A100 80GB PCIe": "a100-80gb", "NVIDIA L40S": "l40s",
          "NVIDIA H100 80GB HBM3": "h100-80gb", "AMD Instinct MI300X": "cuda", "NVIDIA H100 NVL": "cuda"}
H, V_FLCE = 4096, 128256  # the fused linear cross-entropy benchmark's hidden size and vocabulary (bf16)


def idle_weight(target: str) -> int:
    """Bytes of the V × H bf16 weight of the harness's other module: it builds its torch and
    its Liger module both, each with its own `nn.Linear`, and runs one of them."""
    return devices.get(target).block_bytes(V_FLCE * H * 2)


def float32_mib(nbytes: int) -> float:
    """What the harness publishes for `nbytes`: MiB, stored as float32 (`_test_memory`)."""
    return float(np.float32(nbytes / 2**20))


def ulp(mib: float) -> float:
    """The float32 spacing at `mib`."""
    return float(np.spacing(np.float32(mib)))
