"""The measured point (`Config`) and the names it is made of: dtypes and workloads.

`Config`'s fields are the axes' (`cebench.core.axes.AXES`): built at run time with
`make_dataclass`, and written out as a class for type checkers in the generated block below
(`make types`). A point holds its device, its variant and its model resolved (`RESOLVED`): a
name given for one is resolved once, when the point is made, and the engine, the runner and
the renderers read the objects, never the names again; `value` gives a field's plain value
(a name) for a CSV or a document. Imports torch only when a `torch.dtype` is asked for, so
that the command line can parse and check options without importing torch.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING, cast

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
from cebench.core.devices import Device
from cebench.core.named import ByName, Named
from cebench.core.world import World

__all__ = ["AXES", "DTYPE_ALIASES", "DTYPES", "ITEMSIZE", "LOGITS", "LOSS", "RESOLVED", "SAMPLE", "WORKLOADS",
           "Checkpointing", "Compile", "Config", "Grads", "Named", "Optimizer", "Reduction", "Settings", "YesNo",
           "torch_dtype"]

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


@dataclass(frozen=True, eq=False)
class Alone(ByName):
    """The model a point of the loss alone holds (`ALONE`): none, named `NO_MODEL`."""

    name: str = NO_MODEL

    def __repr__(self) -> str:
        return "ALONE"


ALONE = Alone()


@dataclass(frozen=True)
class Resolved:
    """A field a point holds resolved: its type (source, for the generated block) and the
    function that resolves a name given for it ('module:function', imported when a name is
    first given: the variant's and the model's registries are in layers above this one)."""

    type: str
    resolver: str


# What a point holds resolved rather than by name; a name given for one is resolved once, as the point is made.
RESOLVED: dict[str, Resolved] = {
    "variant": Resolved("Named", "cebench.losses.variants:resolve"),
    "device": Resolved("Device", "cebench.core.devices:get"),
    "model": Resolved("Named", "cebench.models.model:named"),  # `ALONE` for the loss alone
}
_RESOLVERS: dict[str, Callable[[str], object]] = {}


def resolve(name: str, text: str) -> object:
    """What `text` names for the resolved field `name` (its registry's `UsageError` for a bad
    name)."""
    if name not in _RESOLVERS:
        module, _, function = RESOLVED[name].resolver.partition(":")
        _RESOLVERS[name] = getattr(importlib.import_module(module), function)
    return _RESOLVERS[name](text)


# The fields of a point: a variant, its workload and device, one value of every axis (`ce_chunk` None for
# variants that do not chunk) and the sampling temperature (sample workload only). They come from `AXES`:
# an axis with an `off` value defaults to it, so a point that does not sweep it need not name it.
TEMPERATURE = 0.9


def _fields() -> list[tuple[str, str, object]]:
    """(name, type's source, default or `generated.REQUIRED`) of each of a point's fields, in order."""
    def typed(axis: Axis) -> str:
        if axis.name in RESOLVED:
            return RESOLVED[axis.name].type
        return f"{axis.type.__name__} | None" if axis.chunked_only else axis.type.__name__

    def default(axis: Axis) -> object:
        return ALONE if axis.name == "model" else axis.off

    required = [(a.name, typed(a), generated.REQUIRED) for a in AXES if a.off is None]
    defaults = [(a.name, typed(a), default(a)) for a in AXES if a.off is not None]
    return ([("variant", RESOLVED["variant"].type, generated.REQUIRED), ("workload", "str", generated.REQUIRED),
             ("device", RESOLVED["device"].type, generated.REQUIRED)] + required
            + [("temperature", "float", TEMPERATURE)] + defaults)


def typed_source() -> str:
    """The class statement of `_Fields` that the generated block below holds."""
    return generated.dataclass_source("_Fields", _fields())


if TYPE_CHECKING:
    # <generated: make types>
    @dataclass(frozen=True, kw_only=True)
    class _Fields:
        variant: Named
        workload: str
        device: Device
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
        model: Named = ALONE
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
    rows of hidden states (N). Built by keyword; a name given for a `RESOLVED` field (a
    variant's, a device's, a model's; 'none': the loss alone, `ALONE`) is resolved as it is
    made."""

    def __post_init__(self) -> None:
        for name in RESOLVED:
            if type(given := getattr(self, name)) is str:  # a name (a resolved one is a str of its name too)
                object.__setattr__(self, name, resolve(name, given))

    def value(self, name: str) -> object:
        """Field `name`'s plain value, as a CSV or a document holds it: a resolved one's name,
        a word as its text."""
        value = getattr(self, name)
        if name in RESOLVED:
            return cast(Named, value).name
        return str(value) if isinstance(value, Choice) else value

    def axis_values(self) -> dict[str, object]:
        """Each axis's plain value (`AXES` name → `value`), for a plain-data document."""
        return {a.name: self.value(a.name) for a in AXES}

    def plain(self) -> dict[str, object]:
        """Every field's plain value (`value`), in order: the point as plain data."""
        return {name: self.value(name) for name, _, _ in _fields()}

    @property
    def has_model(self) -> bool:
        """Whether the loss runs inside a model's training step (its model is not `ALONE`)."""
        return self.model != ALONE

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

