"""The measured point (`Config`) and the names it is made of: dtypes and workloads.

A leaf module: it imports nothing from cebench, and torch only when a `torch.dtype` is
asked for, so that the command line can parse and check options without importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Input dtypes of h and weight: canonical short name → bytes per element.
ITEMSIZE: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
DTYPES: tuple[str, ...] = tuple(ITEMSIZE)
DTYPE_ALIASES: dict[str, str] = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16",
                                 "half": "fp16"}

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


@dataclass(frozen=True)
class Config:
    """One measured point: a variant at one shape, dtype, device and chunk size.

    `tokens` = batch × context rows of hidden states (N). `ce_chunk` is None for
    variants that do not chunk. `temperature` is used by the sample workload only.
    """

    variant: str
    workload: str
    device: str
    dtype: str
    batch: int
    context: int
    vocab: int
    d_model: int
    ce_chunk: int | None
    temperature: float = 0.9

    @property
    def tokens(self) -> int:
        return self.batch * self.context

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    @property
    def logits_fp32_bytes(self) -> int:
        """N × vocab × 4: the full logits in fp32, the reference every peak is judged against."""
        return self.tokens * self.vocab * 4

    @property
    def lower_bound_bytes(self) -> int:
        """Bytes any exact implementation must allocate in one step. Loss: the gradients of
        h (N × d_model) and weight (vocab × d_model) in the input dtype plus the fp32 scalar
        loss. Sample: the N int64 token ids it returns."""
        if self.workload == SAMPLE:
            return self.tokens * 8
        return (self.tokens + self.vocab) * self.d_model * ITEMSIZE[self.dtype] + 4
