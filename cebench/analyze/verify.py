"""Correctness claims of the system under test, checked rather than assumed.

Loss variants: the loss and the gradients of `h` and `weight` against a float64 dense
reference computed from the same (dtype-rounded) inputs; the error is the max-norm
relative error max|got − ref| / max|ref|. Samplers: a Pearson chi-square goodness-of-fit
test of many draws against the exact softmax(logits / T) probabilities.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from cebench.core.config import LOSS, SAMPLE, Config
from cebench.losses import inputs, variants
from cebench.losses.builtin import vendored_chunked_cross_entropy

# Max-norm relative error allowed per input dtype. fp32: accumulation-order rounding
# (observed ~1e-7); bf16/fp16: gradients are returned in that dtype (eps 2^-8, 2^-11).
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 5e-3}
P_VALUE_FLOOR = 1e-3
SEED = 0


@dataclass(frozen=True)
class LossCase:
    """One loss shape: N rows of width d_model over `vocab`, chunked by `ce_chunk`."""

    name: str
    tokens: int
    vocab: int
    d_model: int
    ce_chunk: int


LOSS_CASES = (
    LossCase("N divisible by ce_chunk", 96, 1000, 32, 32),
    LossCase("N not divisible by ce_chunk", 100, 1000, 32, 32),
    LossCase("ce_chunk larger than N", 20, 1000, 32, 64),
    LossCase("N = 0", 0, 1000, 32, 32),
)


@dataclass(frozen=True)
class LossCheck:
    """Max-norm relative errors of loss, grad h and grad weight at one case and dtype.
    For N = 0 `errors` holds the returned loss itself (the reference is 0.0 by the seed's
    convention). `passed` is None where the claim does not apply."""

    variant: str
    case: LossCase
    dtype: str
    errors: dict[str, float]
    tolerance: float
    passed: bool | None
    note: str = ""


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


def _built(variant: str) -> Callable[..., torch.Tensor]:
    """The variant's callable, built once per process: a compiled variant then compiles a
    handful of times for all cases and dtypes instead of once for each."""
    v = variants.get(variant)
    key = f"{variant}:{id(v)}"  # a test may register another variant under a name again
    if key not in _BUILT:
        _BUILT[key] = v.build(fresh=False)
    return _BUILT[key]


def _loss_and_grads(fn, h, w, t, ce_chunk) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """Loss, grad h, grad weight (zeros where no gradient flows), and whether it flowed."""
    h = h.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    loss = fn(h, w, t, ce_chunk)
    attached = loss.requires_grad
    if attached:
        loss.backward()
    grad_h = h.grad if h.grad is not None else torch.zeros_like(h)
    grad_w = w.grad if w.grad is not None else torch.zeros_like(w)
    return loss.detach(), grad_h, grad_w, attached


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """max|got − ref| / max|ref| in float64; inf where `got` has a NaN."""
    diff = (got.double() - ref).abs().max().item()
    if math.isnan(diff):
        return math.inf
    scale = ref.abs().max().item()
    return diff / scale if scale > 0 else diff


def _reference(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, _: object) -> torch.Tensor:
    return F.cross_entropy(F.linear(h, w), t)


def verify_loss(variant: str, case: LossCase, dtype: str) -> LossCheck:
    """Loss, grad h and grad weight of `variant` against the float64 dense reference."""
    tol = TOLERANCE[dtype]
    x = inputs.make(Config(variant, LOSS, "cpu", dtype, case.tokens, 1, case.vocab, case.d_model, case.ce_chunk))
    h, w, t = x.tensors()
    loss, grad_h, grad_w, attached = _loss_and_grads(_built(variant), h, w, t, case.ce_chunk)
    if case.tokens == 0:
        value = {"loss": loss.item()}
        if variants.get(variant).load() is not vendored_chunked_cross_entropy:
            return LossCheck(variant, case, dtype, value, tol, None,
                             "n/a: 0.0 for no rows is the seed's convention only")
        note = "" if attached else "detached: loss.backward() raises on an empty batch"
        return LossCheck(variant, case, dtype, value, tol, loss.item() == 0.0, note)
    ref = _loss_and_grads(_reference, h.double(), w.double(), t, None)
    errors = {q: relative_error(got, want)
              for q, got, want in zip(("loss", "grad h", "grad weight"), (loss, grad_h, grad_w), ref[:3], strict=True)}
    return LossCheck(variant, case, dtype, errors, tol, max(errors.values()) <= tol)


def _draw(variant: str, h: torch.Tensor, w: torch.Tensor, case: SampleCase) -> torch.Tensor:
    torch.manual_seed(SEED)
    with torch.no_grad():
        return _built(variant)(h, w, case.temperature, case.ce_chunk)


def chi_square_p_value(statistic: float, dof: int) -> float:
    """Upper tail of the chi-square distribution: Q(dof/2, statistic/2)."""
    return torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                   torch.tensor(statistic / 2, dtype=torch.float64)).item()


def verify_sampler(variant: str, case: SampleCase) -> SamplerCheck:
    """Pearson chi-square of the draws against softmax(logits / T), pooled over the
    groups (degrees of freedom: groups × (vocab − 1))."""
    gen = torch.Generator().manual_seed(SEED)
    std = 1 / math.sqrt(case.d_model)
    # Logits of std ~2: at vocab 16 probabilities from ~0.3 down to ~0.003, far from flat.
    distinct = torch.randn(case.groups, case.d_model, generator=gen) * std * 2
    w = torch.randn(case.vocab, case.d_model, generator=gen) * std * 2
    group = torch.arange(case.rows) % case.groups
    h = distinct[group]
    tokens = _draw(variant, h, w, case)
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
    if baseline is not None and variant != baseline:
        same = (tokens == _draw(baseline, h, w, case)).double().mean().item()
        notes.append(f"{same:.1%} of draws equal {baseline}'s under the same seed")
    return SamplerCheck(variant, case, statistic, dof, p, p >= P_VALUE_FLOOR, "; ".join(notes))


def run_all(names: list[str], dtypes: list[str], sample: SampleCase
            ) -> tuple[list[LossCheck], list[SamplerCheck], dict[str, str]]:
    """Every check for the named variants that run on this CPU: loss variants at each case
    and dtype, samplers once each; and the variants that cannot run here, with why."""
    skipped = {n: r for n in names if (r := variants.get(n).unsupported_reason("cpu"))}
    names = [n for n in names if n not in skipped]
    variants.smoke_test(names, "cpu")
    loss_checks = [verify_loss(n, case, d) for n in names if variants.get(n).workload == LOSS
                   for d in dtypes for case in LOSS_CASES]
    sampler_checks = [verify_sampler(n, sample) for n in names if variants.get(n).workload == SAMPLE]
    return loss_checks, sampler_checks, skipped
