"""Correctness claims of the system under test and its peers, checked rather than assumed.

Loss variants, as a parity matrix: every variant × every loss semantics setting (all off,
and each of padding, softcap, label smoothing, z-loss and reduction alone) × dtype, at
three shapes, against a float64 reference written here with the same semantics (torch's
definitions); each step is backpropagated with a non-uniform upstream gradient (a scalar
≠ 1, or with reduction none a fixed random vector). The error is the max-norm relative
error max|got − ref| / max|ref| of the loss and of the gradients of `h` and `weight` (a
variant's form on given logits, the logits workload: of the loss and the logits' gradient). A
setting a variant does not support is `unsupported`, shown and never failed; N = 0 and
every target ignored are edge cases whose outcome (a value, NaN, an exception) is shown as
a finding. Samplers: a Pearson chi-square goodness-of-fit test of many draws against the
exact softmax(logits / T) probabilities. Everything runs on one device (by default the CPU),
the reference too.
"""
from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from cebench.core import devices
from cebench.core.axes import BY_NAME, SEMANTICS, semantics_label
from cebench.core.config import LOGITS, LOSS, SAMPLE, Config
from cebench.core.devices import Device
from cebench.core.errors import describe, joined, said
from cebench.core.guard import user_code
from cebench.engine import support
from cebench.losses import inputs, variants
from cebench.losses.builtin import vendored_chunked_cross_entropy
from cebench.losses.variants import Variant

# Max-norm relative error allowed per input dtype. fp32: accumulation-order rounding
# (observed ~1e-7); bf16/fp16: gradients are returned in that dtype (eps 2^-8, 2^-11).
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 5e-3}
P_VALUE_FLOOR = 1e-3
SEED = 0
UPSTREAM = 0.75  # the upstream gradient of a scalar loss: not 1, so a backward that ignores it is caught
LOGIT_STD = 1.0  # h is scaled so that the logits' standard deviation is about this (softcaps of ~2 bite)
# What each semantics is checked at when not given (`Axis.verify`): non-trivial at the logits' scale.
DEFAULT_SETTINGS: dict[str, str] = {a.name: a.verify for a in SEMANTICS if a.verify is not None}
QUANTITIES = ("loss", "grad h", "grad weight")
WORKLOADS = (LOSS, SAMPLE)  # what verify checks unless asked: each variant on its own workload
NO_TARGET = "no target"  # the outcome of a shape whose every target --ignore-frac ignored: nothing to compare


@dataclass(frozen=True)
class LossCase:
    """One loss shape: N rows of width d_model over `vocab`, chunked by `ce_chunk`;
    `all_ignored`: every target is padding. `edge` cases have no meaningful mean."""

    name: str
    tokens: int
    vocab: int
    d_model: int
    ce_chunk: int
    all_ignored: bool = False

    @property
    def edge(self) -> bool:
        return self.tokens == 0 or self.all_ignored


LOSS_CASES = (
    LossCase("N divisible by ce_chunk", 96, 1000, 32, 32),
    LossCase("N not divisible by ce_chunk", 100, 1000, 32, 32),
    LossCase("ce_chunk larger than N", 20, 1000, 32, 64),
    LossCase("N = 0", 0, 1000, 32, 32),
    LossCase("every target ignored", 96, 1000, 32, 32, all_ignored=True),
)


@dataclass(frozen=True)
class Setting:
    """The loss semantics of one column of the matrix: (axis name, value) pairs, the
    others off."""

    values: tuple[tuple[str, object], ...] = ()

    @property
    def semantics(self) -> dict[str, Any]:
        """Axis name → value (of the axis's own type), as `Config` and the losses take them."""
        return dict(self.values)

    @property
    def label(self) -> str:
        """'softcap 2', or 'all off'."""
        return semantics_label(self.semantics) or "all off"

    @property
    def short(self) -> str:
        """'cap 2', or 'off': a column header."""
        return " ".join(BY_NAME[k].short.format(v) for k, v in self.values) or "off"


OFF = Setting()


def settings(given: Mapping[str, str | None] | None = None) -> list[Setting]:
    """All off, then each semantics alone at each of its values that is not off: those
    `given` (axis name → comma-separated text) or `DEFAULT_SETTINGS`."""
    given = given or {}
    out = [OFF]
    for axis in SEMANTICS:
        text = given.get(axis.name)
        for value in axis.parse(DEFAULT_SETTINGS[axis.name] if text is None else text, axis.name):
            if not axis.is_off(value):
                out.append(Setting(((axis.name, value),)))
    return out


INTERPRETER = "interpreter"  # a check's outcome where Triton's interpreter cannot run it (`LossCheck.skipped`)


@dataclass(frozen=True)
class LossCheck:
    """One variant at one case, dtype and setting: max-norm relative errors of loss, grad
    h and grad weight (empty where it did not run); `passed` None where nothing is claimed
    (unsupported, an edge case); `outcome` what it did where that is the finding ('0',
    'nan', 'raises …'); `note` says what a mismatch looks like, or why it did not run."""

    variant: str
    case: LossCase
    dtype: str
    errors: dict[str, float]
    tolerance: float
    passed: bool | None
    note: str = ""
    setting: Setting = OFF
    outcome: str = ""
    unsupported: bool = False
    warned: str = ""  # what the variant warned while it ran (a fallback, say)
    workload: str = LOSS  # or LOGITS: the variant's form on given logits (its errors: loss and grad h, the logits')

    @property
    def shown(self) -> str:
        """The variant as the tables name it: 'liger-kernel', or 'liger-kernel · logits'."""
        return self.variant if self.workload == LOSS else f"{self.variant} · {self.workload}"

    @property
    def skipped(self) -> bool:
        """Whether it did not run: Triton's interpreter cannot run it (neither passed nor failed)."""
        return self.outcome == INTERPRETER


@dataclass(frozen=True)
class SampleCase:
    """Draws: `rows` positions cycling over `groups` distinct hidden states, so each group
    is a multinomial experiment of about rows/groups draws over `vocab` tokens."""

    rows: int = 200_003
    groups: int = 4
    vocab: int = 16
    d_model: int = 16
    ce_chunk: int = 4096
    temperature: float = 0.9


@dataclass(frozen=True)
class SamplerCheck:
    """Chi-square statistic of one sampler's draws, its degrees of freedom and p-value."""

    variant: str
    case: SampleCase
    statistic: float
    dof: int
    p_value: float
    passed: bool
    note: str = ""
    floor: float = P_VALUE_FLOOR


_BUILT: dict[str, Callable[..., torch.Tensor]] = {}


def _form(variant: Variant, workload: str | None = None) -> Variant:
    """The variant as it runs on `workload` (None: its own; else one it has, its logits form say)."""
    return variant if workload in (None, variant.workload) else variant.on(workload)


def _built(variant: Variant, workload: str | None = None) -> Callable[..., torch.Tensor]:
    """The variant's callable on `workload` (None: its own; else one it has, its logits form
    say), built once per process: a compiled variant then compiles a handful of times for all
    cases and dtypes instead of once for each."""
    form = _form(variant, workload)
    # by the registered object too: a test may register another variant under a name again
    key = f"{variant.name}:{form.workload}:{id(variant)}"
    if key not in _BUILT:
        _BUILT[key] = form.build(fresh=False)
    return _BUILT[key]


@dataclass
class Outcome:
    """What one call did: the loss and both gradients (zeros where none flowed), whether
    the gradient flowed, or the exception it raised."""

    loss: torch.Tensor | None = None
    grads: tuple[torch.Tensor, torch.Tensor] | None = None
    attached: bool = False
    raised: str = ""
    interpreter: bool = False  # what raised was Triton's interpreter
    warned: str = ""


def _run(fn: Callable[..., torch.Tensor], h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, ce_chunk: int,
         semantics: Mapping[str, object], upstream: torch.Tensor) -> Outcome:
    """`fn` on fresh leaves of `h` and `w`, backpropagated with `upstream` (its dtype
    matched to the loss's); an exception is returned, not raised."""
    h = h.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            loss = fn(h, w, t, ce_chunk, **semantics)
            if loss.shape != upstream.shape:
                return Outcome(raised=f"returned shape {tuple(loss.shape)}, not {tuple(upstream.shape)}")
            attached = loss.requires_grad
            if attached:
                loss.backward(upstream.to(loss.dtype))
        except Exception as exc:  # a variant that raises is a finding of the matrix, never a traceback
            return Outcome(raised=f"raises {describe(exc, 160)}",
                           interpreter=type(exc).__name__ == "InterpreterError")
    grads = tuple(g if g is not None else torch.zeros_like(x) for g, x in ((h.grad, h), (w.grad, w)))
    return Outcome(loss.detach(), grads, attached, warned=said(caught))  # type: ignore[arg-type]


def reference(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, ce_chunk: object = None, **semantics: Any
              ) -> torch.Tensor:
    """Cross-entropy of `h @ w.T` with torch's definitions (`reference_of_logits`)."""
    return reference_of_logits(h @ w.T, w, t, **semantics)


def reference_of_logits(logits: torch.Tensor, w: torch.Tensor, t: torch.Tensor, ce_chunk: object = None, *,
                        softcap: float = 0.0, label_smoothing: float = 0.0, z_loss: float = 0.0,
                        reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of given `logits` with torch's definitions, written out (`w` unused: the
    logits workload's empty weight): logits softcapped (c·tanh(logits / c)), per-row
    (1 − ε)·nll + ε·mean(−log p) + z·lse² for real targets (0 for padding), then the mean
    over real targets (NaN when there are none), the sum, or the rows."""
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    lse = torch.logsumexp(logits, dim=-1)
    log_p = logits - lse[:, None]
    kept = t != inputs.IGNORE_INDEX
    nll = -log_p.gather(1, t.clamp(min=0)[:, None])[:, 0]
    rows = ((1 - label_smoothing) * nll - label_smoothing * log_p.mean(dim=-1) + z_loss * lse.square()) * kept
    if reduction == "none":
        return rows
    return rows.sum() / kept.sum() if reduction == "mean" else rows.sum()


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """max|got − ref| / max|ref| in float64; inf where `got` has a NaN (0 for empty tensors,
    and where both are the same NaN-free value)."""
    if got.numel() == 0:
        return 0.0
    diff = (got.double() - ref).abs().max().item()
    if math.isnan(diff):
        return math.inf
    scale = ref.abs().max().item()
    return diff / scale if scale > 0 else diff


def _errors(got: Outcome, want: Outcome, workload: str = LOSS) -> dict[str, float]:
    """The relative error of each quantity (on the logits workload: the loss and the logits'
    gradient, as 'grad h'; there is no weight)."""
    assert got.loss is not None and got.grads is not None and want.loss is not None and want.grads is not None
    errors = {q: relative_error(a, b) for q, a, b in zip(QUANTITIES, (got.loss, *got.grads),
                                                         (want.loss, *want.grads), strict=True)}
    return errors if workload == LOSS else {q: errors[q] for q in QUANTITIES[:2]}


def _reference(workload: str) -> Callable[..., torch.Tensor]:
    return reference if workload == LOSS else reference_of_logits


def _inputs(variant: Variant, case: LossCase, dtype: str, setting: Setting, device: Device,
            workload: str = LOSS) -> tuple[Config, inputs.Inputs]:
    """`variant`'s point at the case, `dtype` and `setting`, and its inputs on `device` (fixed
    seed), h scaled so the logits' std is about `LOGIT_STD` (on the logits workload `h` is the
    logits, of that std already); with `all_ignored`, every target padding."""
    semantics = setting.semantics
    d_model = case.d_model if workload == LOSS else 0
    config = Config(variant=variant, workload=workload, device=device, dtype=dtype, batch=case.tokens, context=1,
                    vocab=case.vocab, d_model=d_model, ce_chunk=case.ce_chunk, **semantics)
    x = inputs.make(config)
    scale = LOGIT_STD * math.sqrt(case.d_model) if workload == LOSS else LOGIT_STD
    x.h = (x.h.detach().double() * scale).to(x.h.dtype)
    if case.all_ignored:
        x.targets = torch.full_like(x.targets, inputs.IGNORE_INDEX)
    if x.upstream is None:
        x.upstream = torch.tensor(UPSTREAM, device=x.h.device)
    return config, x


def _finding(got: Outcome) -> str:
    """An edge case's outcome in a word or two: '0', 'nan', 'raises …'."""
    if got.raised:
        return got.raised
    assert got.loss is not None and got.grads is not None
    value = got.loss
    text = "empty" if value.numel() == 0 else ("nan" if value.isnan().any() else f"{value.double().sum().item():g}")
    grads_nan = any(g.isnan().any().item() for g in got.grads)
    return text + (" (NaN gradients)" if grads_nan else "") + ("" if got.attached else " (no gradient)")


def _diagnose(got: Outcome, x: inputs.Inputs, case: LossCase, setting: Setting, tol: float,
              workload: str = LOSS) -> str:
    """What a mismatch looks like, where it can tell: the padding share, a semantics not
    applied, an upstream gradient ignored."""
    h, w = x.h.double(), x.weight.double()
    semantics = setting.semantics
    features = {k: v for k, v in semantics.items() if BY_NAME[k].keyword}
    reference = _reference(workload)
    want = reference(h, w, x.targets, **features)
    assert got.loss is not None
    if "ignore_frac" in semantics and want.dim() == 0 and want.item():
        share = (x.targets != inputs.IGNORE_INDEX).double().mean().item()
        if abs(got.loss.double().item() / want.item() - share) < 10 * tol:
            return (f"loss = reference × {share:.3g}, the share of real targets: it divides by every row, not "
                    "by the targets kept")
    scalar = torch.tensor(UPSTREAM, dtype=torch.float64, device=h.device)
    assert x.upstream is not None  # `_inputs` gives every case one
    for name in features:
        without = {k: v for k, v in features.items() if k != name}
        plain = _run(reference, h, w, x.targets, case.ce_chunk, without,
                     x.upstream.double() if name != "reduction" else scalar)
        if (plain.loss is not None and got.loss.shape == plain.loss.shape
                and max(_errors(got, plain, workload).values()) <= tol):
            return f"matches the reference without {BY_NAME[name].labelled(semantics[name])}: not applied"
    ones = _run(reference, h, w, x.targets, case.ce_chunk, features, torch.ones_like(x.upstream, dtype=torch.float64))
    assert got.grads is not None and ones.grads is not None
    if all(relative_error(a, b) <= tol for a, b in zip(got.grads, ones.grads, strict=True)):  # (an empty weight: 0)
        return "gradients match an upstream gradient of all ones: the upstream gradient is ignored"
    return ""


def verify_loss(variant: Variant | str, case: LossCase, dtype: str, setting: Setting = OFF,
                device: Device | str = "cpu", workload: str = LOSS) -> LossCheck:
    """`variant` (or the one its name names) at one case, dtype and setting on `device` (a
    kind: 'cpu', 'cuda') against the float64 reference, computed there too (see the module's
    docstring); on `workload` LOGITS its form on given logits (the case's vocab wide; its
    d_model unused)."""
    variant, device = _resolved(variant, device)
    tol = TOLERANCE[dtype]
    config, x = _inputs(variant, case, dtype, setting, device, workload)
    lacking = support.reason(config)
    if lacking:
        return LossCheck(variant.name, case, dtype, {}, tol, None, lacking, setting, "unsupported", unsupported=True,
                         workload=workload)
    assert x.upstream is not None
    with user_code(variant.name, "variant"):  # its exits (a peer's package exiting while imported) are one line
        got = _run(_built(variant, workload), x.h, x.weight, x.targets, case.ce_chunk, config.features, x.upstream)
    check = functools.partial(LossCheck, variant.name, workload=workload)
    if not case.edge and case.tokens and bool((x.targets == inputs.IGNORE_INDEX).all()):  # --ignore-frac near 1
        note = f"every target ignored ({_finding(got)}): no mean to compare, as in the edge cases"
        return check(case, dtype, {}, tol, None, note, setting, NO_TARGET)
    if case.edge:
        outcome = _finding(got)
        if case.tokens == 0 and _form(variant, workload).load() is vendored_chunked_cross_entropy:
            zero = got.loss is not None and got.loss.numel() == 1 and got.loss.item() == 0.0
            note = "0.0 for no rows: its own convention (torch's mean over no targets is NaN)"
            return check(case, dtype, {}, tol, zero, note, setting, outcome)
        return check(case, dtype, {}, tol, None, "", setting, outcome)
    if got.interpreter and device.kind in variant.interpreted_on:  # a limit of the interpreter, not a finding
        return check(case, dtype, {}, tol, None, f"Triton's interpreter cannot run it: {got.raised}",
                     setting, INTERPRETER, unsupported=True)
    if got.raised:
        return check(case, dtype, {}, tol, False, got.raised, setting, "error")
    want = _run(_reference(workload), x.h.double(), x.weight.double(), x.targets, case.ce_chunk, config.features,
                x.upstream.double())
    errors = _errors(got, want, workload)
    passed = max(errors.values()) <= tol
    note = joined("" if passed else _diagnose(got, x, case, setting, tol, workload),
                  f"warned {got.warned}" if got.warned else "")
    return check(case, dtype, errors, tol, passed, note, setting, warned=got.warned)


def _resolved(variant: Variant | str, device: Device | str) -> tuple[Variant, Device]:
    """`variant` and `device`, or those their names name (where a caller's names enter)."""
    return (variant if isinstance(variant, Variant) else variants.resolve(variant),
            device if isinstance(device, Device) else devices.get(device))


def _draw(variant: Variant, h: torch.Tensor, w: torch.Tensor, case: SampleCase) -> torch.Tensor:
    torch.manual_seed(SEED)
    with torch.no_grad(), user_code(variant.name, "variant"):
        return _built(variant)(h, w, case.temperature, case.ce_chunk)


def chi_square_p_value(statistic: float, dof: int) -> float:
    """Upper tail of the chi-square distribution: Q(dof/2, statistic/2)."""
    return torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                   torch.tensor(statistic / 2, dtype=torch.float64)).item()


def verify_sampler(variant: Variant | str, case: SampleCase, device: Device | str = "cpu") -> SamplerCheck:
    """Pearson chi-square of `variant`'s draws (or those of the one its name names) on `device`
    against softmax(logits / T), pooled over the groups (degrees of freedom: groups × (vocab −
    1)); the same inputs on every device."""
    variant, device = _resolved(variant, device)
    gen = torch.Generator().manual_seed(SEED)
    std = 1 / math.sqrt(case.d_model)
    # Logits of std ~2: at vocab 16 probabilities from ~0.3 down to ~0.003, far from flat.
    distinct = torch.randn(case.groups, case.d_model, generator=gen) * std * 2
    w = torch.randn(case.vocab, case.d_model, generator=gen) * std * 2
    group = torch.arange(case.rows) % case.groups
    h, w_on = distinct[group].to(device.name), w.to(device.name)
    tokens = _draw(variant, h, w_on, case).cpu()
    probs = torch.softmax((distinct.double() @ w.double().T) / case.temperature, dim=-1)
    observed = torch.zeros(case.groups, case.vocab, dtype=torch.float64)
    observed.index_put_((group, tokens), torch.ones(case.rows, dtype=torch.float64), accumulate=True)
    expected = probs * torch.bincount(group, minlength=case.groups).double()[:, None]
    statistic = (((observed - expected) ** 2) / expected).sum().item()
    dof = case.groups * (case.vocab - 1)
    p = chi_square_p_value(statistic, dof)
    notes = []
    if expected.min().item() < 5:
        notes.append(f"smallest expected count {expected.min().item():.1f} < 5: χ² is loose, raise --draws")
    baseline = variants.baseline(SAMPLE)
    if baseline is not None and variant is not baseline:
        same = (tokens == _draw(baseline, h, w_on, case).cpu()).double().mean().item()
        notes.append(f"{same:.1%} of draws equal {baseline.name}'s under the same seed")
    return SamplerCheck(variant.name, case, statistic, dof, p, p >= P_VALUE_FLOOR, joined(*notes))


def run_all(chosen: Iterable[Variant], dtypes: list[str], sample: SampleCase, matrix: Iterable[Setting] = (OFF,),
            device: Device = devices.HOST, workloads: Iterable[str] = WORKLOADS,
            ) -> tuple[list[LossCheck], list[SamplerCheck], dict[str, str]]:
    """Every check on `device` (available here; default the CPU) for the `chosen` variants
    that run there, on each of `workloads` they have: loss variants (and their forms on given
    logits) at each setting of `matrix`, case (edge cases with every semantics off) and dtype,
    samplers once each; and the variants that cannot run there, with why (name → reason)."""
    skipped = {v.name: r for v in chosen if (r := support.variant_reason(v, device))}
    runnable = [v for v in chosen if v.name not in skipped]
    variants.smoke_test(runnable, device)
    matrix = list(matrix)
    loss_checks = [verify_loss(v, case, d, setting, device, w) for w in (LOSS, LOGITS) if w in workloads
                   for v in runnable if w in v.workloads and v.workload == LOSS
                   for d in dtypes for setting in matrix for case in LOSS_CASES if setting == OFF or not case.edge]
    sampler_checks = [verify_sampler(v, sample, device) for v in runnable
                      if v.workload == SAMPLE and SAMPLE in workloads]
    return loss_checks, sampler_checks, skipped
