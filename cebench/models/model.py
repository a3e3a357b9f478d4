"""One name for a model, whatever it is: a preset, a `config.json` path (either with
`:repeat-kv` after it: grouped keys and values repeated per query head before attention, as
torchtune's attention does), the transformers model of either (`hf:` before it), or a
user's build.

Presets are Hugging Face `config.json` files shipped in `cebench/models/presets/` (the
published files' fields, less transformers' bookkeeping such as `transformers_version`);
cebench builds its reference decoder (`cebench.models.decoder`) for them and for any
config file, the `transformers` model itself for ``hf:`` (`cebench.models.hf`), and calls a
user's `build()` (`cebench.models.contract`) for the rest. A preset is also named by the
Hugging Face id its config is from (`Preset.repo`, case ignored: ``meta-llama/Llama-3.1-8B``
is ``llama-3.1-8b``); `resolve_model` names it by its preset name (`canonical_name`), so
rows carry that. `Model.implementation` and `Model.attention` say what a model is predicted
and measured as (`Model.modelled_as`: both in one line).
"""
from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, cast

import cebench.models.hf as hf_mod
from cebench.core.axes import NO_MODEL
from cebench.core.config import ALONE, Alone, Config
from cebench.core.devices import Device, out_of_memory
from cebench.core.errors import UsageError, describe
from cebench.core.guard import user_code
from cebench.core.named import ByName
from cebench.losses.loader import import_object, is_spec
from cebench.models.contract import Built, check
from cebench.models.spec import ModelSpec, parse, read_config

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass(frozen=True)
class Preset:
    """A shipped config: `repo` the Hugging Face repository its config.json is from,
    `parameters` where its published parameter count comes from."""

    repo: str
    parameters: str

    @property
    def source(self) -> str:
        return f"huggingface.co/{self.repo}/blob/main/config.json; parameters: {self.parameters}"


HUB = "the Hub's count of the safetensors checkpoint"
DECODER, TRANSFORMERS, USER_BUILD = "cebench decoder", "transformers", "user build"  # `Model.implementation`
REPEAT_KV = "repeat-kv"  # after a preset or config.json: grouped keys and values repeated per query head
PRESETS: dict[str, Preset] = {
    "gpt2": Preset("openai-community/gpt2", "124,439,808, transformers' GPT2LMHeadModel (GPT-2 small, '124M')"),
    "llama-3.2-1b": Preset("meta-llama/Llama-3.2-1B", f"1,235,814,400, {HUB} (1.24B)"),
    "llama-3.2-3b": Preset("meta-llama/Llama-3.2-3B", f"3,212,749,824, {HUB} (3.21B)"),
    "llama-3.1-8b": Preset("meta-llama/Llama-3.1-8B", f"8,030,261,248, {HUB} (8.03B)"),
    "llama-3.1-70b": Preset("meta-llama/Llama-3.1-70B", f"70,553,706,496, {HUB} (70.6B)"),
    "qwen2.5-7b": Preset("Qwen/Qwen2.5-7B", f"7,615,616,512, {HUB} (7.62B)"),
    "gemma-2-2b": Preset("google/gemma-2-2b", f"2,614,341,888, {HUB} (2.61B)"),
}


@dataclass(frozen=True, eq=False, repr=False)
class Model(ByName):
    """A model a step runs: `name` as given (a preset, a config path, either after `hf:`,
    or a build spec), `source` where its numbers come from, `spec` its shape (None for a
    user's build), `hf` its transformers config when transformers builds it (else cebench's
    reference decoder does, or the user's build), and `n_params` its parameters' elements,
    a tied head counted once; `vocab` and `d_model` the head weight's shape; `softcap` the
    final-logit softcap its loss applies (0: none; a user's build: none)."""

    name: str
    source: str
    spec: ModelSpec | None
    n_params: int
    vocab: int
    d_model: int
    hf: hf_mod.HF | None = None

    def build(self, device: torch.device | str = "cpu", dtype: torch.dtype | None = None, *,
              checkpointing: bool = False, attention: Device | None = None) -> Built:
        """Its body and head weight on `device` (`meta`: nothing allocated), floating
        parameters in `dtype` (None: as built). `checkpointing`: each block of the
        reference decoder under `torch.utils.checkpoint` (a transformers model: its own
        gradient checkpointing); a user's build checkpoints its own (`UsageError`).
        `attention`: the device (a kind, or a named GPU target) whose attention kernel the
        model calls by name (`cebench.models.attention`), as on `meta` it must (None: whichever
        `F.scaled_dot_product_attention` picks); a user's body runs its own."""
        if self.hf is not None and self.spec is not None:
            return hf_mod.build(self.hf, self.spec.n_layers, device, dtype, checkpointing=checkpointing,
                                attention=attention)
        if self.spec is not None:
            from cebench.models.decoder import Decoder

            decoder = Decoder(self.spec, device=device, dtype=dtype, checkpointing=checkpointing,
                              attention=attention)
            return Built(decoder, decoder.head)
        if checkpointing:
            raise UsageError(f"{self.name}: cebench checkpoints the blocks of a preset or config.json model; a "
                             "build's body checkpoints its own", "model")
        return _build(self.name, device, dtype)

    @property
    def checkpoints_blocks(self) -> bool:
        """Whether cebench checkpoints this model's blocks (--activation-checkpointing blocks): a
        preset's or a config.json's, which it builds; a user's build checkpoints its own body."""
        return self.spec is not None

    @property
    def softcap(self) -> float:
        return (self.spec.final_softcap if self.spec is not None else None) or 0.0

    @property
    def implementation(self) -> str:
        """What runs its step: 'cebench decoder' (a preset or config.json: `cebench.models.decoder`),
        'transformers' (``hf:``, `cebench.models.hf`) or 'user build'."""
        if self.spec is None:
            return USER_BUILD
        return TRANSFORMERS if self.hf is not None else DECODER

    @property
    def attention(self) -> str:
        """Its attention, in a few words. cebench's decoder: 'fused SDPA' (torch's
        `scaled_dot_product_attention`, its kernel by the target's compute capability and dtype,
        `cebench.models.attention`: flash in bf16/fp16 and memory-efficient in fp32 on every
        named GPU, the CPU's flash kernel on a CPU; with attention dropout, as GPT-2's, a CPU
        runs the math kernel, which materialises the scores), then what it leaves out or adds:
        Gemma 2's attention logit softcap is not applied (no fused kernel has one), `:repeat-kv`
        repeats keys and values per query head. transformers: the attention implementation it
        picks for the config (cebench sets none: 'sdpa', or 'eager' where the model has no sdpa,
        as Gemma 2, whose eager attention softcaps its materialised scores). A user's build:
        'its own'."""
        if self.spec is None:
            return "its own"
        cap = self.spec.attn_softcap
        if self.hf is not None:
            chosen = hf_mod.attention(self.hf)
            return f"{chosen}, softcapped {cap:g}" if cap and chosen == "eager" else chosen
        parts = ["fused SDPA" + (" (math on CPU: dropout)" if self.spec.attn_dropout else "")]
        if self.spec.repeat_kv:
            parts.append("k/v repeated per head")
        if cap:
            parts.append(f"softcap {cap:g} not applied")
        return ", ".join(parts)

    @property
    def modelled_as(self) -> str:
        """`implementation` and `attention` in one line: 'cebench decoder; attention: fused SDPA,
        softcap 50 not applied' (gemma-2-2b), 'transformers; attention: eager, softcapped 50'
        (hf:gemma-2-2b)."""
        return f"{self.implementation}; attention: {self.attention}"


def resolve_model(text: str) -> Model:
    """The model `text` names: a preset (PRESETS), a path to a Hugging Face config.json
    (read, never downloaded), either after ``hf:`` (the transformers model, `cebench.models.hf`),
    or ``path/to/file.py:build`` / ``pkg.mod:build`` (imported, called and checked on meta).
    `UsageError` (param 'model') when it names nothing usable. Resolved once per process
    while the file it names stays as it was (a build's module, like any Python module, is
    imported once per process). A preset is named by its name or its Hugging Face id, case
    ignored; the `Model`'s `name` is its canonical name (`canonical_name`). A name that is
    both a preset's and an existing path's is a `UsageError` (`./name` names the file)."""
    _unambiguous(text)
    text = canonical_name(text)
    name = hf_mod.split(text)[0] if text.startswith(hf_mod.PREFIX) else text
    file = Path(name if name.endswith(".json") or Path(name).is_file() else name.rpartition(":")[0])
    stamp = file.stat().st_mtime_ns if file.is_file() else None
    return _resolve(text, str(file.resolve()) if stamp is not None else "", stamp)


@functools.lru_cache(maxsize=64)
def _resolve(text: str, where: str, stamp: int | None) -> Model:
    """`resolve_model(text)`, cached by the file it names (`where`, '' for none) and that
    file's modification time (`stamp`)."""
    if text.startswith(hf_mod.PREFIX):
        return _hf_model(text)
    if text.endswith(".py"):
        raise UsageError(f"{text}: a Python file names the function that builds the model: {text}:build", "model")
    where, repeat_kv = _decoder_name(text)
    found = _config(where)
    if found is not None:
        return _decoder_model(text, found[1], replace(parse(found[0], where), repeat_kv=repeat_kv))
    if repeat_kv:
        raise UsageError(f"{text}: {REPEAT_KV} follows a preset ({', '.join(PRESETS)}) or a config.json", "model")
    head, _, last = text.rpartition(":")
    if head in PRESETS or head.endswith(".json"):  # a suffix this model does not take
        if last in (hf_mod.NO_DROPOUT, hf_mod.NO_CACHE):
            raise UsageError(f"{text}: :{last} applies to {hf_mod.PREFIX} models only ({hf_mod.PREFIX}{text})",
                             "model")
        raise UsageError(f"{text}: unknown suffix '{last}' (a preset or config.json takes :{REPEAT_KV}; an "
                         f"{hf_mod.PREFIX} model :{hf_mod.NO_DROPOUT}, :{hf_mod.NO_CACHE})", "model")
    if is_spec(text):
        built = _build(text, "meta", None)
        return Model(text, f"user build {text}", None, built.n_params, built.vocab, built.d_model)
    example = next(iter(PRESETS.values())).repo
    raise UsageError(f"unknown model '{text}' (choose from {', '.join(PRESETS)}, or a preset's Hugging Face id "
                     f"as cebench models cites it, e.g. {example}; or give path/to/config.json, "
                     f"either after {hf_mod.PREFIX} for the transformers model, path/to/file.py:build or "
                     "package.module:build)", "model")


def named(text: str) -> Model | Alone:
    """What a point's `model` text names (`cebench.core.config.RESOLVED`): `resolve_model`'s
    model, or `ALONE` for the loss alone (`NO_MODEL`)."""
    return ALONE if text == NO_MODEL else resolve_model(text)


def of(config: Config) -> Model:
    """The model `config` holds, resolved where its name entered (ValueError for the loss
    alone: ask `Config.has_model` first)."""
    if not config.has_model:
        raise ValueError("a point of the loss alone has no model")
    return cast(Model, config.model)


def _unambiguous(text: str) -> None:
    """A `UsageError` when `text` (its preset or file part, less ``hf:`` and the suffixes)
    names a preset and an existing file or folder at once."""
    head = text.removeprefix(hf_mod.PREFIX).partition(":")[0]
    preset = preset_name(head)
    if preset is None or not Path(head).exists():
        return
    other = next(n for n in (preset, PRESETS[preset].repo) if n.lower() != head.lower())
    raise UsageError(f"'{head}' names both the preset {preset} and the {'folder' if Path(head).is_dir() else 'file'} "
                     f"{Path(head).resolve()}: give ./{head} for the file, {other} for the preset", "model")


def preset_name(text: str) -> str | None:
    """The preset `text` names by its name or by its Hugging Face id (`Preset.repo`, the
    repository its config.json is from), case ignored: 'Meta-Llama/Llama-3.1-8B' →
    'llama-3.1-8b'; None when it names none."""
    key = text.lower()
    return next((name for name, p in PRESETS.items() if key in (name.lower(), p.repo.lower())), None)


def canonical_name(text: str) -> str:
    """A model name with its preset (`preset_name`) as `PRESETS` names it, the ``hf:`` before
    it and the suffixes after it kept: 'hf:meta-llama/Llama-3.1-8B:no-cache' →
    'hf:llama-3.1-8b:no-cache'; any other name as given."""
    prefix = hf_mod.PREFIX if text.startswith(hf_mod.PREFIX) else ""
    head, sep, suffixes = text[len(prefix):].partition(":")
    name = preset_name(head)
    return text if name is None else f"{prefix}{name}{sep}{suffixes}"


def _decoder_name(text: str) -> tuple[str, bool]:
    """'llama-3.2-3b:repeat-kv' → ('llama-3.2-3b', True): the preset or config path, and
    whether the decoder repeats grouped keys and values per query head on every device."""
    head, _, last = text.rpartition(":")
    return (head, True) if head and last == REPEAT_KV else (text, False)


def presets() -> list[Model]:
    """Every preset, resolved."""
    return [resolve_model(name) for name in PRESETS]


def _config(name: str) -> tuple[dict, str] | None:
    """The config.json `name` names (a preset's, shipped, or a file's) and where it is from;
    None when it names neither."""
    if name in PRESETS:
        text = (files("cebench.models") / "presets" / f"{name}.json").read_text(encoding="utf-8")
        return json.loads(text), PRESETS[name].source
    if name.endswith(".json") or Path(name).is_file():
        return read_config(name), f"config file {name}"
    return None


def _n_params(spec: ModelSpec, built: Callable[[int], Built]) -> int:
    """Parameters of `spec`'s model, counted on its builds (`built(n_layers)`) of no block and
    of one (its blocks are alike), so a deep config costs no more than a shallow one."""
    none, one = (built(n).n_params for n in (0, 1))
    return none + spec.n_layers * (one - none)


def _decoder_model(name: str, source: str, spec: ModelSpec) -> Model:
    """The reference decoder's `Model` for `spec`."""
    from cebench.models.decoder import Decoder

    def built(n: int) -> Built:
        decoder = Decoder(replace(spec, n_layers=n), device="meta")
        return Built(decoder, decoder.head)

    return Model(name, source, spec, _n_params(spec, built), spec.vocab, spec.d_model)


def _hf_model(text: str) -> Model:
    """The transformers model `text` ('hf:<preset or config.json>[:no-dropout][:no-cache]') names."""
    where, dropout, cache = hf_mod.split(text)
    found = _config(where)
    if found is None:
        head, _, last = where.rpartition(":")
        base = hf_mod.split(hf_mod.PREFIX + head)[0] if head else ""  # less the suffixes before `last`
        if base in PRESETS or Path(base).is_file():
            raise UsageError(f"{text}: unknown suffix '{last}' (an {hf_mod.PREFIX} model takes "
                             f":{hf_mod.NO_DROPOUT}, :{hf_mod.NO_CACHE})", "model")
        raise UsageError(f"{text}: {where} is neither a preset ({', '.join(PRESETS)}) nor a config.json", "model")
    config, source = found
    spec = parse(config, where)
    hf = hf_mod.HF(json.dumps(config, sort_keys=True), dropout=dropout, cache=cache)
    n_params = _n_params(spec, lambda n: hf_mod.build(hf, n, "meta", None))
    return Model(text, f"transformers, {source}", spec, n_params, spec.vocab, spec.d_model, hf)


def _place(body: nn.Module, device: torch.device, dtype: torch.dtype | None) -> None:
    """Move each parameter and buffer of `body` to `device` (one without an index: the current
    one of its kind, as `Tensor.to` takes it) and cast each floating-point one to `dtype`
    (None: kept), in place (`.data`): the parameters stay the same objects, so a tied head
    stays tied. Not `Module.to`, which swaps fake parameters (a step predicted under FSDP)."""
    import torch

    with torch.no_grad():
        for t in (*body.parameters(), *body.buffers()):
            cast = dtype if dtype is not None and t.is_floating_point() else t.dtype
            if t.device != device or t.dtype != cast:
                t.data = t.data.to(device=device, dtype=cast)


def _build(spec: str, device: torch.device | str, dtype: torch.dtype | None) -> Built:
    """Import the build `spec` names, call it under `torch.device(device)`, check what it
    returns, and move and cast it to `device` and `dtype`."""
    import torch
    from torch import nn

    try:
        fn = import_object(spec, spec, "model")
    except UsageError as exc:
        raise UsageError(exc.message, "model") from None
    if not callable(fn):
        raise UsageError(f"{spec}: is {type(fn).__name__}, not a function; build() returns (body, head weight)",
                         "model")
    with user_code(f"{spec}: build()", "model"):
        try:
            with torch.device(device):
                returned = fn()
        except Exception as exc:  # a broken user build: one line, before anything runs
            if out_of_memory(exc):  # too large for this machine: the point's `oom` row, as its step's would be
                raise
            raise UsageError(f"{spec}: build() raised {describe(exc, 200)}", "model") from None
    built = check(returned, spec)
    body, head = built.body, built.head
    _place(body, torch.device(device), dtype)
    if any(p is head for p in body.parameters()):  # tied: the same parameter, moved in place
        return built
    return Built(body, nn.Parameter(head.detach().to(device=device, dtype=dtype), requires_grad=head.requires_grad))
