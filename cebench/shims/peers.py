"""A followed peer's `torch.compile`d helpers (Cut Cross-Entropy compiles two when it is
imported), replaced in the modules that hold them for a step traced on `meta`
(`cebench.engine.compiled_helpers`): found by the attribute `torch.compile` leaves on its
wrappers, unwrapped to their Python."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cebench.core.patched import Replaced
from cebench.core.version import TORCH_CHECKED

CHECKED = {"torch": TORCH_CHECKED, "cut-cross-entropy": ("25.1.1",)}
# Each module found at run time holding compiled helpers has them replaced; the canary checks Cut
# Cross-Entropy's own.
HELPERS = Replaced("cut_cross_entropy.cce", ("sort_logit_avg",), "a compiled helper run as its Python, or as "
                   "inductor's code on meta", needs="cut_cross_entropy", found=True)
_WRAPPED = "_torchdynamo_orig_callable"  # what `torch.compile` sets on the function it returns


def compiled_functions(module: object) -> dict[str, Callable[..., Any]]:
    """The functions `module` holds that `torch.compile` wrapped: name → original."""
    found = {}
    for name, value in vars(module).items():
        if callable(value) and hasattr(value, _WRAPPED):  # torch._dynamo is imported then
            from torch._dynamo.eval_frame import innermost_fn

            original = innermost_fn(value)
            if original is not value:
                found[name] = original
    return found
