"""Models a loss runs inside: presets with their published parameter counts, the reference
decoder on small configs (forward and backward, with and without activation
checkpointing), a user's build, and one line for every bad model."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from cebench.api import predict
from cebench.cli import app
from cebench.core.errors import UsageError
from cebench.models import PRESETS, resolve_model
from cebench.run.grid import GridOptions
from test_cli import FAST_START

# The published parameter counts (the sources are in cebench.models.model.PRESETS).
PUBLISHED = {"gpt2": 124_439_808, "llama-3.2-1b": 1_235_814_400, "llama-3.2-3b": 3_212_749_824,
             "llama-3.1-8b": 8_030_261_248, "llama-3.1-70b": 70_553_706_496,
             "qwen2.5-7b": 7_615_616_512, "gemma-2-2b": 2_614_341_888}

# Small configs, one per model type: 3 blocks, d_model 24, an odd vocabulary, GQA 4/2 heads.
SMALL = {"hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 101, "rms_norm_eps": 1e-6}
CONFIGS = {
    "llama": {"model_type": "llama", **SMALL, "tie_word_embeddings": True},
    "mistral": {"model_type": "mistral", **SMALL, "sliding_window": 4096},
    "qwen2": {"model_type": "qwen2", **SMALL},
    "gemma2": {"model_type": "gemma2", **SMALL, "head_dim": 8, "query_pre_attn_scalar": 8,
               "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0},
    "gpt2": {"model_type": "gpt2", "n_embd": 24, "n_layer": 2, "n_head": 4, "n_positions": 16, "vocab_size": 101},
}


def write(path: Path, config: object) -> str:
    path.write_text(json.dumps(config))
    return str(path)


def test_presets_have_the_published_parameter_counts():
    assert list(PRESETS) == list(PUBLISHED)
    for name, count in PUBLISHED.items():
        model = resolve_model(name)  # counted on a meta build: nothing allocated
        assert model.n_params == count, name
        assert f"{count:,}" in model.source and PRESETS[name].repo in model.source
    gemma = resolve_model("gemma-2-2b").spec
    assert (gemma.final_softcap, gemma.attn_softcap, gemma.attn_scale, gemma.head_dim) == (30.0, 50.0, 1 / 16, 256)
    assert resolve_model("qwen2.5-7b").spec.qkv_bias and not resolve_model("llama-3.1-8b").spec.tied


@pytest.mark.parametrize("model_type", list(CONFIGS))
def test_a_small_config_steps_on_cpu_with_and_without_checkpointing(tmp_path, model_type):
    model = resolve_model(write(tmp_path / "config.json", CONFIGS[model_type]))
    ids = torch.randint(0, 101, (2, 7), generator=torch.Generator().manual_seed(0))
    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        built = model.build("cpu", torch.float32, checkpointing=checkpointing)
        assert built.n_params == model.n_params and (built.vocab, built.d_model) == (101, 24)
        h = built.body(ids)
        assert h.shape == (2, 7, 24) and h.dtype == torch.float32
        F.cross_entropy(h.flatten(0, 1) @ built.head.T, ids.roll(-1, 1).flatten()).backward()
        params = dict(built.body.named_parameters())
        assert all(p.grad is not None for p in params.values()), [n for n, p in params.items() if p.grad is None]
        grads.append({n: p.grad for n, p in params.items()})
    for name, grad in grads[0].items():  # checkpointing recomputes the same forward: the same gradients
        torch.testing.assert_close(grads[1][name], grad, msg=name)


def test_the_decoder_is_causal_bf16_grouped_heads_agree_and_checkpointing_saves_less(tmp_path):
    model = resolve_model(write(tmp_path / "config.json", CONFIGS["llama"]))
    body = model.build("cpu").body
    ids = torch.randint(0, 101, (1, 6))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % 101
    half = model.build("cpu", torch.bfloat16).body  # grouped heads through enable_gqa, not repeated
    half.load_state_dict(body.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(body(ids)[:, :-1], body(changed)[:, :-1])
        torch.testing.assert_close(half(ids).float(), body(ids), atol=0.1, rtol=0.05)
    saved = {}
    for checkpointing in (False, True):
        body.checkpointing = checkpointing
        kept: list[torch.Tensor] = []
        with torch.autograd.graph.saved_tensors_hooks(kept.append, lambda _: None):
            body(ids)
        saved[checkpointing] = len(kept)
    assert saved[True] < saved[False] // 3  # per block its input, against every activation


def test_a_config_builds_in_bf16_on_meta_and_gpt2_refuses_a_context_past_its_positions(tmp_path):
    model = resolve_model(write(tmp_path / "gpt2.json", CONFIGS["gpt2"]))
    built = model.build("meta", torch.bfloat16)
    assert {p.device.type for p in built.body.parameters()} == {"meta"}
    assert {p.dtype for p in built.body.parameters()} == {torch.bfloat16}
    assert built.body(torch.zeros(3, 16, dtype=torch.int64, device="meta")).shape == (3, 16, 24)
    with pytest.raises(UsageError, match="context 17 is more than the 16 learned positions") as caught:
        built.body(torch.zeros(1, 17, dtype=torch.int64, device="meta"))
    assert caught.value.param == "context"


USER = '''
import torch
from torch import nn


class Body(nn.Module):
    def __init__(self, vocab=53, d=12):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.mix = nn.Linear(d, d)

    def forward(self, ids):
        return self.mix(self.embed(ids))


def build():
    body = Body()
    return body, body.embed.weight


def untied():
    return Body(), nn.Parameter(torch.randn(53, 12))


def raises():
    raise RuntimeError("no weights here\\nsecond line")


def one_thing():
    return Body()


def not_a_module():
    return "body", torch.zeros(53, 12)


def flat_head():
    return Body(), torch.zeros(53)


def wrong_width():
    return Body(), torch.zeros(53, 13)


class Broken(Body):
    def forward(self, ids):
        raise ValueError("shapes")


def breaks():
    return Broken(), torch.zeros(53, 12)


NOT_CALLABLE = 3
'''


def test_a_users_build_counts_a_tied_head_once_and_is_cast(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(USER)
    tied, untied = resolve_model(f"{path}:build"), resolve_model(f"{path}:untied")
    assert tied.spec is None and tied.n_params == 53 * 12 + 12 * 12 + 12
    assert untied.n_params == tied.n_params + 53 * 12
    for model in (tied, untied):
        built = model.build("cpu", torch.bfloat16)
        assert built.head.dtype == torch.bfloat16 and built.head.requires_grad
        assert {p.dtype for p in built.body.parameters()} == {torch.bfloat16}
        h = built.body(torch.zeros(2, 3, dtype=torch.int64))
        (h @ built.head.T).float().sum().backward()
        assert built.head.grad is not None
    built = tied.build("meta")
    assert built.head is built.body.embed.weight and built.head.device.type == "meta"
    with pytest.raises(UsageError, match="checkpoints its own"):
        tied.build("cpu", checkpointing=True)


BAD_CONFIGS = {
    "not JSON": ("{'model_type': 'llama'", "not valid JSON"),
    "a list": ([1, 2], "a config.json holds a JSON object, not list"),
    "an unsupported type": ({"model_type": "bert", "hidden_size": 8}, "model_type 'bert' is not supported"),
    "no type": ({"hidden_size": 8}, "no model_type is not supported"),
    "a missing field": ({k: v for k, v in CONFIGS["qwen2"].items() if k != "hidden_size"},
                        "missing field 'hidden_size' (model_type qwen2)"),
    "a gpt2 missing field": ({"model_type": "gpt2", "n_embd": 8}, "missing field 'n_head'"),
    "a wrong type": ({**CONFIGS["llama"], "num_hidden_layers": "3"}, "num_hidden_layers is '3'; it is a positive"),
    "heads that do not divide": ({**CONFIGS["llama"], "num_key_value_heads": 3}, "3 key/value heads do not divide 4"),
    "an unknown activation": ({**CONFIGS["llama"], "hidden_act": "relu2"}, "hidden_act is 'relu2'; it is one of"),
    "an infinite number": ({**CONFIGS["llama"], "rope_theta": float("inf")}, "rope_theta is inf; it is a positive,"),
    # 3·10⁹ × 3·10⁹ fp32: beyond a storage's size (torch's overflow traceback, before)
    "an overflowing width": ({**CONFIGS["llama"], "hidden_size": 3 * 10**9, "vocab_size": 3 * 10**9,
                              "head_dim": 8}, "its largest fp32 weight would take 36,000,000,000,000,000,000 bytes"),
    "overflowing positions": ({**CONFIGS["gpt2"], "n_embd": 2**30, "n_inner": 8, "n_positions": 2**31},
                              "largest fp32 weight would take 9,223,372,036,854,775,808 bytes"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_every_bad_config_is_one_line(tmp_path, case):
    config, said = BAD_CONFIGS[case]
    path = tmp_path / "config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    with pytest.raises(UsageError) as caught:
        resolve_model(str(path))
    assert caught.value.param == "model" and said in caught.value.message and "\n" not in str(caught.value)


BAD_NAMES = {
    "nope": "unknown model 'nope' (choose from gpt2, llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-3.1-70b, "
            "qwen2.5-7b, gemma-2-2b",
    "missing.json": "missing.json: no such file",
    "missing.py:build": "missing.py: no such file",
    "no_such_module_xyz:build": "cannot import no_such_module_xyz",
    "{user}": "user.py: a Python file names the function that builds the model: user.py:build",
    "{user}:nothing": "has no attribute 'nothing'",
    "{user}:NOT_CALLABLE": "is int, not a function",
    "{user}:raises": "build() raised RuntimeError: no weights here",
    "{user}:one_thing": "build() returned Body; it returns (body, head weight)",
    "{user}:not_a_module": "build()'s body is str; it is an nn.Module",
    "{user}:flat_head": "head weight is Tensor of shape (53,)",
    "{user}:wrong_width": "the body returned Tensor of shape (1, 2, 12) and dtype torch.float32 for (1, 2) token ids; "
                          "it returns floating hidden states of shape (1, 2, 13)",
    "{user}:breaks": "the body raised ValueError: shapes on (1, 2) token ids",
}


@pytest.mark.parametrize("name", list(BAD_NAMES))
def test_every_bad_model_name_or_build_is_one_line(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user.py").write_text(USER)
    with pytest.raises(UsageError) as caught:
        resolve_model(name.format(user="user.py"))
    assert caught.value.param == "model" and BAD_NAMES[name] in caught.value.message, caught.value.message
    assert "\n" not in str(caught.value)


def test_models_help_never_imports_torch():
    proc = subprocess.run([sys.executable, "-c", FAST_START, "models", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.strip().endswith("torch imported: False pandas imported: False exit 0"), proc


def test_cebench_models_lists_the_presets():
    result = CliRunner().invoke(app, ["models", "--wide"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for name, count in PUBLISHED.items():
        (row,) = [line for line in lines if line.startswith(f"{name} ")]
        assert f"{count:,}" in row
        assert any(line.startswith(f"{name}: huggingface.co/{PRESETS[name].repo}") for line in lines)
    assert "32/8" in next(line for line in lines if line.startswith("llama-3.1-8b "))


def test_a_models_own_softcap_applies_unless_softcap_is_given(tmp_path):
    """Gemma 2's `final_logit_softcapping` is its loss's softcap; `--softcap` overrides it, and
    a model without one (or a grid mixing both) gives each point its own model's."""
    gemma = write(tmp_path / "gemma.json", CONFIGS["gemma2"])
    llama = write(tmp_path / "llama.json", CONFIGS["llama"])

    def softcaps(**axes: object) -> set[tuple[str, float]]:
        grid = GridOptions(variant="dense", batch=1, context=4, **axes).grid("cpu")
        return {(Path(c.model.name).stem, c.softcap) for c in grid.expand()}

    assert softcaps(model=f"{gemma},{llama}") == {("gemma", 30.0), ("llama", 0.0)}
    assert softcaps(model=f"{gemma},{llama}", softcap="0") == {("gemma", 0.0), ("llama", 0.0)}
    assert softcaps(model=gemma, softcap="0,20") == {("gemma", 0.0), ("gemma", 20.0)}
    assert resolve_model("gemma-2-2b").softcap == 30.0 and resolve_model("llama-3.2-1b").softcap == 0.0
    # the softcap reaches the step: the vendored chunked loss cannot apply it; dense's step holds one more fp32
    # N × vocab buffer (the capped logits, saved for the backward)
    (chunked,) = predict(variant="chunked", model=gemma, batch=1, context=4, ce_chunk=2, target="cpu")
    assert chunked.status == "unsupported" and chunked.error == "chunked does not support --softcap 30"
    capped, plain = (predict(variant="dense", model=gemma, batch=4, context=16, optimizer="none", target="cpu",
                             **s)[0] for s in ({}, {"softcap": 0}))
    assert capped.softcap == 30.0 and capped.step_peak_bytes - plain.step_peak_bytes == 4 * 16 * 101 * 4
