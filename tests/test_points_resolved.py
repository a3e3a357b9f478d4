"""A point is resolved once, where its names enter: `Config` holds its `Device`, `Variant` and
`Model` (each a `str` of its name too), the grid resolves them from the options, a child
process gets them back by name, and nothing past the edge looks a name up again."""
from __future__ import annotations

import ast
import json
import os
import pickle
from pathlib import Path

import pytest

from cebench import api
from cebench.core import devices
from cebench.core.config import ALONE, Config
from cebench.core.errors import UsageError
from cebench.losses import variants
from cebench.losses.variants import Variant
from cebench.models import model as model_mod
from cebench.models.model import Model, resolve_model
from cebench.models.training import body_config
from cebench.run.grid import GridOptions
from conftest import model_file

PACKAGE = Path(__file__).resolve().parent.parent / "cebench"
SHAPE = {"batch": 2, "context": 8, "vocab": 64, "d_model": 8}


def _point(**given: object) -> Config:
    return Config(**{"variant": "dense", "workload": "loss", "device": "cpu", "dtype": "fp32", "ce_chunk": None,
                     **SHAPE, **given})


def test_a_point_made_of_names_holds_what_they_name():
    point = _point(model="gpt2", vocab=50257, d_model=768)
    assert isinstance(point.variant, Variant) and point.variant is variants.resolve("dense")
    assert point.device is devices.get("cpu") and isinstance(point.model, Model) and point.has_model
    assert model_mod.of(point) == resolve_model("gpt2") and point.model.n_params == 124_439_808
    alone = _point()
    assert alone.model is ALONE and not alone.has_model and alone.value("model") == "none"
    with pytest.raises(ValueError, match="no model"):
        model_mod.of(alone)
    with pytest.raises(UsageError, match="unknown 'nope'"):
        _point(variant="nope")
    with pytest.raises(UsageError, match="unknown model 'nope'"):
        _point(model="nope")


def test_what_a_point_holds_is_a_str_of_its_name():
    """Code that reads a point's names as text keeps working: each equals, hashes and prints
    as its name; its CSV values and plain data are the names."""
    point = _point(model="gpt2", vocab=50257, d_model=768)
    for held, name in ((point.variant, "dense"), (point.device, "cpu"), (point.model, "gpt2")):
        assert held == name and name == held and hash(held) == hash(name) and f"{held}" == str(held) == name
        assert {name: 1}[held] == 1 and held.upper() == name.upper()
    assert point.value("variant") == "dense" and type(point.value("variant")) is str
    assert json.loads(json.dumps(point.plain()))["model"] == "gpt2" and point.axis_values()["model"] == "gpt2"
    assert point.variant != "chunked" and point.variant != variants.resolve("chunked")


TINY = {"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 64}


def test_a_model_whose_config_changed_is_another_model(tmp_path):
    path = model_file(tmp_path, TINY)
    before = resolve_model(str(path))
    model_file(tmp_path, {**TINY, "vocab_size": 128})
    stamp = path.stat().st_mtime_ns + 10**9  # a second later, whatever the file system's clock resolution
    os.utime(path, ns=(stamp, stamp))
    after = resolve_model(str(path))
    assert before == str(path) == after and before != after and after.vocab == 2 * before.vocab


def test_a_point_travels_to_another_process_by_its_names(tmp_path):
    """Pickled (a child's or a rank's arguments), a point's variant is resolved again there by
    what named it: the registered object, a user's function too."""
    loss = tmp_path / "mine.py"
    loss.write_text("import torch.nn.functional as F\n"
                    "def ce(h, weight, targets, ce_chunk=None):\n"
                    "    return F.cross_entropy((h @ weight.T).float(), targets)\n")
    spec = f"{loss}:ce"
    for point in (_point(), _point(variant=spec), _point(variant=f"{spec}-compiled"), body_config(_point())):
        back = pickle.loads(pickle.dumps(point))
        assert back == point and back.variant is point.variant and back.device == point.device


def test_the_body_step_is_a_hidden_registered_variant():
    body = body_config(_point(model="gpt2", vocab=50257, d_model=768, softcap=30.0))
    assert body.variant is variants.BODY and body.variant.hidden and body.softcap == 0.0
    assert variants.of(body).affine_in_rows and variants.of(body).load().__name__ == "stand_in"
    assert "(body)" not in variants.names() and variants.BODY not in variants.listed()
    with pytest.raises(UsageError, match=r"unknown '\(body\)'"):
        variants.resolve("(body)")
    with pytest.raises(UsageError, match="variant"):
        api.predict(variant="(body)", target="cpu", **SHAPE)


def test_the_grid_resolves_each_name_once_and_its_points_hold_the_objects(monkeypatch):
    calls: list[str] = []
    real = model_mod._resolve

    def counted(text: str, *args: object) -> Model:
        calls.append(text)
        return real(text, *args)

    model_mod._resolve.cache_clear()
    monkeypatch.setattr(model_mod, "_resolve", counted)
    grid = GridOptions(variant="dense,chunked", model="gpt2", batch="1,2", context=8, ce_chunk=8).grid("cpu")
    points = grid.expand()
    assert calls == ["gpt2"] and len(points) == 4
    assert all(isinstance(p.variant, Variant) and isinstance(p.model, Model) and p.device is grid.device
               for p in points)
    assert {p.model for p in points} == {grid.models["gpt2"]}


# Where a name may still be looked up: the registries themselves, and the edges where a name enters (an option, a
# file's text, a point made of names, a child process, a Python caller naming a variant or a device).
ENTRIES = {
    "devices.get": {"core/devices.py", "losses/variants.py", "run/grid.py", "analyze/verify.py"},
    "variants.get": {"losses/variants.py"},
    "resolve_model": {"models/model.py", "run/grid.py", "commands/predict.py"},
}
OWN = {"core/devices.py": "devices.get", "losses/variants.py": "variants.get"}  # each registry's own bare `get(`
ALIASES = {"devices_mod.get": "devices.get"}


def _calls() -> dict[str, set[str]]:
    """Each look-up of `ENTRIES` → the modules that call it."""
    found: dict[str, set[str]] = {name: set() for name in ENTRIES}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                text = ast.unparse(node.func)
                text = OWN.get(where, text) if text == "get" else ALIASES.get(text, text)
                if text in found:
                    found[text].add(where)
    return found


def test_a_name_is_looked_up_only_where_it_enters():
    """`devices.get`, `variants.get` and `resolve_model` are called by their registries and
    where a name enters: the engine, the runner and the renderers hold what was resolved."""
    assert _calls() == ENTRIES
