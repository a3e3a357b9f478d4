"""`torch.cuda` as a step predicted for a GPU target asks it, on a machine with or without a
GPU: the card's answers (`cebench.engine.device_view.cuda_answers`), and the raw stream
inductor's GPU wrapper asks for before each launch."""
from __future__ import annotations

from cebench.core.patched import Replaced
from cebench.core.version import TORCH_CHECKED

CHECKED = {"torch": TORCH_CHECKED}
ASKED: tuple[str, ...] = ("get_device_capability", "get_device_properties", "is_bf16_supported", "current_device",
                          "device_count", "get_device_name")  # what a peer or inductor asks about its card

CUDA = Replaced("torch.cuda", ASKED, "the target card's answers to a peer's (or inductor's) questions")
RAW_STREAM = Replaced("torch._C", (), "the stream inductor's GPU wrapper asks for before each launch: 0 (a CPU "
                      "build lacks the function; a CUDA build's real one initialises CUDA, which fails without a "
                      "GPU)", added=("_cuda_getCurrentRawStream",))
