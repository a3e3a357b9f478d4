"""Measured points (`Config`), the sweep grid, validation and device-aware defaults."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from cebench import variants
from cebench.errors import UsageError
from cebench.workloads import LOSS, WORKLOADS

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float": "fp32"}


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
        return DTYPES[self.dtype]


@dataclass(frozen=True)
class Defaults:
    """Sweep defaults for one device type (sizes in elements, counts in steps)."""

    batch: tuple[int, ...]
    context: tuple[int, ...]
    vocab: tuple[int, ...]
    d_model: tuple[int, ...]
    ce_chunk: tuple[int, ...]
    dtype: str
    repeats: int
    warmup: int


# CPU: small enough that `cebench sweep --vocab 50257` (4 variants, 2 batches, 2 chunk
# sizes, 6 torch.compile calls) finishes in about two minutes on 2 cores, with N ≫ ce_chunk.
# CUDA: the seed's 1B setting (d_model 2048, context 128) in bf16.
DEFAULTS: dict[str, Defaults] = {
    "cpu": Defaults(batch=(2, 8), context=(128,), vocab=(50257,), d_model=(128,),
                    ce_chunk=(256, 512), dtype="fp32", repeats=5, warmup=1),
    "cuda": Defaults(batch=(4, 8, 16, 32), context=(128,), vocab=(50257,), d_model=(2048,),
                     ce_chunk=(2048, 8192), dtype="bf16", repeats=20, warmup=3),
}


def resolve_device(name: str) -> str:
    """'auto' → 'cuda' when a GPU is visible, else 'cpu'; 'cuda' without a GPU is an error."""
    name = name.strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name not in ("cpu", "cuda"):
        raise UsageError(f"--device: '{name}' is not one of auto, cpu, cuda")
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA GPU is visible to this torch "
                         f"({torch.__version__}); use --device cpu")
    return name


def resolve_dtype(name: str) -> str:
    """A dtype name or alias ('bf16', 'bfloat16', ...) → its canonical short name."""
    key = name.strip().lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise UsageError(f"--dtype: '{name}' is not one of {', '.join(DTYPES)}")
    return key


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    """'4,8,16' → (4, 8, 16): positive integers, duplicates dropped, order kept."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip().replace("_", "")
        try:
            value = int(part)
        except ValueError:
            raise UsageError(f"{option}: '{part}' is not an integer") from None
        if value <= 0:
            raise UsageError(f"{option}: {value} must be a positive integer")
        if value not in values:
            values.append(value)
    return tuple(values)


def check_vocab(vocab: tuple[int, ...], option: str = "--vocab") -> tuple[int, ...]:
    """A vocabulary needs at least two tokens: with one there is nothing to predict."""
    if min(vocab) < 2:
        raise UsageError(f"{option}: {min(vocab)} is too small (a vocabulary needs at least 2 tokens)")
    return vocab


def check_temperature(temperature: float) -> float:
    """Sampling temperature must be a positive, finite number."""
    if not 0 < temperature < float("inf"):
        raise UsageError(f"--temperature: {temperature} must be positive")
    return temperature


def select_variants(variant: str | None, workload: str | None) -> tuple[str, ...]:
    """--variant and --workload → variant names. Without --variant: every variant of the
    chosen workloads (default: loss). Variants named explicitly must belong to them."""
    workloads = parse_names(workload, list(WORKLOADS), "--workload") if workload else None
    if variant is None:
        return tuple(n for w in (workloads or (LOSS,)) for n in variants.names(w))
    chosen = parse_names(variant, variants.names(), "--variant")
    if workloads is not None:
        stray = [n for n in chosen if variants.get(n).workload not in workloads]
        if stray:
            raise UsageError(f"--variant: {', '.join(stray)} is not a {'/'.join(workloads)} variant")
    return chosen


def parse_names(text: str, known: list[str], option: str) -> tuple[str, ...]:
    """'a,b' → ('a', 'b'), each checked against `known`."""
    chosen: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if part not in known:
            raise UsageError(f"{option}: unknown '{part}' (choose from {', '.join(known)})")
        if part not in chosen:
            chosen.append(part)
    return tuple(chosen)


@dataclass(frozen=True)
class Grid:
    """The cartesian grid of a sweep. Chunked variants expand over `ce_chunk`; the
    others are measured once per shape."""

    variants: tuple[str, ...]
    device: str
    dtype: str
    batch: tuple[int, ...]
    context: tuple[int, ...]
    vocab: tuple[int, ...]
    d_model: tuple[int, ...]
    ce_chunk: tuple[int, ...]
    temperature: float = 0.9

    def expand(self) -> list[Config]:
        """Every point, grouped by shape so that the variants of one shape are adjacent."""
        points = []
        for vocab, d_model, context, batch in itertools.product(self.vocab, self.d_model, self.context, self.batch):
            for name in self.variants:
                variant = variants.get(name)
                for chunk in (self.ce_chunk if variant.chunked else (None,)):
                    points.append(Config(name, variant.workload, self.device, self.dtype,
                                         batch, context, vocab, d_model, chunk, self.temperature))
        return points
