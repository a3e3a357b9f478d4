"""`cebench fit`'s table and the line under it, from `fit`'s answer (`Fitted`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text

from cebench.analyze.compare import loss_share
from cebench.core.axes import STEP_SETTINGS, Checkpointing, Compile
from cebench.core.config import LOSS, Config
from cebench.core.timemodel import collectives_note
from cebench.core.units import format_bytes, format_ms, format_percent
from cebench.core.world import widest
from cebench.losses import variants
from cebench.models import model as model_mod
from cebench.render.table import Cell, Column, Table
from cebench.store.schema import Status

if TYPE_CHECKING:
    from cebench.commands.predict import Fitted
    from cebench.engine.points import Fit

FASTEST = "◀"  # marks the row of the most predicted tokens per second within the budget (the note names it)


@dataclass(frozen=True)
class _Answer:
    """What one row of fit's table is read from: the answer (`fitted`) and which of its fits
    the row is (`index`), memory's `unit`, the max batches of its group's baseline variant
    (`base_batch`, `alone_base`: its loss alone's), and why each unsupported row is
    (`reasons`, numbered in the notes; added to here)."""

    fitted: Fitted
    index: int
    unit: str | None
    base_batch: int | None
    alone_base: int | None
    reasons: list[str]

    @property
    def fit(self) -> Fit:
        return self.fitted.fits[self.index]

    @property
    def alone(self) -> Fit | None:
        return self.fitted.alone.get(self.index)


def _answered(read: Callable[[_Answer], Cell]) -> Callable[[_Answer], Cell]:
    """A cell that says something of a fitted point only ('–' where it cannot be predicted)."""
    return lambda a: "–" if a.fit.unsupported else read(a)


def _batch(a: _Answer) -> Cell:
    """The max batch ('≥ N (limit)' at the search's limit, 'none fits'); 'unsupported [n]'
    where the point cannot be predicted, its reason numbered in `reasons`."""
    f = a.fit
    if f.unsupported:
        if f.unsupported not in a.reasons:
            a.reasons.append(f.unsupported)
        return Text("unsupported", style="yellow") + Text(f" [{a.reasons.index(f.unsupported) + 1}]", style="dim")
    return f"≥ {f.batch:,} (limit)" if f.at_limit else f"{f.batch:,}" if f.batch else "none fits"


def _tokens_per_s(a: _Answer) -> Cell:
    tps = a.fit.tokens_per_s
    return "–" if tps is None else f"{tps:,.0f}" + (f" {FASTEST}" if a.index == a.fitted.fastest else "")


def _alone(a: _Answer) -> Cell:
    alone = a.alone
    return "–" if alone is None else f"≥ {alone.batch:,}" if alone.at_limit else f"{alone.batch:,}"


def _alone_vs_base(a: _Answer) -> Cell:
    alone = a.alone
    return "–" if alone is None or not alone.batch or not a.alone_base else f"{alone.batch / a.alone_base:.2f}×"


def _measured(a: _Answer) -> Cell:
    row = a.fitted.measured.get(a.index)
    return "–" if row is None else format_bytes(row.peak_bytes, a.unit) if row.status == Status.OK else row.status


def _of_budget(a: _Answer) -> Cell:
    peak, budget = a.fit.peak_bytes, a.fitted.budget
    return "–" if peak is None or not budget else f"{peak / budget:.1%}"


def _loss_share(a: _Answer) -> Cell:
    share = loss_share(a.fit.peak_bytes, a.fit.body_peak_bytes)
    return "–" if share is None else f"{share:.0%}"


def _vs_base(a: _Answer) -> Cell:
    return "–" if not a.base_batch or not a.fit.batch else f"{a.fit.batch / a.base_batch:.2f}×"


# fit's columns, each declared once, in the order they are shown: key (what --columns names), heading ({base}: the
# baseline variant), its cell, priority (`Column.priority`), and which answers have it (None: every one): the loss
# alone's with a model, the time's on a named GPU, the loss share with a model, the measured peak with --measure.
_COLUMNS: tuple[Column, ...] = (
    Column("variant", "variant", right=False, read=lambda a: a.fit.config.variant.name),
    Column("ce_chunk", "chunk", read=lambda a: "" if a.fit.config.ce_chunk is None else f"{a.fit.config.ce_chunk:,}"),
    Column("batch", "max batch", read=_batch),
    Column("alone", "loss alone", priority=1, read=_answered(_alone), when=lambda fitted: bool(fitted.alone)),
    Column("alone_vs_base", "alone vs {base}", priority=2, read=_answered(_alone_vs_base),
           when=lambda fitted: bool(fitted.alone)),
    Column("time", "time", priority=1, read=_answered(lambda a: "–" if a.fit.time_ms is None
                                                      else format_ms(a.fit.time_ms)),
           when=lambda fitted: fitted.fastest is not None),
    Column("tokens_per_s", "tokens/s", read=_answered(_tokens_per_s), when=lambda fitted: fitted.fastest is not None),
    Column("tokens", "tokens", priority=1, read=_answered(lambda a: f"{a.fit.tokens:,}")),
    Column("peak_bytes", "peak", read=_answered(lambda a: format_bytes(a.fit.peak_bytes, a.unit))),
    Column("of_budget", "of budget", read=_answered(_of_budget)),
    Column("loss_share", "loss share", priority=1, read=_answered(_loss_share),
           when=lambda fitted: any(f.body_peak_bytes is not None for f in fitted.fits)),
    Column("vs_base", "vs {base}", priority=1, read=_answered(_vs_base)),
    Column("predictions", "predictions", priority=3, read=_answered(lambda a: str(a.fit.predictions))),
    Column("measured", "measured peak", read=_answered(_measured), when=lambda fitted: bool(fitted.measured)),
)
COLUMN_KEYS: tuple[str, ...] = tuple(c.key for c in _COLUMNS)  # every column fit can show (for --columns)


def setting_label(config: Config, names: tuple[str, ...]) -> str:
    """'activation_checkpointing blocks': the values of the step's settings `names` at `config`."""
    return " · ".join(f"{name} {config.value(name)}" for name in names)


def varied(fitted: Fitted) -> tuple[str, ...]:
    """The step's settings (`STEP_SETTINGS`) that take more than one value among the fits."""
    return tuple(n for n in STEP_SETTINGS if len({getattr(f.config, n) for f in fitted.fits}) > 1)


def fit_table(fitted: Fitted, unit: str | None = None) -> Table:
    """`fit`'s answer: one row per variant and ce_chunk (max batch, tokens, predicted peak in
    bytes, its share of the budget, the batch against the baseline's; on a named GPU its
    predicted step time and tokens per second there), with the loss alone's answer where
    there is one and the measured peak with `measure`; the most tokens highlighted, and the
    most tokens per second of all the rows marked `FASTEST`; a point that cannot be predicted
    (`Fit.unsupported`) says 'unsupported' and a note below says why.
    A group per value of the model step's settings that were given more than one (`varied`),
    each row compared and highlighted within its group. `unit`: memory in that unit
    (`cebench.core.units.BYTE_UNITS`) rather than each cell's own."""
    fits, budget = fitted.fits, fitted.budget
    assert budget is not None  # `fit` always answers for a budget
    names = varied(fitted)
    groups: dict[str, list[int]] = {}
    for i, f in enumerate(fits):
        groups.setdefault(setting_label(f.config, names), []).append(i)
    base = variants.baseline(LOSS)
    kept = (f" less {format_percent(fitted.headroom)} headroom: peaks ≤ {format_bytes(fitted.limit, unit)}"
            if fitted.headroom else "")
    table = Table.of(_COLUMNS, fitted, base=base.name if base is not None else "base",
                     title=f"cebench fit · budget {format_bytes(budget, unit)}{kept} · target {fits[0].config.device}")
    reasons: list[str] = []  # why each unsupported row is, numbered in the notes
    for label, members in groups.items():
        if names:
            table.add_group(label)
        best = max(members, key=lambda i: (fits[i].tokens, -(fits[i].peak_bytes or 0)))
        base_batch = next((fits[i].batch for i in members if fits[i].config.variant == base), None)
        alone_base = next((fitted.alone[i].batch for i in members if fits[i].config.variant == base
                           and i in fitted.alone), None)
        for i in members:
            style = "bold green" if i == best and fits[i].batch else ""
            table.add(_Answer(fitted, i, unit, base_batch, alone_base, reasons), style)
    table.notes.extend(f"[{n}] {reason}" for n, reason in enumerate(reasons, 1))
    return table


def fit_note(fitted: Fitted, unit: str | None = None) -> str:
    """What the peaks include: the sizes searched at, the target, the inputs (a model's
    whole step) and a named GPU's cuBLAS workspaces; where nothing fits, what would (bytes
    in `unit`, as the table's)."""
    c = fitted.fits[0].config
    workspaces = " and its cuBLAS workspaces" if c.device.workspace_bytes else ""
    inputs = "the inputs h, weight, targets"
    worlds = [f.config.world for f in fitted.fits if f.config.world.sharded]
    world = widest(worlds)
    if c.has_model:
        names = varied(fitted)
        optimizer = "each group's optimizer" if "optimizer" in names else c.optimizer
        checkpointing = ("as each group says" if "activation_checkpointing" in names
                         else f"checkpointing {c.activation_checkpointing}")
        if "compile" in names or c.compile == Compile.BLOCKS:
            checkpointing += ", blocks compiled as each group says" if "compile" in names else ", blocks compiled"
        ranks = (f", with {world.titles} one rank's: rank 0's, which holds the most rows of each unevenly divided "
                 "parameter; max batch is per rank" if worlds else "")
        if world.gpus_per_step > 1:
            ranks += " (under --tp a TP group's ranks share its batch)"
        modelled = model_mod.of(c).modelled_as
        inputs = (f"the whole training step of {c.model} ({modelled}): parameters, gradients, {optimizer} state, "
                  "activations "
                  f"({checkpointing}), the loss{ranks}; loss share: (peak − the same step's with a stand-in loss at "
                  f"that batch) / peak; loss alone: the loss step by itself at the same vocab and d_model, with "
                  f"{inputs}")
    time = ""
    if fitted.fastest is not None:
        best = fitted.fits[fitted.fastest]
        chunk = f"chunk {best.config.ce_chunk:,}" if best.config.ce_chunk else ""
        setting = " · ".join(filter(None, (best.config.variant.name, chunk,
                                           setting_label(best.config, varied(fitted)))))
        per_gpu = " per GPU" if worlds else ""
        # how FSDP's and tensor parallelism's collectives are costed, where either ran
        talk = "; " + collectives_note(c.device.named_card, world) if worlds else ""
        time = (f" {FASTEST} fastest that fits: {setting} at batch {best.batch:,}, "
                f"{best.tokens_per_s:,.0f} tokens/s{per_gpu} predicted (time: the time model's step time at the max "
                f"batch, a roofline over the traced ops calibrated on published rows{talk}; cebench targets).")
    context = f"context {c.context:,}" + (f" ({fitted.context_from})" if fitted.context_from else "")
    kept = (f"{format_percent(fitted.headroom)} of the budget" if fitted.headroom
            else "none of the budget (--headroom 0%)")
    advice = _nothing_fits(fitted, unit)
    return (f"{context}, vocab {c.vocab:,}, d_model {c.d_model:,}, {c.dtype}; predicted on meta tensors "
            f"for {c.device} (peak includes {inputs}{workspaces}).{time}{advice} Not counted: {c.device.uncounted}; "
            f"{kept} is kept free for them (--headroom).")


def _nothing_fits(fitted: Fitted, unit: str | None) -> str:
    """Where not one sequence fits in any row that was predicted: what would let one fit (a
    shorter context; with a model, checkpointing its blocks where not all rows did and
    cebench checkpoints them (a preset or config.json), and sharding; a larger budget)."""
    predicted = [f for f in fitted.fits if not f.unsupported]
    if not predicted or any(f.batch for f in predicted):
        return ""
    c = predicted[0].config
    ways = ["a shorter --context"]
    if c.has_model:
        if (model_mod.of(c).checkpoints_blocks
                and any(f.config.activation_checkpointing != Checkpointing.BLOCKS for f in predicted)):
            ways.append("--activation-checkpointing blocks")
        ways.append("--fsdp N (per rank)")
    ways.append("a larger --budget")
    return (f" Not one sequence of {c.context:,} tokens fits in {format_bytes(fitted.limit, unit)} in any row: try "
            f"{', '.join(ways[:-1])} or {ways[-1]}.")

