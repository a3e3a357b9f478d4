"""The measured point (`Config`) and the names it is made of: dtypes and workloads.

`Config`'s fields are the axes' (`cebench.core.axes.AXES`): built at run time with
`make_dataclass`, and written out as a class for type checkers in the generated block below
(`make types`). Imports torch only when a `torch.dtype` is asked for,
so that the command line can parse and check options without importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING

from cebench.core import generated
from cebench.core.axes import (
    AXES,
    DTYPE_ALIASES,
    DTYPES,
    FEATURES,
    ITEMSIZE,
    NO_MODEL,
    Axis,
    Checkpointing,
    Choice,
    Compile,
    Grads,
    Optimizer,
    Reduction,
    YesNo,
)
from cebench.core.world import World

__all__ = ["AXES", "DTYPE_ALIASES", "DTYPES", "ITEMSIZE", "LOGITS", "LOSS", "SAMPLE", "WORKLOADS", "Checkpointing",
           "Compile", "Config", "Grads", "Optimizer", "Reduction", "Settings", "YesNo", "torch_dtype"]

if TYPE_CHECKING:
    import torch

# loss: forward mean loss + backward to h and weight. sample: one no-grad sampling call. logits: the loss of
# given (N, vocab) logits + backward to them, no projection (the d_model axis does not apply: its points carry 0).
LOSS = "loss"
SAMPLE = "sample"
LOGITS = "logits"
WORKLOADS: tuple[str, ...] = (LOSS, SAMPLE, LOGITS)


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


# The fields of a point: a variant, its workload and device, one value of every axis (`ce_chunk` None for
# variants that do not chunk) and the sampling temperature (sample workload only). They come from `AXES`:
# an axis with an `off` value defaults to it, so a point that does not sweep it need not name it.
TEMPERATURE = 0.9


def _fields() -> list[tuple[str, str, object]]:
    """(name, type's source, default or `generated.REQUIRED`) of each of a point's fields, in order."""
    def typed(axis: Axis) -> str:
        return f"{axis.type.__name__} | None" if axis.chunked_only else axis.type.__name__

    required = [(a.name, typed(a), generated.REQUIRED) for a in AXES if a.off is None]
    defaults = [(a.name, typed(a), a.off) for a in AXES if a.off is not None]
    return ([(name, "str", generated.REQUIRED) for name in ("variant", "workload", "device")] + required
            + [("temperature", "float", TEMPERATURE)] + defaults)


def typed_source() -> str:
    """The class statement of `_Fields` that the generated block below holds."""
    return generated.dataclass_source("_Fields", _fields())


if TYPE_CHECKING:
    # <generated: make types>
    @dataclass(frozen=True, kw_only=True)
    class _Fields:
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
        ignore_frac: float = 0.0
        softcap: float = 0.0
        label_smoothing: float = 0.0
        z_loss: float = 0.0
        reduction: Reduction = Reduction.MEAN
        grads: Grads = Grads.NONE
        retain_graph: YesNo = YesNo.NO
        model: str = 'none'
        optimizer: Optimizer = Optimizer.NONE
        activation_checkpointing: Checkpointing = Checkpointing.NONE
        fsdp: int = 1
        tp: int = 1
        compile: Compile = Compile.NONE
    # </generated>
else:
    _Fields = make_dataclass("_Fields", [(n, object) if d is generated.REQUIRED else (n, object, field(default=d))
                                         for n, _, d in _fields()], frozen=True, kw_only=True,
                             namespace={"__module__": __name__})


@dataclass(frozen=True, kw_only=True)
class Config(_Fields):
    """One measured point (its fields: `_fields()`, from `AXES`): `tokens` = batch × context
    rows of hidden states (N). Built by keyword."""

    def axis_values(self) -> dict[str, object]:
        """Each axis's value (`AXES` name → value; a word as its plain text), for a plain-data document."""
        return {a.name: str(v) if isinstance(v := getattr(self, a.name), Choice) else v for a in AXES}

    @property
    def has_model(self) -> bool:
        """Whether the loss runs inside a model's training step (`model` is not `NO_MODEL`)."""
        return self.model != NO_MODEL

    @property
    def world(self) -> World:
        """The ranks the step runs on: its degrees (`fsdp`, `tp`; `World()`: one device)."""
        return World.of(self.__dict__)

    @property
    def tokens(self) -> int:
        return self.batch * self.context

    @property
    def chunks(self) -> int:
        """The chunks a chunked loss runs, ⌈N / ce_chunk⌉ (1 without a ce_chunk)."""
        return -(-self.tokens // self.ce_chunk) if self.ce_chunk else 1

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
        (a scalar; N rows with reduction none). Sample: the N int64 token ids it returns.
        Logits: the gradient of the (N, vocab) logits in their dtype plus the loss."""
        if self.workload == SAMPLE:
            return self.tokens * 8
        loss = self.tokens * 4 if self.reduction == Reduction.NONE else 4
        if self.workload == LOGITS:
            return self.tokens * self.vocab * ITEMSIZE[self.dtype] + loss
        return (self.tokens + self.vocab) * self.d_model * ITEMSIZE[self.dtype] + loss

