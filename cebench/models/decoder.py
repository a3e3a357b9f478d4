"""cebench's reference decoder, written plainly in torch, for a `ModelSpec`.

Token embedding (GPT-2: plus learned positions; Gemma 2: times sqrt(d_model)), dropout
where the config sets it (GPT-2: embeddings, attention weights, each branch's output), then per
block norm → causal attention through `F.scaled_dot_product_attention` → MLP, each added
back to the residual stream (Gemma 2 also normalises each branch's output), then a final
norm. Llama-style blocks use RMSNorm (computed in fp32), RoPE and SwiGLU; GPT-2 blocks
LayerNorm and a GELU MLP with biases. What `cebench.models.spec` says is left out is left
out here too.

Grouped-query attention: the key/value heads go to the kernel as they are (`enable_gqa`)
unless the device's kernel cannot take them so (`attention.repeats_kv`): on CUDA in fp32
(and in fp16 below sm80) they are first repeated per group, because the memory-efficient
kernel refuses `enable_gqa` and the step would fall to the math kernel, which materialises
batch × heads × context² scores; a CPU's flash kernel takes them grouped in every dtype. The
choice rests on the device's compute capability and the dtype, so a build on `meta` runs
what the real device runs. A model named with `:repeat-kv` (`ModelSpec.repeat_kv`) repeats
them on every device, as torchtune's attention does: each block's repeated keys and values
are what its kernel saves.

Built on `meta` it allocates nothing; on a real device its weights are drawn from
N(0, initializer_range²) (norms: 1, Gemma's 1 + weight: 0; biases: 0).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.torch_version import TorchVersion
from torch.utils.checkpoint import checkpoint

from cebench.core import devices
from cebench.core.errors import UsageError
from cebench.models.attention import attend, kernel_for, repeats_kv
from cebench.models.spec import Family, ModelSpec

_SDPA_GQA = TorchVersion(torch.__version__) >= "2.5"  # has enable_gqa (older releases: k, v always repeated)


class Decoder(nn.Module):
    """(batch, context) int64 token ids → (batch, context, d_model) hidden states, the final
    norm applied. `head` is the output projection's weight (vocab, d_model): the embedding's
    when the spec ties them. `checkpointing`: each block runs under
    `torch.utils.checkpoint` (non-reentrant) when gradients are on, so that only its input
    is kept for backward. `attention`: the device (a kind, or a named GPU target) whose
    attention kernel to call by name (`cebench.models.attention`, by its compute capability),
    as a step on `meta` must; None: the one `F.scaled_dot_product_attention` picks for the
    tensors it gets on `device`."""

    def __init__(self, spec: ModelSpec, *, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, checkpointing: bool = False,
                 attention: devices.Device | None = None) -> None:
        super().__init__()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.spec, self.checkpointing = spec, checkpointing
        self.embed = nn.Embedding(spec.vocab, spec.d_model, **factory)
        gpt2 = spec.family == Family.GPT2
        self.positions = nn.Embedding(spec.max_positions, spec.d_model, **factory) if gpt2 else None
        on = torch.device(device if device is not None else "cpu")
        capability = attention.capability if attention is not None else devices.capability_of(on)
        self.blocks = nn.ModuleList(Block(spec, factory, capability, attention is not None)
                                    for _ in range(spec.n_layers))
        self.norm = _norm(spec, factory)
        self.lm_head = None if spec.tied else nn.Parameter(torch.empty(spec.vocab, spec.d_model, **factory))
        if not devices.is_meta(on):  # on meta there are no values to draw
            self._init_weights()

    @property
    def head(self) -> torch.Tensor:
        """The output projection's weight, (vocab, d_model)."""
        return self.embed.weight if self.lm_head is None else self.lm_head

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        context = ids.shape[1]
        x = self.embed(ids)
        rope = None
        if self.positions is not None:
            if context > self.spec.max_positions:
                raise UsageError(f"context {context} is more than the {self.spec.max_positions} learned positions "
                                 f"of this {self.spec.model_type} model", "context")
            x = x + self.positions(torch.arange(context, device=ids.device))
        else:
            rope = _rope(context, self.spec, ids.device, x.dtype)
        if self.spec.family == Family.GEMMA2:
            x = x * math.sqrt(self.spec.d_model)
        if self.spec.embed_dropout:
            x = F.dropout(x, self.spec.embed_dropout, self.training)
        for block in self.blocks:
            if self.checkpointing and torch.is_grad_enabled():
                x = checkpoint(block, x, rope, use_reentrant=False)
            else:
                x = block(x, rope)
        return self.norm(x)

    @torch.no_grad()
    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, self.spec.init_std)
                if isinstance(module, nn.Linear) and module.bias is not None:  # an Embedding has none
                    module.bias.zero_()
        if self.lm_head is not None:
            self.lm_head.normal_(0.0, self.spec.init_std)


class Block(nn.Module):
    """One decoder block: x + attention(norm(x)), then + mlp(norm(x)); Gemma 2 normalises
    each branch's output too."""

    def __init__(self, spec: ModelSpec, factory: dict, capability: tuple[int, int] | None, by_name: bool) -> None:
        super().__init__()
        gemma = spec.family == Family.GEMMA2
        self.attn_norm, self.attn = _norm(spec, factory), Attention(spec, factory, capability, by_name)
        self.mlp_norm, self.mlp = _norm(spec, factory), MLP(spec, factory)
        self.attn_out_norm = _norm(spec, factory) if gemma else nn.Identity()
        self.mlp_out_norm = _norm(spec, factory) if gemma else nn.Identity()
        self.dropout = spec.resid_dropout

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        x = x + self.attn_out_norm(self._drop(self.attn(self.attn_norm(x), rope)))
        return x + self.mlp_out_norm(self._drop(self.mlp(self.mlp_norm(x))))

    def _drop(self, x: torch.Tensor) -> torch.Tensor:
        """A branch's output under resid dropout (training only)."""
        return F.dropout(x, self.dropout, self.training) if self.dropout else x


class Attention(nn.Module):
    """Causal multi-head attention with n_kv_heads key/value heads (grouped-query when fewer
    than n_heads), RoPE on q and k when the spec has a rope_theta, on a GPU of compute
    `capability` (None: the host's CPU); `by_name`: its kernel called by name, as a step on
    `meta` must."""

    def __init__(self, spec: ModelSpec, factory: dict, capability: tuple[int, int] | None, by_name: bool) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = spec.n_heads, spec.n_kv_heads, spec.head_dim
        dtype = factory["dtype"] or torch.get_default_dtype()
        self.repeat_kv = spec.n_kv_heads != spec.n_heads and (spec.repeat_kv or not _SDPA_GQA
                                                              or repeats_kv(capability, dtype, spec.head_dim))
        kv_heads = spec.n_heads if self.repeat_kv else spec.n_kv_heads
        self.dropout = spec.attn_dropout
        self.kernel = kernel_for(capability, dtype, spec.n_heads, kv_heads, spec.head_dim,
                                 dropout=self.dropout) if by_name else None
        self.scale = spec.attn_scale
        self.q = nn.Linear(spec.d_model, spec.n_heads * spec.head_dim, bias=spec.qkv_bias, **factory)
        self.k = nn.Linear(spec.d_model, spec.n_kv_heads * spec.head_dim, bias=spec.qkv_bias, **factory)
        self.v = nn.Linear(spec.d_model, spec.n_kv_heads * spec.head_dim, bias=spec.qkv_bias, **factory)
        self.o = nn.Linear(spec.n_heads * spec.head_dim, spec.d_model, bias=spec.out_bias, **factory)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        batch, context, _ = x.shape
        q, k, v = (proj(x).view(batch, context, heads, self.head_dim).transpose(1, 2)
                   for proj, heads in ((self.q, self.n_heads), (self.k, self.n_kv_heads), (self.v, self.n_kv_heads)))
        if rope is not None:
            q, k = _rotate(q, *rope), _rotate(k, *rope)
        if self.repeat_kv:
            k, v = (t.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1) for t in (k, v))  # see the module
        out = attend(q, k, v, self.scale, self.kernel, dropout=self.dropout if self.training else 0.0)
        return self.o(out.transpose(1, 2).reshape(batch, context, self.n_heads * self.head_dim))


class MLP(nn.Module):
    """GPT-2: down(act(up(x))); the others gated: down(act(gate(x)) * up(x)) (SwiGLU, GeGLU)."""

    def __init__(self, spec: ModelSpec, factory: dict) -> None:
        super().__init__()
        gated = spec.family != Family.GPT2
        self.gate = nn.Linear(spec.d_model, spec.d_ff, bias=spec.mlp_bias, **factory) if gated else None
        self.up = nn.Linear(spec.d_model, spec.d_ff, bias=spec.mlp_bias, **factory)
        self.down = nn.Linear(spec.d_ff, spec.d_model, bias=spec.mlp_bias, **factory)
        activations: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"silu": F.silu, "gelu": F.gelu,
                                                                          "gelu_tanh": _gelu_tanh,
                                                                          "gelu_new": _gelu_new}
        self.activation = activations[spec.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is None:
            return self.down(self.activation(self.up(x)))
        return self.down(self.activation(self.gate(x)) * self.up(x))


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) computed in fp32, then times weight (Gemma: times 1 + weight,
    in fp32 before the cast back)."""

    def __init__(self, d_model: int, eps: float, plus_one: bool, factory: dict) -> None:
        super().__init__()
        self.eps, self.plus_one = eps, plus_one
        self.weight = nn.Parameter((torch.zeros if plus_one else torch.ones)(d_model, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.plus_one:
            return (h * (1.0 + self.weight.float())).to(x.dtype)
        return self.weight * h.to(x.dtype)


def _norm(spec: ModelSpec, factory: dict) -> nn.Module:
    if spec.family == Family.GPT2:
        return nn.LayerNorm(spec.d_model, eps=spec.norm_eps, **factory)
    return RMSNorm(spec.d_model, spec.norm_eps, spec.family == Family.GEMMA2, factory)


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _gelu_new(x: torch.Tensor) -> torch.Tensor:
    """The tanh approximation of GELU in separate ops, as transformers' `gelu_new` (GPT-2's)
    writes it: each op's saved input is kept for backward."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _rope(context: int, spec: ModelSpec, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """cos and sin, (context, head_dim), of the rotation angles position × theta^(-2i/head_dim)."""
    assert spec.rope_theta is not None  # every family but GPT-2 (learned positions) has one
    inv_freq = 1.0 / spec.rope_theta ** (torch.arange(0, spec.head_dim, 2, device=device, dtype=torch.float32)
                                         / spec.head_dim)
    angles = torch.outer(torch.arange(context, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on (batch, heads, context, head_dim), the two halves of head_dim as pairs."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin
