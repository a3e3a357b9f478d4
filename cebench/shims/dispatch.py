"""torch's Python dispatch-mode stack, left for work that is not the step's: inductor compiling
a graph under a tracker must see no mode, as Dynamo asks too."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from cebench.core.patched import Replaced
from cebench.core.version import TORCH_CHECKED
from cebench.shims.torch_names import modes_off

CHECKED = {"torch": TORCH_CHECKED}
MODE_FLAGS = Replaced("torch.utils._python_dispatch",
                      ("_is_in_torch_dispatch_mode", "_is_in_non_infra_torch_dispatch_mode"),
                      "torch 2.8's Dynamo reads these flags (set only by entering and leaving a mode) and would "
                      "skip every frame compiled under a tracker")


@contextlib.contextmanager
def outside_dispatch_modes() -> Iterator[None]:
    """Within: no Python dispatch mode is on. `_disable_current_modes` takes the modes off
    their stack; the module flags torch 2.8's Dynamo reads instead are cleared too, and set
    back after."""
    with modes_off(), \
            MODE_FLAGS({"_is_in_torch_dispatch_mode": False, "_is_in_non_infra_torch_dispatch_mode": False}):
        yield
