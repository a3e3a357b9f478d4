"""`cebench verify` as a library call: the options checked, the parity matrix and the
samplers' tests run (`cebench.analyze.verify`). Nothing here imports torch until it runs."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cebench.core import devices
from cebench.core.axes import BY_NAME
from cebench.core.config import SAMPLE
from cebench.core.config import WORKLOADS as ALL_WORKLOADS
from cebench.core.devices import Device
from cebench.core.errors import UsageError

if TYPE_CHECKING:
    from cebench.analyze.verify import LossCheck, SamplerCheck, Setting


@dataclass(frozen=True)
class Verified:
    """`verify`'s answer: the loss checks (the parity matrix: variant × setting × dtype ×
    case), the sampler checks, the variants that cannot run on `device` (name → why), the
    settings checked, in order, the device they ran on, and the loss semantics asked for
    (`asked`: the axes whose values were given). A check Triton's interpreter cannot run is
    skipped (`LossCheck.skipped`), neither passed nor failed; one of a setting asked for is
    `unverified`. `passed`: a check passed, none failed and none asked for was skipped (what
    `cebench verify`'s exit status says: nothing checked is not a pass)."""

    losses: list[LossCheck]
    samplers: list[SamplerCheck]
    skipped: Mapping[str, str]
    settings: list[Setting] = field(default_factory=list)
    device: Device = devices.HOST
    asked: frozenset[str] = frozenset()

    @property
    def checked(self) -> int:
        """How many checks passed or failed (not those that claim nothing, nor the skipped)."""
        return sum(c.passed is not None for c in self.losses) + len(self.samplers)

    @property
    def failed(self) -> int:
        """How many checks failed."""
        return sum(c.passed is False for c in self.losses) + sum(c.passed is False for c in self.samplers)

    @property
    def skips(self) -> list[LossCheck]:
        """The checks that did not run (`LossCheck.skipped`)."""
        return [c for c in self.losses if c.skipped]

    @property
    def unverified(self) -> list[LossCheck]:
        """The skipped checks of a setting asked for: what was asked was not verified."""
        return [c for c in self.skips if any(name in self.asked for name, _ in c.setting.values)]

    @property
    def passed(self) -> bool:
        return bool(self.checked) and not self.failed and not self.unverified


SAMPLER_LOGITS = 2**30  # draws × vocab: the dense sampler holds them as fp32 logits (4 GiB) on this machine


def verify(*, variant: str | None = None, workload: str | None = None, device: str = "auto", dtype: str | None = None,
           temperature: float = 0.9, vocab: int = 16, draws: int = 200_003, ce_chunk: int = 4096,
           **semantics: Any) -> Verified:
    """Check the correctness claims of every variant (or of `variant`) on `device` ('auto',
    'cpu', 'cuda'; default auto: cuda when a GPU is visible): losses and gradients against a
    float64 reference at three shapes and two edge cases in each `dtype` (default: the
    device's, cpu fp32, cuda bf16), with every loss semantics off and with each alone at each
    of its values (keywords named after the axes, `ignore_frac`, `softcap`, ...; missing =
    `cebench.analyze.verify.DEFAULT_SETTINGS`); samplers by a chi-square test of `draws`
    draws over a `vocab`-token vocabulary. `workload`: 'loss', 'logits' (each loss variant's form
    on given N × vocab logits, where it has one: loss and the logits' gradient) and 'sample',
    comma-separated (default: loss and sample, each variant on its own)."""
    from cebench.analyze.verify import WORKLOADS, SampleCase, run_all, settings
    from cebench.commands import arguments
    from cebench.core.axes import SEMANTICS, parse_dtypes, parse_vocab
    from cebench.run.grid import check_temperature, option_text, parse_names, select_variants

    unknown = sorted(set(semantics) - {a.name for a in SEMANTICS})
    if unknown:
        raise UsageError(f"not a loss semantics (those are: {', '.join(a.name for a in SEMANTICS)})", unknown[0])
    matrix = settings({k: option_text(v) for k, v in semantics.items()})

    chosen = parse_names(workload, list(ALL_WORKLOADS), "workload") if workload is not None else WORKLOADS
    checked = select_variants(variant, ",".join(chosen))
    here = devices.target(arguments.name(device, "device"), here=True)
    dtypes = list(parse_dtypes(dtype)) if dtype is not None else list(BY_NAME["dtype"].default(here.kind))
    parse_vocab(str(vocab), "vocab")
    if draws < 100:
        raise UsageError("at least 100 draws are needed for a chi-square test", "draws")
    if draws * vocab > SAMPLER_LOGITS and any(v.workload == SAMPLE for v in checked):
        raise UsageError(f"{draws:,} draws × vocab {vocab:,} is {draws * vocab:,} logits, beyond the "
                         f"{SAMPLER_LOGITS:,} ({SAMPLER_LOGITS * 4 // 2**30} GiB of fp32) the samplers' test holds "
                         "here: fewer draws or a smaller --vocab", "draws")
    if ce_chunk < 1:
        raise UsageError(f"{ce_chunk} must be a positive integer", "ce_chunk")
    check_temperature(temperature)
    sample = SampleCase(rows=draws, vocab=vocab, ce_chunk=ce_chunk, temperature=temperature)
    asked = {} if workload is None else {"workloads": chosen}  # else run_all's own default
    losses, samplers, skipped = run_all(checked, dtypes, sample, matrix, here, **asked)
    return Verified(losses, samplers, skipped, matrix, here, frozenset(semantics))
