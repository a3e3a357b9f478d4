"""`cebench verify` passes on the vendored code and each of its checks can fail."""
import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from cebench.analyze.verify import LOSS_CASES, SampleCase, verify_loss, verify_sampler
from cebench.cli import app
from cebench.losses import variants
from cebench.losses.builtin import vendored_chunked_cross_entropy, vendored_chunked_sample
from cebench.losses.variants import Variant


def _skips_partial_chunk(h, weight, targets, ce_chunk):
    """Off by one chunk: the trailing partial chunk is dropped from the sum."""
    full = (h.shape[0] // ce_chunk) * ce_chunk
    logits = F.linear(h[:full], weight).float()
    return F.cross_entropy(logits, targets[:full], reduction="sum") / max(h.shape[0], 1)


def _first_chunk_detached(h, weight, targets, ce_chunk):
    """Right loss, wrong gradient: no gradient reaches the first chunk of h."""
    h = torch.cat([h[:ce_chunk].detach(), h[ce_chunk:]])
    return vendored_chunked_cross_entropy(h, weight, targets, ce_chunk)


def _ignores_temperature(h, weight, temperature, ce_chunk):
    """Skewed: samples at T = 1 whatever T is asked for."""
    return vendored_chunked_sample(h, weight, 1.0, ce_chunk)


def _rows_rotated(h, weight, temperature, ce_chunk):
    """Right marginal distribution, wrong rows: each position gets its neighbour's token."""
    return vendored_chunked_sample(h, weight, temperature, ce_chunk).roll(1)


def _register(registry, name, workload, fn):
    registry.register(Variant(name, workload, fn, chunked=True, compiled=False, summary="deliberately wrong"))


@pytest.mark.slow
@pytest.mark.compile
def test_verify_passes_on_the_vendored_implementation_without_padding():
    off = ["--ignore-frac", "0", "--softcap", "0", "--label-smoothing", "0", "--z-loss", "0", "--reduction", "mean"]
    res = CliRunner().invoke(app, ["verify", "--dtype", "fp32,bf16", *off], env={"COLUMNS": "250"})  # names unwrapped
    assert res.exit_code == 0, res.output
    # 7 loss variants (Liger's under Triton's interpreter) × 2 dtypes × 3 shapes, the chunked loss's N = 0 claim
    # (eager and compiled, 2 dtypes), 2 samplers; without liger-kernel installed, 6 fewer
    passed = 48 if variants.get("liger-kernel").unsupported_reason("cpu") is None else 42
    assert "FAIL" not in res.output and f"all {passed} applicable checks passed" in res.output
    assert "chunked-compiled" in res.output and "chunked-sample" in res.output


def test_an_ignore_frac_that_leaves_no_target_is_not_a_failure():
    """--ignore-frac 0.999 ignores every target at verify's shapes: a mean over no target is
    the edge case, not a check of torch's own loss (it was 'FAIL' for F.cross_entropy)."""
    res = CliRunner().invoke(app, ["verify", "--variant", "dense,chunked", "--ignore-frac", "0.999", "--softcap", "0",
                                   "--label-smoothing", "0", "--z-loss", "0", "--reduction", "mean"],
                             env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "FAIL" not in res.output, res.output
    assert "dense    pass        n/a" in res.output and "every target ignored (nan): no mean to compare" in res.output


def test_verify_fails_on_a_loss_off_by_one_chunk(registry):
    _register(registry, "off-by-chunk", "loss", _skips_partial_chunk)
    by_case = {c.name: verify_loss("off-by-chunk", c, "fp32") for c in LOSS_CASES}
    assert by_case["N divisible by ce_chunk"].passed  # only a trailing partial chunk is lost
    assert not by_case["N not divisible by ce_chunk"].passed
    assert not by_case["ce_chunk larger than N"].passed
    res = CliRunner().invoke(app, ["verify", "--variant", "off-by-chunk"])
    assert res.exit_code == 1 and "FAIL" in res.output
    # the count says which of the table's rows failed, and at how many of its shapes
    assert " applicable checks failed: off-by-chunk · all off at 2 shapes" in " ".join(res.output.split())


def test_verify_fails_on_a_wrong_gradient_with_the_right_loss(registry):
    _register(registry, "detached", "loss", _first_chunk_detached)
    check = verify_loss("detached", LOSS_CASES[0], "fp32")
    assert check.errors["loss"] < 1e-6 and check.errors["grad h"] > 0.1 and check.errors["grad weight"] < 1e-6
    assert check.passed is False


def test_verify_fails_on_skewed_or_misplaced_samplers(registry):
    _register(registry, "skewed", "sample", _ignores_temperature)
    _register(registry, "rotated", "sample", _rows_rotated)
    case = SampleCase(rows=50_001, temperature=0.5)
    assert verify_sampler("chunked-sample", case).passed
    assert verify_sampler("skewed", case).p_value < 1e-3
    assert verify_sampler("rotated", case).p_value < 1e-3
    res = CliRunner().invoke(app, ["verify", "--variant", "skewed,chunked-sample", "--temperature", "0.5",
                                   "--draws", str(case.rows)])
    assert res.exit_code == 1 and "1 of 2 applicable checks failed: skewed's draws" in res.output


def test_verify_bad_input_exits_2():
    runner = CliRunner()
    for args, message in ((["--temperature", "0"], "--temperature"), (["--vocab", "1"], "--vocab: 1 is too small"),
                          (["--variant", "nope"], "--variant: unknown 'nope'"), (["--dtype", "fp8"], "--dtype"),
                          (["--variant", "chunked-sample", "--draws", "99999999999"],
                           "--draws: 99,999,999,999 draws × vocab 16 is 1,599,999,999,984 logits, beyond"),
                          (["--variant", "dense-sample", "--vocab", "99999999"], "fewer draws or a smaller --vocab")):
        res = runner.invoke(app, ["verify", *args])
        assert res.exit_code == 2 and message in res.output, (args, res.output)


QUICK = ["--variant", "dense,chunked-sample", "--draws", "2000"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: auto is cuda")
def test_verify_runs_on_the_device_given_and_takes_target_as_its_other_name():
    runner = CliRunner()
    default = runner.invoke(app, ["verify", *QUICK], env={"COLUMNS": "250"})
    assert default.exit_code == 0 and "all 22 applicable checks passed" in default.output, default.output
    for spelling in ("--device", "--target"):
        res = runner.invoke(app, ["verify", spelling, "cpu", *QUICK], env={"COLUMNS": "250"})
        assert res.exit_code == default.exit_code and res.output == default.output, (spelling, res.output)
    help_text = runner.invoke(app, ["verify", "--help"], env={"COLUMNS": "200"}).output
    assert "--device" in help_text and "--target" not in help_text and "cpu fp32; cuda bf16" in help_text


def test_verify_takes_its_default_dtype_from_the_device_kind(monkeypatch):
    from cebench import api
    from cebench.analyze import verify as verify_mod
    from cebench.core import devices

    ran = {}
    monkeypatch.setattr(devices, "resolve", lambda name, param="device": devices.get("cuda"))
    monkeypatch.setattr(verify_mod, "run_all", lambda names, dtypes, sample, matrix, device: (
        ran.update(dtypes=dtypes, device=device) or ([], [], {})))
    verified = api.verify(variant="dense", device="cuda")
    assert ran == {"dtypes": ["bf16"], "device": "cuda"} and verified.device == "cuda"
    api.verify(variant="dense", device="cuda", dtype="fp16")
    assert ran["dtypes"] == ["fp16"]


@pytest.mark.parametrize("args,message", [
    (["--device", "h100-80gb"], "--device: 'h100-80gb' is a GPU to predict for, not a device to run on"),
    (["--target", "h100-80gb"], "cebench predict --target h100-80gb"),
    (["--device", "tpu"], "--device: 'tpu' is not one of auto, cpu, cuda"),
    (["--device", "cpu", "--target", "cpu"], "--target: another name for --device"),
    pytest.param(["--device", "cuda"], "--device: no CUDA GPU is visible",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")),
])
def test_verify_bad_device_is_one_line_and_exit_2(args, message):
    res = CliRunner().invoke(app, ["verify", *args, "--variant", "dense"])
    assert res.exit_code == 2 and message in res.stderr, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.output


def _drops_the_first_row(logits, targets, **semantics):
    """A logits form that leaves the first row out of its mean."""
    return F.cross_entropy(logits[1:].float(), targets[1:])


def test_the_logits_form_of_a_loss_is_verified_on_given_logits(registry):
    """--workload logits checks each loss variant's form on N × vocab logits (loss and the logits' gradient) against
    the reference written on logits; the default checks none, and a wrong form fails."""
    res = CliRunner().invoke(app, ["verify", "--variant", "dense", "--workload", "logits", "--softcap", "0",
                                   "--label-smoothing", "0", "--z-loss", "0", "--reduction", "mean", "--ignore-frac",
                                   "0.25"], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "dense · logits  pass      pass" in res.output and "all 6 applicable checks passed" in res.output
    assert "· logits: the variant's form on given N × vocab logits" in res.output
    plain = CliRunner().invoke(app, ["verify", "--variant", "dense", "--ignore-frac", "0", "--softcap", "0",
                                     "--label-smoothing", "0", "--z-loss", "0", "--reduction", "mean"])
    assert plain.exit_code == 0 and "logits" not in plain.output
    registry.register(Variant("row-short", "loss", vendored_chunked_cross_entropy, chunked=True, compiled=False,
                              summary="its logits form drops a row", logits_fn=_drops_the_first_row))
    check = verify_loss("row-short", LOSS_CASES[0], "fp32", workload="logits")
    assert check.passed is False and set(check.errors) == {"loss", "grad h"} and check.errors["loss"] > 1e-4
    assert verify_loss("row-short", LOSS_CASES[0], "fp32").passed  # its own loss is right
    bad = CliRunner().invoke(app, ["verify", "--variant", "chunked-sample", "--workload", "logits"])
    assert bad.exit_code == 2 and bad.stderr.strip() == ("cebench: error: --variant: chunked-sample is not a logits "
                                                         "variant")
