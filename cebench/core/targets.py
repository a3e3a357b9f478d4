"""Named GPU targets: what a prediction needs to know about a card it does not have.

Each target is declared once here (`TARGETS`); `cebench.core.devices` derives a device
from each, `cebench targets` lists them, and `sweep` names the target a measured GPU is
(`match`). A leaf module: no torch, nothing from cebench.

Figures and where they come from:

- `capacity_bytes`: the total memory the card reports to CUDA (`cudaDeviceProp.totalGlobalMem`,
  which `torch.cuda.get_device_properties().total_memory` returns); it varies by a few MiB
  with the driver. Where the source prints MiB (torch prints `total_memory=<bytes // 2**20>MB`)
  the figure is that many MiB.
- `workspace_bytes`: one cuBLAS workspace, allocated through the caching allocator (so it
  counts in `max_memory_allocated`) once per (cuBLAS handle, stream), handles being per
  thread (`aten/src/ATen/cuda/CublasHandlePool.cpp`): `4096 * 1024 * 2 + 16 * 1024 * 8`
  bytes by default (the `:4096:2:16:8` `CUBLAS_WORKSPACE_CONFIG`), `4096 * 8 * 1024` (32 MiB)
  on compute capability 9.x (Hopper) and, in releases that know Blackwell, 10.x and 12.x.
- `bf16_flops`: the dense (no sparsity) BF16 tensor-core rate with FP32 accumulation, from
  NVIDIA's datasheets (FLOP/s).
- `sm_count`: the streaming multiprocessors the card has enabled
  (`torch.cuda.get_device_properties().multi_processor_count`), from NVIDIA's architecture
  whitepapers (Ampere: A100 108 SMs; Hopper: H100 SXM5 132, the H200 the same GH100
  configuration; Ada: RTX 4090 128, L40S 142, CUDA cores / 128 per SM) and, for the B200,
  the 148 that torch reports on one. A peer's code asks for it (and the capability) on a
  GPU target: `cebench.engine.device_view`. AMD's MI300X: its 304 compute units.
- `fp32_flops`: the FP32 rate a matmul in fp32 runs at (torch's default: no TF32), from the
  same datasheets (FLOP/s).
- `fp8_flops`: the dense FP8 (E4M3) tensor-core rate with FP32 accumulation, what
  `torch._scaled_mm` runs at (FLOP/s); None on a card without FP8 tensor cores (Ampere),
  where torch refuses FP8 matmuls and the time model uses the BF16 rate (`Target.peak`).
- `hbm_bytes_per_s`: the memory bandwidth of the datasheet (bytes/s): what every op that
  is not a matmul is bound by in the time model (`cebench.core.timemodel`).
- `link_bytes_per_s`: one direction of the card's link to its peers (bytes/s): NVLink where the
  card has it (its datasheet's total, halved), else PCIe x16 (Infinity Fabric on the MI300X):
  what FSDP's all-gathers and reduce-scatters cross in the time model, at its full rate.
- `arch`: the GPU family whose time-model efficiencies apply (`timemodel.FAMILIES`).
- `vendor`: 'nvidia', or 'amd' (ROCm: torch's CUDA API over HIP; inductor's ROCm code is not
  modelled, so compiled steps are not predicted for it).
"""
from __future__ import annotations

from dataclasses import dataclass

MIB = 2**20
PRECISIONS: tuple[str, str, str] = ("fp32", "half", "fp8")  # the rates a matmul runs at: `Target.peak`
CUBLAS_DEFAULT_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8  # 8,519,680 B: ':4096:2:16:8'
CUBLAS_SM90_WORKSPACE = 4096 * 8 * 1024  # 33,554,432 B: 32 MiB on Hopper (and Blackwell)


@dataclass(frozen=True)
class Target:
    """One GPU model. `names`: substrings of `torch.cuda.get_device_name()` that identify it
    (lower case); `capability`: its compute capability; `capacity_bytes`, `workspace_bytes`
    (bytes), `bf16_flops`, `fp32_flops`, `fp8_flops` (FLOP/s), `hbm_bytes_per_s`, `link_bytes_per_s` (bytes/s),
    `sm_count`,
    `arch` and `vendor` as the module's docstring says; `sources`: where each figure comes from."""

    name: str
    model: str
    capability: tuple[int, int]
    names: tuple[str, ...]
    capacity_bytes: int
    workspace_bytes: int
    bf16_flops: float
    sources: str
    sm_count: int
    fp32_flops: float
    hbm_bytes_per_s: float
    arch: str
    link_bytes_per_s: float
    fp8_flops: float | None = None
    vendor: str = "nvidia"

    def peak(self, precision: str) -> float:
        """The dense matmul rate for data of `precision` (`PRECISIONS`), FLOP/s."""
        if precision == "fp8" and self.fp8_flops:
            return self.fp8_flops
        return self.fp32_flops if precision == "fp32" else self.bf16_flops


DATASHEET_AMPERE = "NVIDIA A100 datasheet: BF16 tensor 312 TFLOPS dense, FP32 19.5 TFLOPS"
TARGETS: tuple[Target, ...] = (
    Target("a100-40gb", "NVIDIA A100 40GB (SXM4)", (8, 0), ("a100-sxm4-40gb", "a100-pcie-40gb", "a100 40gb"),
           42_298_834_944, CUBLAS_DEFAULT_WORKSPACE, 312e12,
           "memory: deviceQuery 'NVIDIA A100-SXM4-40GB', 40339 MBytes (42298834944 bytes), in "
           f"github.com/bottlerocket-os/bottlerocket/pull/3873; {DATASHEET_AMPERE}, 1,555 GB/s HBM2"
           "; link: NVLink 3 600 GB/s both ways",
           sm_count=108, fp32_flops=19.5e12, hbm_bytes_per_s=1555e9, arch="ampere", link_bytes_per_s=300e9),
    # before a100-80gb: `match` takes the first target whose names the GPU's name contains
    Target("a100-80gb-pcie", "NVIDIA A100 80GB PCIe", (8, 0), ("a100 80gb pcie",),
           81_920 * MIB, CUBLAS_DEFAULT_WORKSPACE, 312e12,
           f"memory: as a100-80gb; {DATASHEET_AMPERE}, 1,935 GB/s HBM2e (the SXM4 card: 2,039)"
           "; link: PCIe Gen4 x16 64 GB/s both ways",
           sm_count=108, fp32_flops=19.5e12, hbm_bytes_per_s=1935e9, arch="ampere", link_bytes_per_s=32e9),
    Target("a100-80gb", "NVIDIA A100 80GB (SXM4)", (8, 0), ("a100-sxm4-80gb", "a100 80gb"),
           81_920 * MIB, CUBLAS_DEFAULT_WORKSPACE, 312e12,
           "memory: nvidia-smi memory.total 81920 MiB (github.com/modal-labs/modal-client/pull/2797); no public "
           f"torch print found, and torch reports somewhat less than nvidia-smi (about 0.6 % on H100); "
           f"{DATASHEET_AMPERE}, 2,039 GB/s HBM2e"
           "; link: NVLink 3 600 GB/s both ways", sm_count=108, fp32_flops=19.5e12, hbm_bytes_per_s=2039e9,
           arch="ampere", link_bytes_per_s=300e9),
    Target("h100-80gb", "NVIDIA H100 80GB HBM3 (SXM5)", (9, 0), ("h100 80gb hbm3",),
           85_017_755_648, CUBLAS_SM90_WORKSPACE, 989.4e12,
           "memory: deviceQuery 'NVIDIA H100 80GB HBM3', 81079 MBytes (85017755648 bytes), driver 13.0 (torch "
           "prints total_memory=81082MB to 81090MB on other drivers); NVIDIA H100 datasheet (SXM): BF16 tensor "
           "1,979 TFLOPS with sparsity, 989.4 dense, FP8 3,958 with sparsity, 1,979 dense, FP32 67 TFLOPS, "
           "3.35 TB/s HBM3"
           "; link: NVLink 4 900 GB/s both ways", sm_count=132,
           fp32_flops=67e12, hbm_bytes_per_s=3.35e12, arch="hopper", link_bytes_per_s=450e9, fp8_flops=1979e12),
    Target("h100-nvl", "NVIDIA H100 NVL (94 GB)", (9, 0), ("h100 nvl",),
           99_961_274_368, CUBLAS_SM90_WORKSPACE, 835.5e12,
           "memory: 99961274368 bytes of dedicated memory reported for 'NVIDIA H100 NVL' "
           "(github.com/fastfetch-cli/fastfetch/issues/1658; torch may report a few MiB less); NVIDIA H100 "
           "datasheet (NVL): BF16 tensor 1,671 TFLOPS with sparsity, 835.5 dense, FP8 3,341 with sparsity, 1,670.5 "
           "dense, FP32 60 TFLOPS, 3.9 TB/s HBM3"
           "; link: PCIe Gen5 x16 128 GB/s (its NVLink bridge joins pairs only) both ways",
           sm_count=132, fp32_flops=60e12, hbm_bytes_per_s=3.9e12, arch="hopper", link_bytes_per_s=64e9,
           fp8_flops=1670.5e12),
    Target("h200", "NVIDIA H200 (SXM, 141 GB)", (9, 0), ("h200",),
           143_156 * MIB, CUBLAS_SM90_WORKSPACE, 989.4e12,
           "memory: torch print total_memory=143156MB (vLLM docs); NVIDIA H200 datasheet: BF16 tensor 1,979 "
           "TFLOPS with sparsity, 989.4 dense, FP8 3,958 with sparsity, 1,979 dense, FP32 67 TFLOPS, 4.8 TB/s HBM3e"
           "; link: NVLink 4 900 GB/s both ways", sm_count=132, fp32_flops=67e12,
           hbm_bytes_per_s=4.8e12, arch="hopper", link_bytes_per_s=450e9, fp8_flops=1979e12),
    Target("b200", "NVIDIA B200", (10, 0), ("b200",),
           182_631 * MIB, CUBLAS_SM90_WORKSPACE, 2.25e15,
           "memory: torch print total_memory=182631MB (182642MB on another driver); workspace: 32 MiB for "
           "capability 10.x in torch releases that know Blackwell; NVIDIA DGX B200 datasheet: FP16/BF16 4.5 "
           "PFLOPS per GPU with sparsity, 2.25 dense, FP8 9 PFLOPS with sparsity, 4.5 dense; HGX B200: FP32 600 "
           "TFLOPS for 8 GPUs, 8 TB/s HBM3e per GPU"
           "; link: NVLink 5 1.8 TB/s both ways",
           sm_count=148, fp32_flops=75e12, hbm_bytes_per_s=8e12, arch="blackwell", link_bytes_per_s=900e9,
           fp8_flops=4.5e15),
    Target("l40s", "NVIDIA L40S", (8, 9), ("l40s",),
           45_589 * MIB, CUBLAS_DEFAULT_WORKSPACE, 362.05e12,
           "memory: torch print total_memory=45589MB; NVIDIA L40S datasheet: BF16 tensor 733 TFLOPS with "
           "sparsity, 362.05 dense, FP8 1,466 with sparsity, 733 dense, FP32 91.6 TFLOPS, 864 GB/s GDDR6"
           "; link: PCIe Gen4 x16 64 GB/s both ways", sm_count=142, fp32_flops=91.6e12,
           hbm_bytes_per_s=864e9, arch="ada", link_bytes_per_s=32e9, fp8_flops=733e12),
    Target("rtx-4090", "NVIDIA GeForce RTX 4090", (8, 9), ("rtx 4090",),
           24_563 * MIB, CUBLAS_DEFAULT_WORKSPACE, 165.2e12,
           "memory: torch print total_memory=24563MB; NVIDIA Ada whitepaper: BF16 tensor with FP32 accumulate "
           "165.2 TFLOPS dense (330.3 with sparsity), FP8 with FP32 accumulate 330.3 dense, FP32 82.6 TFLOPS, "
           "1,008 GB/s GDDR6X"
           "; link: PCIe Gen4 x16 64 GB/s both ways", sm_count=128,
           fp32_flops=82.6e12, hbm_bytes_per_s=1008e9, arch="ada", link_bytes_per_s=32e9, fp8_flops=330.3e12),
    Target("mi300x", "AMD Instinct MI300X", (9, 4), ("mi300x",),
           205_822_885_888, 0, 1307.4e12,
           "memory: totalGlobalMem 205822885888 bytes (rocm-smi and hipDeviceProp prints); workspace: none in the "
           "caching allocator, as Liger-Kernel's published MI300X memory rows (ROCm, 2024-10) show; AMD MI300X "
           "datasheet: BF16 1,307.4 TFLOPS dense, FP8 2,614.9 dense, FP32 163.4 TFLOPS, 5.3 TB/s HBM3, 304 "
           "compute units"
           "; link: 7 Infinity Fabric links, 896 GB/s both ways",
           sm_count=304, fp32_flops=163.4e12, hbm_bytes_per_s=5.3e12, arch="cdna3", link_bytes_per_s=448e9,
           fp8_flops=2614.9e12, vendor="amd"),
)
BY_NAME: dict[str, Target] = {t.name: t for t in TARGETS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
# The card a peer's code is shown on a GPU target that names none (`cuda`): its capability and SM count.
DEFAULT_GPU = BY_NAME["h100-80gb"]


def match(device_name: str) -> str:
    """The named target a GPU called `device_name` (`torch.cuda.get_device_name()`) is, or ''
    when none is (a CPU, another GPU)."""
    key = device_name.lower()
    return next((t.name for t in TARGETS if any(n in key for n in t.names)), "")
