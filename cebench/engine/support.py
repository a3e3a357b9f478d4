"""One verdict per point: whether it can run here, be predicted and be timed, each with its
reason (`Verdict`). Every command asks here (`verdict(config)`: sweep, predict, fit,
explain, verify), and the row of a point that cannot run, or be predicted, is `unsupported`
(or `error`, `Refusal.status`) with the reason in one line.

Each check stays where its knowledge lives and is asked only through here, in this order:

- the model's step: settings that exclude each other (`training.unsharded_only`: an optimizer
  stepped in backward, compiled blocks, in a sharded step);
- a sharded step on a torch whose FSDP2 cebench does not follow (`shims.fsdp.SINCE`);
- the variant: what it needs of the device and of this machine (`variant_reason`;
  predicted: its eager twin's, for the target's kind of device, as compiled code is run as
  inductor's code runs, never built), then the loss semantics it takes (`Variant.lacks`);
- run here only: a sharded step's ranks, one process each, on more GPUs or CPU cores than
  this machine has (`Device.ranks_reason`: one each);
- predicted only: what a step on meta cannot follow (compiled code, `compiled.unsupported_reason`;
  a sharded step's collectives on a torch without their meta kernels), and, inside a model,
  the loss alone at batch 1 (the probe, milliseconds: a loss that cannot be predicted alone,
  a custom op say, cannot be inside a model either; `error` where it failed on meta);
- timed: the time model knows the target (a named GPU with calibrated constants, or this
  CPU) and sees the step's matmuls (`time`).

The size rules of a grid are here too (`too_large`): a point whose fp32 logits or weight no
machine holds is refused before any work. Imports torch only when a point is asked about
(the command line parses without it).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from cebench.core import timemodel
from cebench.core.config import Compile, Config
from cebench.core.devices import Device
from cebench.core.errors import UsageError, describe
from cebench.core.memory import BYTES_LIMIT
from cebench.core.version import torch_release
from cebench.losses import variants
from cebench.losses.variants import Variant
from cebench.shims import fsdp
from cebench.store.schema import Status


@dataclass(frozen=True)
class Refusal:
    """Why a point cannot be run or predicted, in one line, and the row status that makes
    (`unsupported`; `error` where its loss failed on meta)."""

    reason: str
    status: str = Status.UNSUPPORTED


class Verdict:
    """The one answer about `config`: whether it can `run` on its device here (measured),
    be `predict`ed on meta for its target, whether its `loss` alone can be (whatever step it
    is in: `fit` passes over a point whose loss cannot), and have its step time predicted
    (`time`, asked of a point that can be predicted). Each is None (it can) or why not, found
    when first asked, once (a refusal's reason is one line)."""

    def __init__(self, config: Config) -> None:
        self.config = config

    @functools.cached_property
    def run(self) -> Refusal | None:
        """Why it cannot be measured on its device here (None: it can)."""
        config = self.config
        own = variants.own(config)
        why = (_step(config) or variant_reason(own, config.device) or own.lacks(config)
               or (config.device.ranks_reason(config.world.size) if config.world.sharded else None))
        return None if why is None else Refusal(why)

    @functools.cached_property
    def predict(self) -> Refusal | None:
        """Why it cannot be predicted on meta for its target (None: it can): a setting its
        step excludes, what its variant needs, what a trace cannot follow, or (inside a model)
        its `loss` alone."""
        config = self.config
        own = variants.own(config)
        why = (_step(config) or variant_reason(own, config.device, predicted=True) or own.lacks(config)
               or _unfollowed(config))
        if why is not None:
            return Refusal(why)
        return self.loss if config.has_model else None

    @functools.cached_property
    def loss(self) -> Refusal | None:
        """Why its loss alone cannot be predicted (None: it can): the probe, its verdict at batch
        1 without a model and its trace (milliseconds; once per process for every step it is in)."""
        from cebench.models.training import loss_alone

        return _probe(loss_alone(replace(self.config, batch=1)))

    @functools.cached_property
    def time(self) -> str | None:
        """Why its step time cannot be predicted (None: it can, `trace.step_time`): its target
        is neither a named GPU with a time model nor this CPU, or its step runs kernels the
        model does not see."""
        config = self.config
        card = config.device.named_card
        if card is None and not config.device.is_host:
            return "time is predicted for a named GPU target or this CPU only (cebench targets)"
        if variants.of(config).kernel_matmuls:
            return "time not predicted: its matmuls run inside its Triton kernels, which the time model does not count"
        if card is None:  # this CPU: its probe's rates
            return None
        constants, why = timemodel.efficiency(card)
        return why if constants is None else None


@functools.lru_cache(maxsize=4096)
def verdict(config: Config) -> Verdict:
    """`config`'s `Verdict` (one per point in a process: what it found is kept)."""
    return Verdict(config)


def reason(config: Config, *, predicted: bool = False) -> str | None:
    """`verdict(config)`'s reason in one line (None: it can): why it cannot run on its device
    here, or (`predicted`) be predicted for its target."""
    refusal = verdict(config).predict if predicted else verdict(config).run
    return None if refusal is None else refusal.reason


def variant_reason(variant: Variant | str, device: Device, *, predicted: bool = False,
                   imported: bool = False) -> str | None:
    """Why `variant` (or the one its name names) cannot run on `device` here at all (None: it
    can): measured there, or (`predicted`) predicted for it, where a compiling variant needs
    what its eager twin needs; `imported`: its packages imported to tell (a broken install
    found), not only found. Asked of each variant before its points are made."""
    variant = variant if isinstance(variant, Variant) else variants.resolve(variant)
    own = variants.eager_twin(variant) if predicted else variant
    return own.unsupported_reason(device, imported)


def too_large(batch: int, context: int, vocab: int, d_model: int) -> tuple[str, str] | None:
    """Why a point of this size cannot be held by any machine (or a results CSV): its full
    fp32 logits or its fp32 weight beyond `BYTES_LIMIT`, with the quantity at fault (None: it
    can). Checked of a grid's largest point, or of fit's at its batch limit, before any work."""
    logits = batch * context * vocab * 4
    if logits >= BYTES_LIMIT:
        return (f"the full fp32 logits would take {logits:,} bytes, beyond what any machine or a results CSV can hold",
                "batch × context × vocab")
    weight = vocab * d_model * 4
    if weight >= BYTES_LIMIT:
        return f"the fp32 weight would take {weight:,} bytes, beyond what any machine can hold", "vocab × d_model"
    return None


# What torch raises for a combination it refuses to run (a substring of its message), said in cebench's words with
# the way out.
TORCH_REFUSES = (
    ("donated buffers", "torch.compile hands a compiled loss's backward the buffers its forward saved (donated "
                        "buffers), so no second backward can use them: --retain-graph applies to eager variants; run "
                        "the compiled one without it"),
)


def torch_refused(exc: BaseException) -> str | None:
    """Why torch refused the step that raised `exc`, in cebench's words (`TORCH_REFUSES`);
    None where it is not such a refusal."""
    return next((said for needle, said in TORCH_REFUSES if needle in str(exc)), None)


def refusal(exc: BaseException) -> Refusal:
    """What a prediction that raised `exc` says: `unsupported` where a trace cannot follow the
    step (a custom op, compiled code not as one graph) or torch refuses it (`torch_refused`),
    else `error` (an op without a meta kernel, say). A user's code that exits (`UsageError`,
    `cebench.core.guard`) is not a refusal: it is raised again."""
    from cebench.engine import compiled
    from cebench.engine.trace import OpaqueOp

    if isinstance(exc, UsageError):
        raise exc
    if isinstance(exc, (OpaqueOp, compiled.NotCompiled)):
        return Refusal(str(exc))
    refused = torch_refused(exc)
    return Refusal(refused) if refused else Refusal(describe(exc), Status.ERROR)


def _step(config: Config) -> str | None:
    """Why `config`'s step cannot be run or predicted as it asks (None: it can, or it has no
    model): settings of its model's step that exclude each other, or a sharded step on a torch
    whose FSDP2 and DTensor cebench does not follow."""
    from cebench.models.training import unsharded_only

    return unsharded_only(config) or _unfollowed_fsdp(config)


def _unfollowed_fsdp(config: Config) -> str | None:
    """Why `config`'s sharded or split step cannot be run here (None: it can, or is neither):
    this torch's FSDP2 and DTensor are older than those whose storage helpers and collectives
    cebench follows."""
    release = torch_release()
    if not config.world.sharded or release is None or release >= fsdp.SINCE:
        return None
    since = f"torch {fsdp.SINCE[0]}.{fsdp.SINCE[1]} or newer: torch {release[0]}.{release[1]}'s"
    if config.tp > 1:
        return f"--tp needs {since} DTensor and FSDP2 run other collectives than those cebench follows and settles"
    return f"--fsdp needs {since} FSDP2 calls other collectives than those cebench follows and settles"


def _unfollowed(config: Config) -> str | None:
    """Why a step on meta cannot follow `config`'s (None: it can): its compiled blocks or
    compiled loss for its target, or its collectives, sharded, on a torch without meta
    kernels for them."""
    from cebench.engine import compiled
    from cebench.shims.torch_names import RELEASE, fake_collectives

    target = config.device
    why = compiled.unsupported_reason(target) if config.compile == Compile.BLOCKS else None
    if not why and variants.own(config).compiles:
        why = compiled.unsupported_reason(target, config.world.sharded, config.chunks)
    if not why and config.world.sharded and not fake_collectives():
        why = (f"torch {RELEASE}'s collectives have no meta kernels, so a sharded step cannot be followed in a "
               "fake world: --fsdp is predicted with torch 2.9 or newer; measure it with cebench sweep")
    return why


@functools.lru_cache(maxsize=256)
def _probe(alone: Config) -> Refusal | None:
    """Why the loss alone at `alone` (batch 1, no model) cannot be predicted: its verdict, or
    what its trace raised."""
    from cebench.engine.trace import predict_peak

    found = verdict(alone).predict
    if found is None:
        try:
            predict_peak(alone)
        except Exception as exc:
            found = refusal(exc)
    return found
