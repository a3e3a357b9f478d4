"""`torch.Tensor`'s methods and torch's tensor factories, as a step traced on `meta` needs them:
seen on the target's device by the peers (`cebench.engine.device_view`), remembered when made
from Python data (`cebench.engine.data_reads`), copied through the dispatcher under inductor
(`cebench.engine.compiled`); and torch's RNG state, watched (a checkpoint saves one per chunk,
made outside the dispatcher)."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from cebench.core.patched import Replaced
from cebench.core.version import TORCH_CHECKED

CHECKED = {"torch": TORCH_CHECKED}
FACTORIES: tuple[str, ...] = ("empty", "zeros", "ones", "full", "empty_strided", "arange", "tensor", "as_tensor",
                              "rand", "randn", "randint", "empty_like", "zeros_like", "ones_like", "full_like")
METHODS: tuple[str, ...] = ("to", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor")
DATA_FACTORIES: tuple[str, ...] = ("tensor", "as_tensor", "scalar_tensor")  # made from Python data

TENSOR = Replaced("torch.Tensor", ("device", *METHODS, "copy_"),
                  "a peer's view of the target device (`device`, the methods that make tensors on it); "
                  "`copy_` through the dispatcher (a CPU build has no CUDA device guard)")
TORCH = Replaced("torch", tuple(dict.fromkeys((*FACTORIES, *DATA_FACTORIES, "get_rng_state"))),
                 "factories that make tensors on the target's device, or from Python data; the RNG "
                 "state a checkpoint saves")


@contextlib.contextmanager
def watch_rng_states(track: Callable[[torch.Tensor], None]) -> Iterator[None]:
    """Pass each CPU RNG state `torch.get_rng_state()` returns to `track`: the state
    `torch.utils.checkpoint` saves per chunk is a CPU tensor made outside the dispatcher."""
    original = torch.get_rng_state

    def tracked() -> torch.Tensor:
        state = original()
        track(state)
        return state

    with TORCH({"get_rng_state": tracked}):
        yield


REAL_DEVICE = torch._C.TensorBase.device  # the C getter under `Tensor.device`: a tensor's true device
