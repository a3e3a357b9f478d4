"""The world a model's step runs in: its parallel degrees, each declared once (`DEGREES`), and
`World`, the one place where they are multiplied or divided.

A degree is an axis of its own (`cebench.core.axes`: its option, `Config` field and CSV
column, `fsdp`, `tp`) plus a `Degree` here that says what the world does with it: whether its
ranks share one step's tokens (a rate per GPU divides by it), whether its collectives run
beside the computation or are waited for, and its place among the device mesh's dimensions.
`--gpus N` gives `REMAINDER` what the other degrees leave of N. Adding a degree (context,
pipeline, expert parallelism) is its `Axis`, its `Degree` and what a step does with it.

A leaf module: nothing from cebench but the axes, never torch.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from cebench.core.axes import BY_NAME, MAX_WORLD


@dataclass(frozen=True)
class Degree:
    """One way a step is split over ranks. `name`: its axis (`Config` field, CSV column,
    `--name` option), whose label names it in headings ('TP ×4'); `title`: the degree in a
    sentence ('TP'); `whose`: its collectives' owner in a sentence ("tensor parallelism's");
    `shares_tokens`: its ranks work on one step's tokens together (a TP group's ranks see the
    same sequences), so a rate per GPU divides a step's tokens by it; `overlapped`: its
    collectives run beside the computation (FSDP prefetches its all-gathers), else the next op
    waits for each (`cebench.core.timemodel`)."""

    name: str
    title: str
    whose: str
    shares_tokens: bool
    overlapped: bool


# In the device mesh's order, outermost first: a rank's peers of a later degree are consecutive ranks (torchtitan's
# layout: a TP group within a node).
DEGREES: tuple[Degree, ...] = (
    Degree("fsdp", "FSDP", "FSDP's", shares_tokens=False, overlapped=True),
    Degree("tp", "TP", "tensor parallelism's", shares_tokens=True, overlapped=False),
)
NAMES: tuple[str, ...] = tuple(d.name for d in DEGREES)
REMAINDER = "fsdp"  # the degree that takes the ranks the others leave of a world's size (`World.of_size`)


@dataclass(frozen=True)
class World:
    """The ranks one step runs on: each degree's size (`DEGREES`; 1: not split that way).
    `World()` is one device, unsplit; `World(fsdp=2, tp=4)` eight ranks, FSDP over pairs of TP
    groups of four."""

    sizes: tuple[int, ...]

    def __init__(self, **sizes: int) -> None:
        unknown = sorted(set(sizes) - set(NAMES))
        if unknown:
            raise ValueError(f"not a degree: {', '.join(unknown)} (degrees: {', '.join(NAMES)})")
        values = tuple(int(sizes.get(name, 1)) for name in NAMES)
        if min(values) < 1:
            raise ValueError(f"a degree is at least 1 rank, not {min(values)}")
        object.__setattr__(self, "sizes", values)

    def __repr__(self) -> str:
        return f"World({', '.join(f'{d.name}={n}' for d, n in self.items())})"

    @classmethod
    def of(cls, values: Mapping[str, object]) -> World:
        """The world of a point's or a row's values (`Config.axis_values()`, a CSV row): each
        degree's; one that is missing, empty or NaN (a row written before it existed) is 1."""
        def size(value: object) -> int:
            return 1 if value is None or value == "" or value != value else int(value)  # type: ignore[call-overload]

        return cls(**{name: size(values.get(name)) for name in NAMES})

    @classmethod
    def of_size(cls, size: int, **others: int) -> World:
        """The world of `size` ranks whose degrees but `REMAINDER` are `others`, `REMAINDER`
        taking what they leave (`--gpus 8 --tp 2`: FSDP ×4 · TP ×2). ValueError when they do
        not divide `size`."""
        split = cls(**others)
        if split[REMAINDER] != 1:
            raise ValueError(f"{REMAINDER} is what the other degrees leave of the world's size")
        if size % split.size:
            raise ValueError(f"{split.size:,} ranks do not divide {size:,}")
        return cls(**{**others, REMAINDER: size // split.size})

    def __getitem__(self, name: str) -> int:
        """The size of degree `name` ('fsdp', 'tp')."""
        return self.sizes[NAMES.index(name)]

    def items(self) -> Iterator[tuple[Degree, int]]:
        """Each degree and its size, in `DEGREES` order."""
        return zip(DEGREES, self.sizes, strict=True)

    @property
    def size(self) -> int:
        """How many ranks the step runs on: every degree's size multiplied (1: one device)."""
        return math.prod(self.sizes)

    @property
    def sharded(self) -> bool:
        """Whether the step runs on more than one rank, each holding a part."""
        return self.size > 1

    @property
    def split(self) -> tuple[Degree, ...]:
        """The degrees of more than one rank."""
        return tuple(d for d, n in self.items() if n > 1)

    @property
    def gpus_per_step(self) -> int:
        """The ranks (GPUs) that work on one step's tokens together (a TP group's): a rate per
        GPU divides a step's tokens by it."""
        return math.prod(n for d, n in self.items() if d.shares_tokens)

    @property
    def beyond(self) -> str | None:
        """Why this world is larger than cebench builds (None: it is not): more than `MAX_WORLD`
        ranks in all."""
        if self.size <= MAX_WORLD:
            return None
        given = " × ".join(f"{BY_NAME[d.name].flag} {n}" for d, n in self.items())
        return f"{given} is {self.size:,} ranks, more than {MAX_WORLD:,}"

    @property
    def mesh(self) -> tuple[tuple[int, ...], tuple[str, ...] | None]:
        """The device mesh's shape and its dimensions' names, outermost first: `REMAINDER`'s
        dimension alone, unnamed, when no other degree splits the step; else a named dimension
        for it and for each other degree that splits it."""
        others = [(d.name, n) for d, n in self.items() if d.name != REMAINDER and n > 1]
        if not others:
            return (self[REMAINDER],), None
        dims = [(REMAINDER, self[REMAINDER]), *others]
        return tuple(n for _, n in dims), tuple(name for name, _ in dims)

    @property
    def label(self) -> str:
        """'FSDP ×2 · TP ×4': each split degree's label ('' for one device)."""
        return " · ".join(BY_NAME[d.name].labelled(n) for d, n in self.items() if n > 1)

    @property
    def flags(self) -> str:
        """'--fsdp 2 --tp 4': the options that ask for this world (each split degree's)."""
        return " ".join(f"{BY_NAME[d.name].flag} {n}" for d, n in self.items() if n > 1)

    def asked(self, gpus: bool = False) -> str:
        """The options that ask for this world as a user gives them: each split degree's
        (`flags`), or with `gpus`, `--gpus` and the other degrees' ('--gpus 8 --tp 2')."""
        if not gpus:
            return self.flags
        others = [f"{BY_NAME[d.name].flag} {n}" for d, n in self.items() if d.name != REMAINDER and n > 1]
        return " ".join([f"--gpus {self.size}", *others])

    @property
    def titles(self) -> str:
        """'FSDP and TP': the split degrees in a sentence ('' for one device)."""
        return " and ".join(d.title for d in self.split)

    def collectives(self, rate: str) -> str:
        """How the collectives of a step in this world are costed, at `rate` (words): each
        split degree's, overlapped with the rest of the step or each waited for."""
        def how(degree: Degree) -> str:
            return "overlapped with the rest" if degree.overlapped else "each waited for"

        split = self.split
        if len(split) == 1:
            return f"{split[0].whose} collectives at {rate}, {how(split[0])}"
        return f"collectives at {rate}, " + ", ".join(f"{d.whose} {how(d)}" for d in split)


def widest(worlds: list[World]) -> World:
    """The world whose every degree is the largest among `worlds` (one device for none): what
    a sentence about several worlds names."""
    return World(**{name: max((w[name] for w in worlds), default=1) for name in NAMES})
