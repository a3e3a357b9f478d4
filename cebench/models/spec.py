"""A decoder's shape, read from a Hugging Face `config.json` (read locally, never downloaded).

Model types: `llama`, `mistral`, `qwen2` (RMSNorm, RoPE, grouped-query attention, SwiGLU;
qwen2 with q/k/v biases), `gemma2` (the same with GeGLU, norms before and after attention
and MLP, RMSNorm scaled by 1 + weight, the embedding times sqrt(d_model)) and `gpt2`
(LayerNorm, learned positions, GELU MLP, biases everywhere). The fields that set a shape
(vocabulary, width, depth, heads, MLP width) are required; the others take the defaults of
transformers' config class for that type. A leaf module: no torch.

Dropout is as the config says (GPT-2: 0.1 on the embeddings, attention and both residual
branches; the others' `attention_dropout`, 0 by default). What the reference decoder leaves
out, as it changes values, not shapes: `rope_scaling` (RoPE frequencies are unscaled),
sliding windows (the same as full causal attention up to `sliding_window` tokens) and Gemma
2's attention logit softcapping (kept as `attn_softcap`): `F.scaled_dot_product_attention`
has none, so its fused kernels run. transformers runs Gemma 2's attention eagerly for it,
scores materialised (`--model hf:`, `cebench.models.hf`, builds that).
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, overload

from cebench.core.errors import UsageError
from cebench.core.memory import BYTES_LIMIT

MODEL_TYPES = ("llama", "mistral", "qwen2", "gemma2", "gpt2")
# transformers' names of each activation, as cebench names them
# (`gelu_new` is the tanh approximation written out in separate ops, as transformers writes it: they save more)
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_new", "gelu_fast": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh"}


class Family(str, Enum):
    """How the reference decoder builds a model type (a string: `Family.GPT2 == 'gpt2'`)."""

    LLAMA = "llama"  # llama, mistral, qwen2: RMSNorm, RoPE, a gated MLP
    GEMMA2 = "gemma2"  # norms before and after attention and MLP, RMSNorm scaled by 1 + weight
    GPT2 = "gpt2"  # LayerNorm, learned positions


@dataclass(frozen=True)
class ModelSpec:
    """A decoder's shape and its numerics. Sizes are counts (tokens, features, heads);
    `norm_eps` the norms' epsilon; `attn_scale` the factor on q·k (None: 1/sqrt(head_dim));
    `final_softcap` the logit softcap a loss of this model applies (Gemma 2: 30; None: none);
    `attn_softcap` and `sliding_window` as published, not modelled; `torch_dtype` the dtype
    the weights were published in; `embed_dropout`, `attn_dropout` and `resid_dropout` the
    dropout probabilities on the embeddings, the attention weights and each block's two
    branches; `repeat_kv`: grouped key/value heads repeated per query head before attention
    on every device, as torchtune's attention does (else only where the kernel needs it)."""

    model_type: str
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    norm_eps: float
    tied: bool
    max_positions: int
    rope_theta: float | None
    qkv_bias: bool
    out_bias: bool
    mlp_bias: bool
    activation: str
    init_std: float
    attn_scale: float | None = None
    final_softcap: float | None = None
    attn_softcap: float | None = None
    sliding_window: int | None = None
    torch_dtype: str | None = None
    embed_dropout: float = 0.0
    attn_dropout: float = 0.0
    resid_dropout: float = 0.0
    repeat_kv: bool = False

    @property
    def family(self) -> Family:
        """GPT2 (LayerNorm, learned positions), GEMMA2 (pre and post norms) or LLAMA (the rest)."""
        return Family(self.model_type) if self.model_type in (Family.GPT2, Family.GEMMA2) else Family.LLAMA


def read_config(path: Path | str) -> dict[str, Any]:
    """The JSON object in the file `path`. `UsageError` (param 'model') when it is missing,
    unreadable, not JSON, or not an object."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file", "model") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read ({exc})", "model") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})", "model") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: a config.json holds a JSON object, not {type(config).__name__}", "model")
    return config


def parse(config: dict[str, Any], where: str) -> ModelSpec:
    """The spec of a Hugging Face config dict; `where` names it in errors. `UsageError`
    (param 'model') for a model type not in MODEL_TYPES, a missing shape field, a value of
    the wrong type, heads that do not divide, or a weight beyond `BYTES_LIMIT` in fp32."""
    fields = _Fields(config, where)
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        shown = "no model_type" if model_type is None else f"model_type {model_type!r}"
        raise UsageError(f"{where}: {shown} is not supported (supported: {', '.join(MODEL_TYPES)})", "model")
    spec = _gpt2(fields) if model_type == "gpt2" else _decoder(fields, model_type)
    positions = spec.max_positions if spec.rope_theta is None else 0  # gpt2's learned position embedding
    largest = max(spec.vocab, spec.d_ff, spec.n_heads * spec.head_dim, positions) * spec.d_model * 4
    if largest >= BYTES_LIMIT:
        raise UsageError(f"{where}: its largest fp32 weight would take {largest:,} bytes, beyond what any machine "
                         "can hold", "model")
    return spec


def _decoder(fields: _Fields, model_type: str) -> ModelSpec:
    """A llama, mistral, qwen2 or gemma2 config's spec."""
    d_model, n_heads = fields.count("hidden_size"), fields.count("num_attention_heads")
    gemma = model_type == "gemma2"
    head_dim = fields.count("head_dim") if gemma else fields.count("head_dim", _divide(fields, d_model, n_heads))
    attention_bias = fields.flag("attention_bias", False) if model_type in ("llama", "gemma2") else False
    windowed = model_type != "llama" and (model_type != "qwen2" or fields.flag("use_sliding_window", False))
    return ModelSpec(
        model_type=model_type, vocab=fields.count("vocab_size"), d_model=d_model,
        n_layers=fields.count("num_hidden_layers"), n_heads=n_heads, n_kv_heads=_kv_heads(fields, n_heads),
        head_dim=head_dim, d_ff=fields.count("intermediate_size"), norm_eps=fields.number("rms_norm_eps", 1e-6),
        tied=fields.flag("tie_word_embeddings", gemma),
        max_positions=fields.count("max_position_embeddings", _MAX_POSITIONS[model_type]),
        rope_theta=fields.number("rope_theta", 10000.0), qkv_bias=attention_bias or model_type == "qwen2",
        out_bias=attention_bias, mlp_bias=fields.flag("mlp_bias", False) if model_type == "llama" else False,
        activation=fields.activation("hidden_activation" if gemma else "hidden_act",
                                     "gelu_pytorch_tanh" if gemma else "silu"),
        init_std=fields.number("initializer_range", 0.02),
        attn_scale=fields.number("query_pre_attn_scalar", 256.0) ** -0.5 if gemma else None,
        final_softcap=fields.number("final_logit_softcapping", None) if gemma else None,
        attn_softcap=fields.number("attn_logit_softcapping", None) if gemma else None,
        sliding_window=fields.count("sliding_window", None) if windowed else None,
        torch_dtype=fields.text("torch_dtype"), attn_dropout=fields.probability("attention_dropout", 0.0))


# transformers' defaults of max_position_embeddings, per model type
_MAX_POSITIONS = {"llama": 2048, "mistral": 131072, "qwen2": 32768, "gemma2": 8192}


def _gpt2(fields: _Fields) -> ModelSpec:
    d_model, n_heads = fields.count("n_embd"), fields.count("n_head")
    return ModelSpec(
        model_type="gpt2", vocab=fields.count("vocab_size"), d_model=d_model, n_layers=fields.count("n_layer"),
        n_heads=n_heads, n_kv_heads=n_heads, head_dim=_divide(fields, d_model, n_heads),
        d_ff=fields.count("n_inner", 4 * d_model), norm_eps=fields.number("layer_norm_epsilon", 1e-5),
        tied=fields.flag("tie_word_embeddings", True), max_positions=fields.count("n_positions"), rope_theta=None,
        qkv_bias=True, out_bias=True, mlp_bias=True,
        activation=fields.activation("activation_function", "gelu_new"),
        init_std=fields.number("initializer_range", 0.02), torch_dtype=fields.text("torch_dtype"),
        embed_dropout=fields.probability("embd_pdrop", 0.1), attn_dropout=fields.probability("attn_pdrop", 0.1),
        resid_dropout=fields.probability("resid_pdrop", 0.1))


def _divide(fields: _Fields, d_model: int, n_heads: int) -> int:
    if d_model % n_heads:
        raise UsageError(f"{fields.where}: {n_heads} heads do not divide the width {d_model}", "model")
    return d_model // n_heads


def _kv_heads(fields: _Fields, n_heads: int) -> int:
    n_kv = fields.count("num_key_value_heads", n_heads)
    if n_heads % n_kv:
        raise UsageError(f"{fields.where}: {n_kv} key/value heads do not divide {n_heads} attention heads", "model")
    return n_kv


_REQUIRED = object()


class _Fields:
    """Typed reads of a config dict: a missing required field, or a given value of the wrong
    type, is a `UsageError` naming it; JSON null is the same as missing."""

    def __init__(self, config: dict[str, Any], where: str) -> None:
        self.config, self.where = config, where

    def _get(self, key: str, default: Any, kind: str, ok: Callable[[Any], bool]) -> Any:
        value = self.config.get(key)
        if value is None:
            if default is _REQUIRED:
                raise UsageError(f"{self.where}: missing field {key!r} (model_type "
                                 f"{self.config.get('model_type')})", "model")
            return default
        if not ok(value):
            raise UsageError(f"{self.where}: {key} is {value!r}; it is {kind}", "model")
        return value

    def count(self, key: str, default: Any = _REQUIRED) -> Any:
        return self._get(key, default, "a positive integer",
                         lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0)

    @overload
    def number(self, key: str, default: float) -> float: ...
    @overload
    def number(self, key: str, default: None) -> float | None: ...
    def number(self, key: str, default: float | None) -> float | None:
        value = self._get(key, default, "a positive, finite number",
                          lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf)
        return value if value is None else float(value)

    def probability(self, key: str, default: float) -> float:
        return float(self._get(key, default, "a probability in [0, 1)", lambda v: isinstance(v, (int, float))
                               and not isinstance(v, bool) and 0 <= v < 1))

    def flag(self, key: str, default: bool) -> bool:
        return self._get(key, default, "true or false", lambda v: isinstance(v, bool))

    def text(self, key: str) -> str | None:
        return self._get(key, None, "a string", lambda v: isinstance(v, str))

    def activation(self, key: str, default: str) -> str:
        name = self._get(key, default, f"one of {', '.join(ACTIVATIONS)}",
                         lambda v: isinstance(v, str) and v in ACTIVATIONS)
        return ACTIVATIONS[name]
