"""The Hugging Face `transformers` model itself as a step's body: ``--model hf:<preset or config.json>``.

``hf:llama-3.2-1b`` or ``hf:path/to/config.json`` (of a model type `cebench.models.spec`
reads) builds the model `transformers` builds from that config
(`AutoModelForCausalLM.from_config`, random weights, nothing downloaded),
in training mode: its body is the base model (hidden states, its final norm applied), its
head the output embedding's weight, so that its own loss (the variant `hf-loss`) or any
cebench variant runs on them. ``--activation-checkpointing blocks`` is its own gradient
checkpointing (non-reentrant). Dropout and ``use_cache`` are as the config says; the
suffixes ``:no-dropout`` (every ``*dropout``/``*pdrop`` probability 0) and ``:no-cache``
(``use_cache`` false) turn them off, as in ``hf:gpt2:no-dropout:no-cache``.

On `meta` (a prediction) two things differ from a real device, and are adapted so that the
step allocates what the device's does:

- attention: transformers' own sdpa function runs, but `F.scaled_dot_product_attention`
  inside it is the target's kernel called by name (`cebench.models.attention`); on `meta`
  the dispatcher would take the math fallback, which materialises the scores;
- `find_packed_sequence_indices`, which reads position ids' values (`.item()`) to find
  packed sequences, answers what it answers on real ids without padding: none packed.

`transformers` is an optional dependency (``pip install cebench[hf]``); nothing here imports
it until a model is built.
"""
from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from cebench.core import pins
from cebench.core.errors import UsageError
from cebench.core.patched import resolve
from cebench.shims import transformers as shim

if TYPE_CHECKING:
    import torch
    from torch import nn

    from cebench.core.devices import Device
    from cebench.models.contract import Built

PREFIX = "hf:"
NO_DROPOUT, NO_CACHE = "no-dropout", "no-cache"
PIP = pins.install("transformers")  # the release make install installs (it needs no torch of its own)


@dataclass(frozen=True)
class HF:
    """A transformers model's config as cebench builds it: `config` the config.json's JSON
    text, `dropout` and `cache` whether its dropout and `use_cache` stay as it says."""

    config: str
    dropout: bool = True
    cache: bool = True

    def switched(self, config: Any) -> Any:
        """transformers' `config` object with the switches applied (in place): every dropout
        probability it has, its own or its class's default, 0; `use_cache` false."""
        if not self.dropout:
            for key, value in config.to_dict().items():
                if key.endswith(("dropout", "pdrop")) and isinstance(value, float) and value:
                    setattr(config, key, 0.0)
        if not self.cache:
            config.use_cache = False
        return config


def split(text: str) -> tuple[str, bool, bool]:
    """'hf:gpt2:no-dropout' → ('gpt2', dropout False, cache True): the preset or config path
    after `PREFIX`, less its suffixes."""
    rest, dropout, cache = text[len(PREFIX):], True, True
    while True:
        head, _, last = rest.rpartition(":")
        if head and last in (NO_DROPOUT, NO_CACHE):
            dropout, cache = dropout and last != NO_DROPOUT, cache and last != NO_CACHE
            rest = head
            continue
        break
    if not rest:
        raise UsageError(f"{text}: name a preset or a config.json after {PREFIX} (e.g. {PREFIX}gpt2)", "model")
    return rest, dropout, cache


def build(hf: HF, n_layers: int, device: torch.device | str, dtype: torch.dtype | None, *,
          checkpointing: bool = False, attention: Device | None = None) -> Built:
    """The transformers model of `hf` with `n_layers` blocks on `device` (`meta`: nothing
    allocated), floating parameters in `dtype` (None: torch's default), in training mode, as a
    `Built` (body: the base model's hidden states; head: the output embedding's weight).
    `checkpointing`: its gradient checkpointing, non-reentrant. `attention`: the device (a
    kind, or a named GPU target) it stands in for on `meta` (the adaptations above)."""
    import torch

    from cebench.models.contract import Built

    transformers = _transformers()
    config = _config(hf, n_layers)
    if checkpointing:  # as transformers turns it off itself for a checkpointed step, with a warning
        config.use_cache = False
    with torch.device(device), _quiet(transformers):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype or torch.get_default_dtype())
    if attention is not None and shim.attention_implementation(model.config) == "sdpa":  # eager: plain ops, meta or not
        shim.use_attention(model.config, _register(attention))
    if checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # its newer name; the older one is deprecated
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.train()
    body = _body_class()(model, attention is not None)
    return Built(body, model.get_output_embeddings().weight)


@functools.cache
def attention(hf: HF) -> str:
    """The attention implementation transformers picks for the model of `hf` (cebench asks for
    none): 'sdpa' where the model supports it, else 'eager' (Gemma 2: its attention logit
    softcap is not in sdpa), as `config._attn_implementation` of a block-less build on `meta`
    says. On a real device that one runs; on `meta` an sdpa model runs the target's kernel by
    name (above), an eager one its plain ops."""
    import torch

    transformers = _transformers()
    with torch.device("meta"), _quiet(transformers):
        model = transformers.AutoModelForCausalLM.from_config(_config(hf, 0))
    return shim.attention_implementation(model.config)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise UsageError(f"an {PREFIX} model needs transformers: {PIP}", "model") from None
    return transformers


def _config(hf: HF, n_layers: int) -> Any:
    """transformers' config object of `hf` with `n_layers` blocks. `UsageError` for a model
    type it does not know."""
    transformers = _transformers()
    fields = json.loads(hf.config)
    model_type = fields.pop("model_type", None)
    try:
        with _quiet(transformers):
            config = transformers.AutoConfig.for_model(model_type, **fields)
    except (ValueError, KeyError) as exc:
        raise UsageError(f"transformers cannot build model_type {model_type!r}: {exc}", "model") from None
    config.num_hidden_layers = n_layers  # every config class maps its own name of it (GPT-2's n_layer) to this
    return hf.switched(config)


@contextlib.contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """transformers' warnings off (a random-weight model's config nags about token ids)."""
    logging = transformers.utils.logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


@functools.cache
def _register(device: Device) -> str:
    """The name of transformers' sdpa attention with the kernel `device` runs (by its compute
    capability) called by name, registered with transformers (attention and mask functions)
    once."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from cebench.models.attention import attend, kernel_for

    capability = device.capability

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None,
             dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
             enable_gqa: bool = False) -> torch.Tensor:
        kernel = kernel_for(capability, q.dtype, q.shape[1], k.shape[1], q.shape[-1], dropout=dropout_p,
                            mask=attn_mask is not None)
        return attend(q, k, v, scale, kernel, mask=attn_mask, dropout=dropout_p, causal=is_causal)

    functional = resolve(shim.SDPA.owner)  # here, not in the call, which Dynamo traces (an import breaks its graph)

    def forward(*args: Any, **kwargs: Any) -> Any:
        with shim.SDPA({"scaled_dot_product_attention": sdpa}, on=functional):
            return sdpa_attention_forward(*args, **kwargs)

    name = f"cebench-sdpa-{device.name}"
    shim.register_attention(name, forward)
    return name


@functools.cache
def _body_class() -> type[nn.Module]:
    """The body module's class (defined on first use: it imports torch)."""
    from torch import nn

    class HFBody(nn.Module):
        """(batch, context) token ids → the base model's last hidden states. `stand_in`: on
        `meta`, packed sequences are found without reading position ids."""

        def __init__(self, model: nn.Module, stand_in: bool) -> None:
            super().__init__()
            self.model, self.stand_in = model, stand_in

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            base = cast(nn.Module, self.model.base_model)
            if not self.stand_in:
                return base(input_ids=ids).last_hidden_state
            with shim.PACKED({"find_packed_sequence_indices": lambda position_ids: None}):
                return base(input_ids=ids).last_hidden_state

    return HFBody
