"""transformers as a model's step on `meta` needs it (`cebench.models.hf`): its sdpa attention
registered under a name of cebench's that runs the kernel the target runs (by replacing the
`scaled_dot_product_attention` it calls, within that call only), the model's config set to
it, and packed sequences not looked for (that reads position ids' data)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cebench.core.patched import Replaced
from cebench.core.version import TORCH_CHECKED

CHECKED = {"transformers": ("5.25.0",), "torch": TORCH_CHECKED}
SDPA = Replaced("torch.nn.functional", ("scaled_dot_product_attention",),
                "within transformers' sdpa attention only: the kernel the target runs, called by name")
PACKED = Replaced("transformers.masking_utils", ("find_packed_sequence_indices",),
                  "no packed sequences, as real position ids 0..context-1 without padding say", needs="transformers")
ATTENTION_CONFIG = Replaced("transformers.PretrainedConfig", ("_attn_implementation",),
                            "the model's attention: cebench's registered sdpa", needs="transformers")


def attention_implementation(config: Any) -> str:
    """The attention a transformers model's `config` runs ('sdpa', 'eager', …)."""
    return str(config._attn_implementation)


def use_attention(config: Any, name: str) -> None:
    """Make the model of `config` run the attention registered as `name`."""
    ATTENTION_CONFIG.set_on(config, {"_attn_implementation": name})


def register_attention(name: str, forward: Callable[..., Any]) -> None:
    """Register `forward` with transformers as the attention (and its sdpa mask as the mask
    function) called `name`."""
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    from transformers.modeling_utils import AttentionInterface

    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, sdpa_mask)
