"""torch.optim as a step on `meta` needs it: fused AdamW's device check passes any device."""
from __future__ import annotations

import contextlib

from cebench.core.patched import Replaced
from cebench.core.version import TORCH_CHECKED

CHECKED = {"torch": TORCH_CHECKED}
FUSED_CHECK = Replaced("torch.optim.adam", ("_device_dtype_check_for_fused",),
                       "fused AdamW refuses `meta` parameters; the step it makes is the same on the target")


def any_device() -> contextlib.AbstractContextManager[None]:
    """Within: torch.optim's fused-AdamW device check passes any device (`meta` included)."""
    return FUSED_CHECK({"_device_dtype_check_for_fused": lambda *args, **kwargs: None})
