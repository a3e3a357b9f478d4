"""Loss semantics as axes (padding, softcap, label smoothing, z-loss, reduction): what each
costs in memory, what each variant supports, and `verify`'s parity matrix."""
from __future__ import annotations

import csv
import importlib.util
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

from cebench.analyze.verify import LOSS_CASES, OFF, Setting, settings, verify_loss
from cebench.cli import app
from cebench.core.config import Config
from cebench.engine.points import predict
from cebench.losses import inputs, variants
from cebench.run.runner import Settings, run

ONE_STEP = Settings(warmup=1, repeats=1)
MiB = 2**20
SHAPE = dict(batch=3, context=37, vocab=1013, d_model=24)  # N 111: odd sizes
FEATURES = [dict(ignore_frac=0.25), dict(softcap=30.0), dict(label_smoothing=0.1), dict(z_loss=1e-3),
            dict(reduction="sum"), dict(reduction="none"), dict(softcap=30.0, z_loss=1e-3, ignore_frac=0.5)]


def cpu(variant: str = "dense", ce_chunk: int | None = None, **semantics: object) -> Config:
    return Config(variant=variant, workload="loss", device="cpu", dtype="fp32", ce_chunk=ce_chunk, **SHAPE, **semantics)


def test_the_seeds_loss_with_padding_is_the_reference_times_the_share_of_real_targets():
    case = LOSS_CASES[1]
    padded = Setting((("ignore_frac", 0.25),))
    seed = verify_loss("chunked", case, "fp32", padded)
    assert seed.passed is False and seed.errors["loss"] == pytest.approx(0.25, abs=1e-2)  # round(100 × 0.25) kept out
    assert "loss = reference × 0.75, the share of real targets" in seed.note
    for name in ("dense", "torch-lce"):
        assert verify_loss(name, case, "fp32", padded).passed
    res = CliRunner().invoke(app, ["verify", "--variant", "dense,chunked,torch-lce", "--ignore-frac", "0.25",
                                   "--softcap", "0", "--label-smoothing", "0", "--z-loss", "0", "--reduction", "mean"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 1, res.output
    assert "3 of" in res.output and "the share of real targets" in res.output


@pytest.mark.parametrize("softcap,mib", [(30, 28_000), (0, 24_000)])
def test_dense_with_softcap_predicts_the_cut_cross_entropy_papers_table_1_baseline(softcap, mib):
    # Wijmans et al., "Cut Your Losses in Large-Vocabulary Language Models", Table 1: Gemma 2 2B shape, A100, bf16;
    # their baseline softcaps (30) in bf16 before the fp32 upcast: 28,000 MB; without the softcap, one bf16 N × vocab
    # buffer (4,000 MiB) less.
    config = Config(variant="dense", workload="loss", device="cuda", dtype="bf16",
                    batch=8192, context=1, vocab=256_000, d_model=2304, ce_chunk=None, softcap=float(softcap))
    row = predict(config)
    assert row.status == "ok", row.error
    assert row.peak_delta_bytes / MiB == pytest.approx(mib, rel=1e-3)


# On a CPU a Python number passed to a tensor op becomes an 8-byte double tensor, and autograd
# saves the softcap's divisor and factor (div, mul) until the backward: 16 bytes the dispatcher
# shows as Python floats, so `predict` cannot see them. On a GPU they live in host memory.
SAVED_SCALARS = 16


@pytest.mark.parametrize("semantics", FEATURES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_every_features_dense_peak_on_cpu_is_predicted_to_the_byte(semantics):
    measured, predicted = run(cpu(**semantics), ONE_STEP), predict(cpu(**semantics))
    assert measured.status == predicted.status == "ok", (measured.error, predicted.error)
    assert predicted.base_bytes == measured.base_bytes
    residue = SAVED_SCALARS if "softcap" in semantics else 0
    assert measured.peak_delta_bytes - predicted.peak_delta_bytes == residue
    for name, value in semantics.items():
        assert getattr(measured, name) == value  # the row carries its semantics


def test_softcap_costs_one_more_saved_logits_buffer_on_cpu():
    plain, capped = run(cpu(), ONE_STEP), run(cpu(softcap=30.0), ONE_STEP)
    n = SHAPE["batch"] * SHAPE["context"]
    # fp32 here: tanh's output, saved for its backward, and the two saved scalars
    assert capped.peak_delta_bytes - plain.peak_delta_bytes == n * SHAPE["vocab"] * 4 + SAVED_SCALARS


def test_a_variant_asked_for_a_feature_it_lacks_is_an_unsupported_row_naming_it(tmp_path):
    out = tmp_path / "r.csv"
    res = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--variant", "dense,chunked,torch-lce", "--batch", "2",
                                   "--context", "32", "--vocab", "500", "--d-model", "16", "--ce-chunk", "16",
                                   "--softcap", "30", "--ignore-frac", "0,0.5", "--repeats", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(out.open()))
    assert {(r["variant"], r["ignore_frac"], r["softcap"], r["status"]) for r in rows} == {
        ("dense", "0", "30", "ok"), ("dense", "0.5", "30", "ok"),
        ("chunked", "0", "30", "unsupported"), ("chunked", "0.5", "30", "unsupported"),
        ("torch-lce", "0", "30", "unsupported"), ("torch-lce", "0.5", "30", "unsupported")}
    assert {r["error"] for r in rows if r["variant"] == "chunked"} == {"chunked does not support --softcap 30"}
    assert {r["reduction"] for r in rows} == {"mean"} and {r["label_smoothing"] for r in rows} == {"0"}


def test_a_fallback_the_implementation_warns_about_is_in_the_row():
    row = run(cpu("torch-lce", ce_chunk=32, label_smoothing=0.1), ONE_STEP)
    assert row.status == "ok" and "options`` ignored" in row.note  # torch falls back to full logits
    assert row.peak_delta_bytes == run(cpu(label_smoothing=0.1), ONE_STEP).peak_delta_bytes  # ... and costs dense's
    assert run(cpu("torch-lce", ce_chunk=32), ONE_STEP).note == ""


def test_a_loss_that_is_not_finite_is_an_error_row():
    config = cpu(ignore_frac=0.999)  # round(111 × 0.999) = 111: every target ignored, torch's mean is 0 / 0
    row = run(config, ONE_STEP)
    assert row.status == "error" and "not finite" in row.error
    assert run(replace(config, reduction="sum"), ONE_STEP).status == "ok"  # the sum over no targets is 0


@pytest.mark.parametrize("name", ["dense", "torch-lce"])
def test_reduction_none_backpropagates_a_non_uniform_upstream_gradient(name):
    for case in LOSS_CASES[:3]:
        check = verify_loss(name, case, "fp32", Setting((("reduction", "none"),)))
        assert check.passed, (case.name, check.errors)
    x = inputs.make(cpu(reduction="none"))
    assert x.upstream is not None and x.upstream.shape == (111,) and x.upstream.std() > 0.2
    assert torch.equal(x.targets, inputs.make(cpu()).targets)  # drawn last: the other draws are unchanged


def _ignores_upstream(h, weight, targets, ce_chunk, *, reduction="mean"):
    """Right values, but backward as if the upstream gradient were all ones."""
    rows = torch.nn.functional.cross_entropy(torch.nn.functional.linear(h, weight).float(), targets,
                                             reduction="none")

    class Ones(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return torch.ones_like(grad)

    return Ones.apply(rows) if reduction == "none" else rows.sum() if reduction == "sum" else rows.mean()


def _never_caps(h, weight, targets, ce_chunk, *, softcap=0.0):
    """Takes a softcap and never applies it."""
    return torch.nn.functional.cross_entropy(torch.nn.functional.linear(h, weight).float(), targets)


def test_verify_says_what_a_mismatch_looks_like(registry):
    registry.register(variants.Variant("ones", "loss", _ignores_upstream, chunked=False, compiled=False, summary="",
                                       supports=frozenset({"reduction"})))
    registry.register(variants.Variant("never-caps", "loss", _never_caps, chunked=False, compiled=False, summary="",
                                       supports=frozenset({"softcap"})))
    none = verify_loss("ones", LOSS_CASES[0], "fp32", Setting((("reduction", "none"),)))
    assert none.passed is False and "upstream gradient is ignored" in none.note
    capped = verify_loss("never-caps", LOSS_CASES[0], "fp32", Setting((("softcap", 2.0),)))
    assert capped.passed is False and "without softcap 2: not applied" in capped.note
    assert verify_loss("never-caps", LOSS_CASES[0], "fp32", Setting((("z_loss", 0.01),))).unsupported


def test_a_variant_that_raises_at_the_edges_is_a_finding_not_a_traceback(registry):
    def fussy(h, weight, targets, ce_chunk):
        if h.shape[0] == 0 or (targets == -100).all():
            raise ValueError("no rows")
        return torch.nn.functional.cross_entropy(torch.nn.functional.linear(h, weight).float(), targets)

    registry.register(variants.Variant("fussy", "loss", fussy, chunked=False, compiled=False, summary=""))
    edges = [verify_loss("fussy", case, "fp32") for case in LOSS_CASES if case.edge]
    assert [(c.passed, c.outcome) for c in edges] == [(None, "raises ValueError: no rows")] * 2
    res = CliRunner().invoke(app, ["verify", "--variant", "fussy", "--softcap", "0", "--label-smoothing", "0",
                                   "--z-loss", "0", "--reduction", "mean", "--ignore-frac", "0"])
    assert res.exit_code == 0, res.output
    assert "raises ValueError [1]" in res.output and "Traceback" not in res.output


def test_user_variants_support_what_they_name_or_declare():
    from cebench.losses.contract import adapt, variant

    def plain(h, weight, targets, ce_chunk): ...
    def capped(h, weight, targets, ce_chunk, *, softcap=0.0, reduction="mean"): ...

    @variant(supports=("z_loss",))
    def declared(h, weight, targets, ce_chunk, **kw): ...

    assert adapt(plain, "p", "p").supports == frozenset()
    assert adapt(capped, "c", "c").supports == {"softcap", "reduction"}
    assert adapt(declared, "d", "d").supports == {"z_loss"}
    with pytest.raises(ValueError, match="softcapping"):
        variant(supports=("softcapping",))


def test_semantics_options_refuse_bad_values():
    for args, message in ((["--softcap", "-1"], "--softcap: -1 must be a finite number ≥ 0"),
                          (["--label-smoothing", "1.5"], "--label-smoothing: 1.5 must be from 0 to 1"),
                          (["--reduction", "avg"], "--reduction: 'avg' is not one of mean, sum, none"),
                          (["--z-loss", "inf"], "--z-loss: inf must be a finite number ≥ 0")):
        res = CliRunner().invoke(app, ["sweep", "--device", "cpu", *args])
        assert res.exit_code == 2 and message in res.output, (args, res.output)


def test_the_default_matrix_is_all_off_then_each_semantics_alone():
    labels = [s.label for s in settings()]
    assert labels == ["all off", "25% ignored", "softcap 2", "smoothing 0.1", "z-loss 0.01", "reduction sum",
                      "reduction none"]
    assert [s.label for s in settings({"softcap": "0", "reduction": "mean", "z_loss": "0", "label_smoothing": "0",
                                       "ignore_frac": "0.5"})] == ["all off", "50% ignored"]
    # a share is never rounded to one it is not: 0.999 is not "100% ignored", 0.001 not "0% ignored"
    assert [s.label for s in settings({"ignore_frac": "0.999,0.001,0.125"})][1:4] == [
        "99.9% ignored", "0.1% ignored", "12.5% ignored"]
    assert settings()[0] == OFF


@pytest.mark.slow  # every semantics through Triton's interpreter
@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is None or importlib.util.find_spec("triton") is None,
                    reason="needs liger-kernel and triton (`make install` installs them with --no-deps)")
def test_liger_under_the_triton_interpreter_passes_the_parity_matrix_at_fp32():
    assert variants.get("liger-kernel").unsupported_reason("cpu") is None
    case = LOSS_CASES[1]  # N 100, ce_chunk 32: not divisible
    for setting in settings():
        check = verify_loss("liger-kernel", case, "fp32", setting)
        if setting.label == "softcap 2":  # Liger's kernel calls .to() on the softcap: a tl scalar on a GPU only
            assert check.outcome == "interpreter" and check.passed is None
        else:
            assert check.passed, (setting.label, check.errors, check.note)
    row = run(Config(variant="liger-kernel", workload="loss", device="cpu", dtype="fp32",
                     batch=2, context=16, vocab=300, d_model=16, ce_chunk=None), ONE_STEP)
    assert row.status == "ok" and row.note.startswith(variants.INTERPRETED)


def test_plot_puts_a_semantics_on_the_x_axis(tmp_path):
    out = tmp_path / "r.csv"
    res = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--variant", "dense", "--batch", "2", "--context", "16",
                                   "--vocab", "300", "--d-model", "8", "--ignore-frac", "0,0.5", "--softcap", "0,30",
                                   "--repeats", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["plot", str(out), "--x", "ignore_frac", "--filter", "softcap=0",
                                   "--out-dir", str(tmp_path / "fig")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "fig" / "memory-vs-ignore_frac.png").stat().st_size > 10_000
    res = CliRunner().invoke(app, ["plot", str(out), "--x", "softcap", "--out-dir", str(tmp_path / "fig2")])
    assert res.exit_code == 0 and (tmp_path / "fig2" / "memory-vs-softcap.png").exists(), res.output
