"""The measured point (`Config`) and the names it is made of: dtypes and workloads.

A leaf module: it imports nothing from cebench, and torch only when a `torch.dtype` is
asked for, so that the command line can parse and check options without importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING

from cebench.core.axes import AXES, DTYPE_ALIASES, DTYPES, FEATURES, ITEMSIZE

__all__ = ["AXES", "DTYPE_ALIASES", "DTYPES", "ITEMSIZE", "LOSS", "SAMPLE", "WORKLOADS", "Config", "Settings",
           "torch_dtype"]

if TYPE_CHECKING:
    import torch

# loss: forward mean loss + backward to h and weight. sample: one no-grad sampling call.
LOSS = "loss"
SAMPLE = "sample"
WORKLOADS: tuple[str, ...] = (LOSS, SAMPLE)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a canonical dtype name ('fp32', 'bf16', 'fp16')."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


@dataclass(frozen=True)
class Settings:
    """How each point is measured: `warmup` untimed steps (≥ 1; compilation happens in
    the first), then `repeats` individually timed steps."""

    warmup: int
    repeats: int


class _Point:
    """What a point is besides its fields (see `Config`)."""

    __slots__ = ()
    variant: str
    workload: str
    dtype: str
    batch: int
    context: int
    vocab: int
    d_model: int
    reduction: str
    model: str

    @property
    def has_model(self) -> bool:
        """Whether the loss runs inside a model's training step (`model` is not 'none')."""
        return self.model != "none"

    @property
    def tokens(self) -> int:
        return self.batch * self.context

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    @property
    def features(self) -> dict[str, object]:
        """The loss semantics a loss variant is called with as keyword arguments: those of
        `FEATURES` that are not off (softcap, label_smoothing, z_loss, reduction)."""
        return {a.name: getattr(self, a.name) for a in FEATURES if not a.is_off(getattr(self, a.name))}

    @property
    def logits_fp32_bytes(self) -> int:
        """N × vocab × 4: the full logits in fp32, the reference every peak is judged against."""
        return self.tokens * self.vocab * 4

    @property
    def lower_bound_bytes(self) -> int:
        """Bytes any exact implementation must allocate in one step. Loss: the gradients of
        h (N × d_model) and weight (vocab × d_model) in the input dtype plus the fp32 loss
        (a scalar; N rows with reduction none). Sample: the N int64 token ids it returns."""
        if self.workload == SAMPLE:
            return self.tokens * 8
        loss = self.tokens * 4 if self.reduction == "none" else 4
        return (self.tokens + self.vocab) * self.d_model * ITEMSIZE[self.dtype] + loss


# One measured point: a variant, its workload and device, one value of every axis (in the
# order of `AXES`; `ce_chunk` is None for variants that do not chunk), and the sampling
# temperature (sample workload only). Its fields come from `AXES`: an axis with an `off`
# value defaults to it, so a point that does not sweep it need not name it.
Config = make_dataclass(
    "Config",
    [("variant", str), ("workload", str), ("device", str)]
    + [(a.name, object) for a in AXES if a.off is None]
    + [("temperature", float, field(default=0.9))]
    + [(a.name, object, field(default=a.off)) for a in AXES if a.off is not None],
    bases=(_Point,), frozen=True)
Config.__module__ = __name__  # so that points pickle (they are sent to isolated children)
Config.__doc__ = """One measured point: `tokens` = batch × context rows of hidden states (N)."""
