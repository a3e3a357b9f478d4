"""One verdict per point (`cebench.engine.support.verdict`): whether it can run here, be
predicted and be timed, each with its reason, asked by every command; the size rules; and
verify's verdict, the API's and the command line's alike."""
from __future__ import annotations

import pytest

from cebench import api
from cebench.analyze import verify as verify_mod
from cebench.analyze.verify import INTERPRETER, LOSS_CASES, LossCheck, Setting
from cebench.core.config import Config
from cebench.core.errors import UsageError
from cebench.engine import support
from cebench.run.grid import GridOptions
from conftest import invoke

SHAPE = {"batch": 2, "context": 8, "vocab": 64, "d_model": 8}
TINY = ('{"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, '
        '"num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 64}')


def _point(**given: object) -> Config:
    return Config(**{"variant": "dense", "workload": "loss", "device": "cpu", "dtype": "fp32", "ce_chunk": None,
                     **SHAPE, **given})


def test_a_point_that_runs_here_is_predicted_and_timed():
    verdict = support.verdict(_point())
    assert verdict is support.verdict(_point())  # one per point: what it found is kept
    assert (verdict.run, verdict.predict, verdict.time) == (None, None, None)  # this CPU: its probe's rates
    on_kind = support.verdict(_point(device="cuda"))
    assert on_kind.predict is None and on_kind.time == ("time is predicted for a named GPU target or this CPU only "
                                                        "(cebench targets)")
    assert support.verdict(_point(device="h100-80gb")).time is None


def test_a_step_its_settings_exclude_is_refused_to_run_and_to_predict(tmp_path):
    model = tmp_path / "tiny.json"
    model.write_text(TINY)
    point = _point(model=str(model), optimizer="adamw-in-backward", fsdp=2)
    verdict = support.verdict(point)
    assert verdict.run is not None and verdict.run == verdict.predict and verdict.run.status == "unsupported"
    assert "adamw-in-backward runs unsharded only (--fsdp 1)" in verdict.run.reason and verdict.loss is None
    assert support.reason(point) == support.reason(point, predicted=True) == verdict.run.reason
    (row,) = api.predict(target="cpu", variant="dense", model=str(model), optimizer="adamw-in-backward", fsdp=2,
                         batch=1, context=8)
    assert (row.status, row.error) == ("unsupported", verdict.predict.reason)


LOSS_ON_DATA = '''
def loss(h, weight, targets):
    """Reads a value of its data: nothing to read on meta."""
    logits = (h @ weight.T).float()
    if logits.max().item() > 1e9:
        raise ValueError("huge")
    return logits.logsumexp(-1).mean()
'''


def test_a_loss_that_cannot_be_predicted_alone_is_refused_inside_a_model_too(tmp_path):
    """The probe: the loss alone at batch 1, traced once per process, refuses every model step
    it is in (`Verdict.loss`), as the error it raised; fit passes such a variant over, saying why."""
    spec = tmp_path / "reads.py"
    spec.write_text(LOSS_ON_DATA)
    model = tmp_path / "tiny.json"
    model.write_text(TINY)
    (point,) = GridOptions(variant=f"{spec}:loss", model=str(model), batch=1, context=8).grid("cpu").expand()
    refused = support.verdict(point).predict
    assert refused is not None and refused == support.verdict(point).loss and refused.status == "error"
    assert support.verdict(point).run is None  # measured, its data are real
    (row,) = api.predict(target="cpu", variant=f"{spec}:loss", model=str(model), batch=1, context=8)
    assert (row.status, row.error) == ("error", refused.reason)
    fitted = api.fit("1GiB", target="cpu", variant=f"dense,{spec}:loss", model=str(model), context=8)
    assert [f.config.variant for f in fitted.fits] == ["dense"]
    assert list(fitted.not_fitted.values()) == [refused.reason]


def test_a_size_no_machine_holds_is_refused_before_any_work():
    assert support.too_large(8, 1024, 50_257, 4096) is None
    logits, at = support.too_large(2**31 - 1, 2**31 - 1, 2**31 - 1, 1)
    assert at == "batch × context × vocab" and "fp32 logits would take" in logits
    assert support.too_large(1, 1, 2**31 - 1, 2**31 - 1)[1] == "vocab × d_model"
    with pytest.raises(UsageError) as info:
        GridOptions(variant="dense", batch=2**31 - 1, context=2**31 - 1, vocab=2**31 - 1, d_model=1).grid("cpu")
    assert info.value.param == "batch × context × vocab"


def _skipped_softcap(chosen, dtypes, sample, matrix, device, **asked):
    """`run_all` with a passing loss check and one (softcap 2) Triton's interpreter could not run."""
    ran = LossCheck("dense", LOSS_CASES[0], "fp32", {"loss": 0.0}, 1e-5, True)
    skipped = LossCheck("dense", LOSS_CASES[0], "fp32", {}, 0.0, None, "interpreter", Setting((("softcap", 2.0),)),
                        INTERPRETER, unsupported=True)
    return [ran, skipped], [], {}


def test_the_api_and_the_command_line_agree_on_a_skipped_check_asked_for(monkeypatch):
    """A check of a setting asked for that was skipped is not verified: `Verified.passed` is
    False, and the command exits 1 from it; not asked for, it passes, with the skip said."""
    monkeypatch.setattr(verify_mod, "run_all", _skipped_softcap)
    asked = api.verify(variant="dense", device="cpu", softcap=2)
    assert asked.checked == 1 and not asked.failed
    assert [c.setting for c in asked.unverified] == [Setting((("softcap", 2.0),))]
    assert asked.passed is False
    result = invoke("verify", "--variant", "dense", "--device", "cpu", "--softcap", "2")
    assert result.exit_code == 1 and "asked for with --softcap, was skipped" in " ".join(result.output.split())
    unasked = api.verify(variant="dense", device="cpu")
    assert unasked.skips and not unasked.unverified and unasked.passed is True
    result = invoke("verify", "--variant", "dense", "--device", "cpu")
    assert result.exit_code == 0 and "1 skipped" in " ".join(result.output.split())


def test_nothing_checked_is_not_a_pass(monkeypatch):
    """A variant that cannot run here leaves nothing to check: not 'all 0 checks passed', exit 1."""
    monkeypatch.setattr(verify_mod, "run_all", lambda *args, **kwargs: ([], [], {"dense": "cannot run here"}))
    verified = api.verify(variant="dense", device="cpu")
    assert verified.checked == 0 and not verified.failed and verified.passed is False
    result = invoke("verify", "--variant", "dense", "--device", "cpu")
    assert result.exit_code == 1 and "nothing was checked: no check could run on this CPU" in result.output
    assert "all 0" not in result.output
