"""The sweep grid: option values parsed and checked, device-aware defaults, expansion
into measured points (`Config`). Imports torch only to resolve `--device auto|cuda`."""
from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from cebench.losses import variants
from cebench.core.config import DTYPE_ALIASES, DTYPES, LOSS, WORKLOADS, Config
from cebench.core.errors import UsageError


@dataclass(frozen=True)
class Defaults:
    """Sweep defaults for one device type (sizes in elements, counts in steps)."""

    batch: tuple[int, ...]
    context: tuple[int, ...]
    vocab: tuple[int, ...]
    d_model: tuple[int, ...]
    ce_chunk: tuple[int, ...]
    dtype: tuple[str, ...]
    repeats: int
    warmup: int


# CPU: small enough that `cebench sweep --vocab 50257` (16 points: 5 loss variants, 2 batches,
# 2 chunk sizes, 6 torch.compile calls) finishes in under three minutes on 2 cores with a
# cold compile cache, with N ≫ ce_chunk at batch 8.
# CUDA: the seed's 1B setting (d_model 2048, context 128) in bf16.
DEFAULTS: dict[str, Defaults] = {
    "cpu": Defaults(batch=(2, 8), context=(128,), vocab=(50257,), d_model=(128,),
                    ce_chunk=(256, 512), dtype=("fp32",), repeats=4, warmup=1),
    "cuda": Defaults(batch=(4, 8, 16, 32), context=(128,), vocab=(50257,), d_model=(2048,),
                     ce_chunk=(2048, 8192), dtype=("bf16",), repeats=20, warmup=3),
}
DEVICES = ("cpu", "cuda")
MAX_SIZE = 2**31 - 1  # largest size in any one option: beyond it byte counts leave int64


def resolve_device(name: str, option: str = "--device") -> str:
    """'auto' → 'cuda' when a GPU is visible, else 'cpu'; 'cuda' without a GPU is an error."""
    name = name.strip().lower()
    if name not in ("auto",) + DEVICES:
        raise UsageError(f"{option}: '{name}' is not one of auto, cpu, cuda")
    if name == "cpu":
        return name
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not torch.cuda.is_available():
        raise UsageError(f"{option} cuda: no CUDA GPU is visible to this torch ({torch.__version__}); "
                         f"use {option} cpu")
    return name


def resolve_dtype(name: str, option: str = "--dtype") -> str:
    """A dtype name or alias ('bf16', 'bfloat16', ...) → its canonical short name."""
    key = name.strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise UsageError(f"{option}: '{name.strip()}' is not one of {', '.join(DTYPES)}")
    return key


def split(text: str, option: str) -> list[str]:
    """'a, b,a' → ['a', 'b', 'a']; an empty list or an empty item is a `UsageError`."""
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise UsageError(f"{option}: empty (give one or more comma-separated values)")
    if "" in parts:
        raise UsageError(f"{option}: '{text}' has an empty item")
    return parts


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    """'4,8,16' → (4, 8, 16): positive integers, duplicates dropped, order kept."""
    values: list[int] = []
    for part in split(text, option):
        try:
            value = int(part.replace("_", ""))
        except ValueError:
            raise UsageError(f"{option}: '{part}' is not an integer") from None
        if value <= 0:
            raise UsageError(f"{option}: {value} must be a positive integer")
        if value > MAX_SIZE:
            raise UsageError(f"{option}: {value} is too large (at most {MAX_SIZE:,})")
        if value not in values:
            values.append(value)
    return tuple(values)


def parse_dtypes(text: str, option: str = "--dtype") -> tuple[str, ...]:
    """'fp32,bfloat16' → ('fp32', 'bf16'), duplicates dropped."""
    return tuple(dict.fromkeys(resolve_dtype(p, option) for p in split(text, option)))


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


def parse_names(text: str, known: list[str], option: str) -> tuple[str, ...]:
    """'a,b' → ('a', 'b'), each checked against `known`, duplicates dropped."""
    chosen: list[str] = []
    for part in split(text, option):
        if part not in known:
            raise UsageError(f"{option}: unknown '{part}' (choose from {', '.join(known)})")
        if part not in chosen:
            chosen.append(part)
    return tuple(chosen)


def select_variants(variant: str | None, workload: str | None, device: str | None = None) -> tuple[str, ...]:
    """--variant and --workload → variant names. Without --variant: the default variants
    of the chosen workloads (default: loss). A --variant value is a variant name, a user's
    ``module:function`` or ``file.py:function``, or either with ``-compiled`` appended;
    variants named explicitly must belong to the chosen workloads."""
    workloads = parse_names(workload, list(WORKLOADS), "--workload") if workload is not None else None
    if variant is None:
        return tuple(n for w in (workloads or (LOSS,)) for n in variants.defaults(w, device))
    chosen = tuple(dict.fromkeys(variants.resolve(part).name for part in split(variant, "--variant")))
    if workloads is not None:
        stray = [n for n in chosen if variants.get(n).workload not in workloads]
        if stray:
            raise UsageError(f"--variant: {', '.join(stray)} is not a {'/'.join(workloads)} variant")
    return chosen


@dataclass(frozen=True)
class Grid:
    """The cartesian grid of a sweep. Chunked variants expand over `ce_chunk`; the
    others are measured once per shape."""

    variants: tuple[str, ...]
    device: str
    dtype: tuple[str, ...]
    batch: tuple[int, ...]
    context: tuple[int, ...]
    vocab: tuple[int, ...]
    d_model: tuple[int, ...]
    ce_chunk: tuple[int, ...]
    temperature: float = 0.9

    def runnable(self, smoke: bool = True) -> tuple[Grid, dict[str, str]]:
        """This grid without the variants that cannot run on its device here, and why each
        of those cannot (name → reason). With `smoke`, user variants are smoke-tested on a
        tiny problem first (`UsageError` when one breaks the contract)."""
        reasons = {n: r for n in self.variants if (r := variants.get(n).unsupported_reason(self.device))}
        if smoke:
            variants.smoke_test(self.variants, self.device)
        return replace(self, variants=tuple(n for n in self.variants if n not in reasons)), reasons

    def expand(self) -> list[Config]:
        """Every point, grouped by shape so that the variants of one shape are adjacent."""
        points = []
        for dtype, vocab, d_model, context, batch in itertools.product(
                self.dtype, self.vocab, self.d_model, self.context, self.batch):
            for name in self.variants:
                variant = variants.get(name)
                for chunk in (self.ce_chunk if variant.chunked else (None,)):
                    points.append(Config(name, variant.workload, self.device, dtype,
                                         batch, context, vocab, d_model, chunk, self.temperature))
        return points


@dataclass(frozen=True, kw_only=True)
class GridOptions:
    """The grid's command-line options as given (comma-separated text; None = the
    device's default), parsed into a `Grid` once by `grid(device)`."""

    batch: str | None = None
    context: str | None = None
    vocab: str | None = None
    d_model: str | None = None
    ce_chunk: str | None = None
    variant: str | None = None
    workload: str | None = None
    dtype: str | None = None
    temperature: float = 0.9

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> GridOptions:
        """The grid options among a command's parsed parameters (by name); others ignored."""
        return cls(**{f.name: params[f.name] for f in fields(cls) if f.name in params})

    def grid(self, device: str) -> Grid:
        """The grid for `device` ('cpu' or 'cuda'); unset options take its defaults."""
        d = DEFAULTS[device]

        def ints(text: str | None, option: str, default: tuple[int, ...]) -> tuple[int, ...]:
            return default if text is None else parse_ints(text, option)

        grid = Grid(
            variants=select_variants(self.variant, self.workload, device),
            device=device,
            dtype=d.dtype if self.dtype is None else parse_dtypes(self.dtype),
            batch=ints(self.batch, "--batch", d.batch),
            context=ints(self.context, "--context", d.context),
            vocab=check_vocab(ints(self.vocab, "--vocab", d.vocab)),
            d_model=ints(self.d_model, "--d-model", d.d_model),
            ce_chunk=ints(self.ce_chunk, "--ce-chunk", d.ce_chunk),
            temperature=check_temperature(self.temperature),
        )
        logits = max(grid.batch) * max(grid.context) * max(grid.vocab) * 4
        if logits >= 2**62:
            raise UsageError(f"--batch × --context × --vocab: the full fp32 logits would take {logits:,} bytes, "
                             "beyond what any machine or a results CSV can hold")
        return grid
