"""A preset is named by its name or by the Hugging Face id it cites, case ignored, and its
rows carry its name; each model says what it is predicted as (`Model.implementation`,
`Model.attention`, `Model.modelled_as`), and `cebench models` shows it at 80 columns."""
from __future__ import annotations

import dataclasses
import re
import warnings

import pytest
from typer.testing import CliRunner

from cebench.api import predict
from cebench.cli import app
from cebench.core.errors import UsageError
from cebench.models import PRESETS, resolve_model
from cebench.models.model import canonical_name, preset_name
from cebench.run.grid import GridOptions


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_presets_hugging_face_id_names_it_in_any_case(name):
    repo = PRESETS[name].repo  # the id its declared source cites: huggingface.co/<repo>/blob/main/config.json
    assert f"huggingface.co/{repo}/" in PRESETS[name].source
    for given in (repo, repo.lower(), repo.upper(), name.upper()):
        assert preset_name(given) == name
        model = resolve_model(given)
        assert model.name == name and model.spec == resolve_model(name).spec, given


def test_suffixes_and_hf_stay_around_the_canonical_name():
    assert canonical_name("meta-llama/Llama-3.1-8B:repeat-kv") == "llama-3.1-8b:repeat-kv"
    assert canonical_name("hf:Meta-Llama/Llama-3.1-8B") == "hf:llama-3.1-8b"
    assert canonical_name("hf:openai-community/gpt2:no-dropout:no-cache") == "hf:gpt2:no-dropout:no-cache"
    for other in ("configs/llama.json", "hf:configs/llama.json", "pkg.mod:build", "none", "meta-llama/Llama-9"):
        assert canonical_name(other) == other
    model = resolve_model("Meta-Llama/Llama-3.2-1B:repeat-kv")
    assert model.name == "llama-3.2-1b:repeat-kv" and model.spec is not None and model.spec.repeat_kv


def test_a_grid_carries_the_presets_name_once():
    grid = GridOptions(variant="dense", batch=1, context=4, model="OpenAI-Community/GPT2,gpt2").grid("cpu")
    assert grid.values["model"] == ("gpt2",)
    assert {c.model for c in grid.expand()} == {"gpt2"}


def test_predict_by_hugging_face_id_gives_the_presets_row():
    by_name = predict(variant="dense", model="gpt2", batch=1, context=8, target="cpu")
    by_id = predict(variant="dense", model="openai-community/GPT2", batch=1, context=8, target="cpu")
    assert len(by_name) == len(by_id) == 1 and by_id[0].model == "gpt2"
    assert dataclasses.replace(by_id[0], timestamp=by_name[0].timestamp) == by_name[0]


def test_an_unknown_id_is_one_line_naming_the_choices():
    with pytest.raises(UsageError) as caught:
        resolve_model("meta-llama/Llama-9")
    message = caught.value.message
    assert caught.value.param == "model" and "\n" not in str(caught.value)
    assert message.startswith("unknown model 'meta-llama/Llama-9' (choose from " + ", ".join(PRESETS))
    assert "Hugging Face id" in message
    result = CliRunner().invoke(app, ["predict", "--target", "cpu", "--model", "meta-llama/Llama-9"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "--model: unknown model 'meta-llama/Llama-9'" in result.output


def test_an_id_with_a_suffix_is_not_a_users_build():
    from cebench.commands.predict import warn_user_code

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_user_code(GridOptions(model="meta-llama/Llama-3.2-1B:repeat-kv"), 10**6, "predict")


def test_a_preset_is_cebenchs_decoder_with_fused_attention():
    gemma, gpt2, llama = (resolve_model(n) for n in ("gemma-2-2b", "gpt2", "llama-3.2-1b"))
    assert {m.implementation for m in (gemma, gpt2, llama)} == {"cebench decoder"}
    assert llama.attention == "fused SDPA"
    assert gemma.attention == "fused SDPA, softcap 50 not applied"  # attn_logit_softcapping 50: not in the decoder
    assert gpt2.attention == "fused SDPA (math on CPU: dropout)"
    assert gemma.modelled_as == "cebench decoder; attention: fused SDPA, softcap 50 not applied"
    assert "k/v repeated" in resolve_model("llama-3.2-1b:repeat-kv").attention


def test_hf_names_the_transformers_model_and_its_attention():
    pytest.importorskip("transformers")
    gemma, gpt2 = resolve_model("hf:google/gemma-2-2b"), resolve_model("hf:OpenAI-Community/gpt2")
    assert (gemma.name, gpt2.name) == ("hf:gemma-2-2b", "hf:gpt2")
    assert gemma.implementation == gpt2.implementation == "transformers"
    assert gemma.attention == "eager, softcapped 50" and gpt2.attention == "sdpa"  # as cebench models says


def test_cebench_models_says_what_each_preset_is_at_80_columns(at_width):
    result = at_width(["models"], 80)
    lines = result.output.splitlines()
    for name in PRESETS:
        (line,) = [line for line in lines if line.startswith(f"{name}: cebench decoder; attention: fused SDPA")]
        assert len(line) <= 80, line
    text = " ".join(lines)
    assert "hf:<preset> is the transformers model" in text and "Hugging Face id" in text


def test_two_config_files_of_one_name_are_told_apart_by_their_folders():
    """Every Hugging Face snapshot's config is a config.json: a heading names its folder too."""
    from cebench.core.axes import BY_NAME, heading

    label = BY_NAME["model"].labelled
    assert label("/x/Llama-3.1-8B/config.json") == "Llama-3.1-8B/config.json" != label("/x/Qwen3-8B/config.json")
    assert label("hf:snap/Qwen3-8B/config.json:no-cache") == "hf:Qwen3-8B/config.json:no-cache"
    assert label("configs/llama.json") == "llama.json" and label("gpt2") == "gpt2"
    assert heading({"model": "/x/Qwen3-8B/config.json", "batch": 1, "context": 8, "vocab": 64, "d_model": 8}
                   ).startswith("Qwen3-8B/config.json · ")


def test_a_path_a_preset_also_names_is_refused_saying_how_to_name_each(tmp_path, monkeypatch):
    """`--model gpt2` where ./gpt2 is a config file, or meta-llama/Llama-3.1-8B where that
    path is one: one line, exit 2, never the preset silently; ./gpt2 names the file."""
    from conftest import invoke, one_error

    config = ('{"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, '
              '"num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 777}')
    (tmp_path / "gpt2").write_text(config)
    (tmp_path / "meta-llama").mkdir()
    (tmp_path / "meta-llama" / "Llama-3.1-8B").write_text(config)
    monkeypatch.chdir(tmp_path)
    shape = ("--target", "cpu", "--batch", "1", "--context", "8", "--variant", "dense")
    assert one_error(invoke("predict", "--model", "gpt2", *shape)).endswith(
        "give ./gpt2 for the file, openai-community/gpt2 for the preset")
    assert "give ./meta-llama/Llama-3.1-8B for the file, llama-3.1-8b for the preset" in one_error(
        invoke("predict", "--model", "meta-llama/Llama-3.1-8B", *shape))
    assert resolve_model("./gpt2").vocab == 777 and resolve_model("openai-community/gpt2").vocab == 50257
    help_text = " ".join(re.sub("[│─╭╮╰╯]", " ", invoke("predict", "--help").output).split())  # out of its box
    assert "A name that is a preset's and an existing file's at once is refused (./name names the file)" in help_text
