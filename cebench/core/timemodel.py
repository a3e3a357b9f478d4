"""A GPU step's time, predicted: a roofline summed op by op over the ops a trace saw.

Each op (`OpCost`: its class, the precision of its data, its FLOPs and the bytes it moves,
from `cebench.engine.costs`) takes

    launch + max(flops / (peak · matmul), bytes / (bandwidth · e_class))

seconds on a named GPU (`cebench.core.targets`: `peak` is its dense rate for the op's
precision, `Target.peak`; `bandwidth` its memory's), where `e_class` is the
efficiency of the op's class (elementwise, reduction, fused Triton loss kernel) and `launch`
the fixed cost of one kernel. A collective takes
launch + the bytes each rank sends / the card's link bandwidth (`Target.link_bytes_per_s`,
its datasheet's rate: no published row calibrates it). FSDP's all-gathers and reduce-scatters
run beside the computation, as FSDP overlaps them: a step takes the longer of those and
everything else; tensor parallelism's (`IN_LINE`) are waited for where they run, and add.

The efficiencies are the model's only fitted constants, one set per GPU family (`FAMILIES`),
calibrated by `results/calibrate_time.py` on Liger-Kernel's 2024 timing rows alone
(`results/published/liger_kernel_speed_rows_2024.csv`) and judged on published rows they
never saw. A family without rows borrows another's (`BORROWED`), and its rows say so.

A leaf module: no torch, nothing from cebench but the targets and the world.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cebench.core.targets import PRECISIONS, Target
from cebench.core.world import World

MATMUL, ELEMENTWISE, REDUCTION, FUSED, SYNC = "matmul", "elementwise", "reduction", "fused", "sync"
FP32, HALF, FP8 = PRECISIONS
COLLECTIVE = "collective"
# The collectives whose result the next op waits for (tensor parallelism's: DTensor's functional ones and the
# vocab-parallel loss's all-reduces): they add to the step; the others (FSDP's gathers and reductions) overlap it.
IN_LINE = frozenset({"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "allreduce_"})
CLASSES: tuple[str, ...] = (MATMUL, ELEMENTWISE, REDUCTION, FUSED, SYNC, COLLECTIVE)
SHORT_MS = 1.0  # below this a step is mostly fixed costs: launches and syncs, which the model knows least


@dataclass(frozen=True)
class OpCost:
    """One op as the time model sees it: its class (`CLASSES`), the precision whose rate
    applies to its FLOPs (`PRECISIONS`: FP32; HALF for bf16/fp16 data; FP8 for float8 data,
    `torch._scaled_mm`'s), its FLOPs, the bytes it reads and writes, and its name (the ATen
    op's; a Triton kernel's)."""

    kind: str
    precision: str
    flops: int
    nbytes: int
    op: str = ""


@dataclass(frozen=True)
class Efficiency:
    """A GPU family's fitted constants: the share of the peak rate a matmul reaches
    (`matmul`), of the memory bandwidth a matmul's operands (`matmul_memory`: a skinny
    matmul that reads and writes a large operand is bound by it), an elementwise op, a row
    reduction and a fused loss kernel reach, and the fixed cost of a kernel launch
    (`launch_us`, µs; a host sync costs the same); `rows`: the published rows they were
    calibrated on."""

    matmul: float
    matmul_memory: float
    elementwise: float
    reduction: float
    fused: float
    launch_us: float
    rows: str

    def seconds(self, op: OpCost, target: Target) -> float:
        """One op's time on `target` (s)."""
        launch = self.launch_us * 1e-6
        if op.kind == SYNC:
            return launch
        if op.kind == COLLECTIVE:
            return launch + op.nbytes / target.link_bytes_per_s
        share = {MATMUL: self.matmul_memory, ELEMENTWISE: self.elementwise, REDUCTION: self.reduction,
                 FUSED: self.fused}[op.kind]
        memory = op.nbytes / (target.hbm_bytes_per_s * share)
        if not op.flops:
            return launch + memory
        return launch + max(op.flops / (target.peak(op.precision) * self.matmul), memory)


# <generated: results/calibrate_time.py>
FAMILIES: dict[str, Efficiency] = {
    "ada": Efficiency(0.6092, 0.758, 0.8833, 0.6472, 1.0, 8.33,
                          rows="20 rows of NVIDIA L40S (Liger-Kernel 2024)"),
    "ampere": Efficiency(0.7816, 0.6307, 0.9085, 0.5459, 1.0, 19.65,
                          rows="48 rows of NVIDIA A100-SXM4-80GB (Liger-Kernel 2024)"),
    "cdna3": Efficiency(0.3399, 0.2431, 0.4448, 0.4603, 1.0, 1.0,
                          rows="20 rows of AMD Instinct MI300X (Liger-Kernel 2024)"),
    "hopper": Efficiency(0.6671, 0.6176, 1.0, 0.5406, 1.0, 14.86,
                          rows="20 rows of NVIDIA H100 80GB HBM3 (Liger-Kernel 2024)"),
}
# </generated>
# Families no published row was calibrated on, and the family whose constants they use.
BORROWED: dict[str, str] = {"blackwell": "hopper"}


def efficiency(target: Target) -> tuple[Efficiency | None, str]:
    """The constants that apply to `target` and what a row predicted with them must say
    ('' when they were calibrated on its own family); None when there are none."""
    found = FAMILIES.get(target.arch)
    if found is not None:
        return found, ""
    lender = BORROWED.get(target.arch)
    if lender is None or lender not in FAMILIES:
        return None, f"no time model for {target.arch} GPUs (no published rows to calibrate on)"
    return FAMILIES[lender], f"time: {target.arch} uncalibrated, {lender}'s efficiencies used"


def step_ms(ops: Mapping[OpCost, int], target: Target, constants: Efficiency | None = None) -> float | None:
    """The predicted time of a step that ran `ops` (each → how many times), in ms, on
    `target`, with `constants` (default: its family's, `efficiency`); None without any.
    Collectives but those `IN_LINE` overlap the rest: the longer of the two."""
    constants = constants or efficiency(target)[0]
    if constants is None:
        return None

    def overlapped(op: OpCost) -> bool:
        return op.kind == COLLECTIVE and op.op not in IN_LINE

    work = sum(n * constants.seconds(op, target) for op, n in ops.items() if not overlapped(op))
    talk = sum(n * constants.seconds(op, target) for op, n in ops.items() if overlapped(op))
    return max(work, talk) * 1e3


def collectives_note(target: Target | None, world: World) -> str:
    """What the time of a step in `world` says of its collectives: how each degree's run
    beside the rest (`step_ms`) and at what rate (`target`'s link; None: a target without
    one named)."""
    rate = ("the link's datasheet rate" if target is None else
            f"{target.link_bytes_per_s / 1e9:,.0f} GB/s a direction, {target.name}'s link by its datasheet")
    return world.collectives(rate + " (not calibrated; every rank's link alike: no slower network between nodes)")
