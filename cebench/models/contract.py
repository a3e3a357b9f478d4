"""The contract of a user's own model, named `path/to/file.py:build` or `pkg.mod:build`.

``build()`` takes no arguments and returns ``(body, head)``: `body` an `nn.Module` mapping
(batch, context) int64 token ids to (batch, context, d_model) floating hidden states, the
final norm applied; `head` the output projection's weight, a floating (vocab, d_model)
tensor (the loss computes `h @ head.T`). A tied head is the embedding's own weight, a
parameter of the body: it is counted, moved and cast once. cebench calls `build()` under
`with torch.device(device)` (so that factories without an explicit device build there:
on `meta`, nothing is allocated), then casts the floating parameters to the step's dtype.

    def build():
        body = MyDecoder(vocab=32000, d_model=1024)
        return body, body.embed.weight

A build that cannot be imported, raises, returns something else, or whose body does not
map (1, 2) token ids to (1, 2, d_model) hidden states is refused with one line before
anything runs (`check`, on meta). Torch is imported only when a build is checked.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cebench.core.errors import UsageError, describe

if TYPE_CHECKING:
    import torch
    from torch import nn

PROBE = (1, 2)  # (batch, context) of the token ids a build's body is checked on


class BuildFn(Protocol):
    """A user's model: ``build() -> (body, head)`` as the module says."""

    def __call__(self) -> tuple[nn.Module, torch.Tensor]: ...


@dataclass(frozen=True)
class Built:
    """A model ready for a step: `body` maps (batch, context) int64 ids to (batch, context,
    d_model) hidden states; `head` is the output projection's weight, (vocab, d_model)."""

    body: nn.Module
    head: torch.Tensor

    @property
    def vocab(self) -> int:
        return self.head.shape[0]

    @property
    def d_model(self) -> int:
        return self.head.shape[1]

    @property
    def params(self) -> list[torch.Tensor]:
        """The body's parameters and the head, each tensor once (a tied head is the
        embedding's)."""
        return list({id(p): p for p in (*self.body.parameters(), self.head)}.values())

    @property
    def n_params(self) -> int:
        """Elements of `params`."""
        return sum(p.numel() for p in self.params)


def blocks(body: nn.Module) -> Iterator[nn.Module]:
    """A body's blocks, which FSDP shards and `--compile blocks` compiles one by one: each
    child of every `nn.ModuleList` in `body`."""
    from torch import nn

    for module in body.modules():
        if isinstance(module, nn.ModuleList):
            yield from module


def check(returned: object, where: str) -> Built:
    """`returned`, what a `build()` returned, as a `Built` once it keeps the contract: its
    body is run on PROBE zero token ids (no grad) on the head's device. `UsageError`
    (param 'model', prefixed by `where`) otherwise."""
    import torch
    from torch import nn

    if not (isinstance(returned, tuple) and len(returned) == 2):
        raise UsageError(f"{where}: build() returned {_what(returned)}; it returns (body, head weight)", "model")
    body, head = returned
    if not isinstance(body, nn.Module):
        raise UsageError(f"{where}: build()'s body is {_what(body)}; it is an nn.Module", "model")
    if not (isinstance(head, torch.Tensor) and head.dim() == 2 and head.is_floating_point()):
        raise UsageError(f"{where}: build()'s head weight is {_what(head)}; it is a floating (vocab, d_model) tensor",
                         "model")
    ids = torch.zeros(PROBE, dtype=torch.int64, device=head.device)
    try:
        with torch.no_grad():
            h = body(ids)
    except Exception as exc:  # a broken user model: one line, before anything runs
        raise UsageError(f"{where}: the body raised {describe(exc, 200)} on {PROBE} token ids", "model") from None
    want = (*PROBE, head.shape[1])
    if not (isinstance(h, torch.Tensor) and tuple(h.shape) == want and h.is_floating_point()):
        raise UsageError(f"{where}: the body returned {_what(h)} for {PROBE} token ids; it returns floating hidden "
                         f"states of shape {want} (d_model {head.shape[1]}, from the head weight)", "model")
    return Built(body, head)


def _what(obj: object) -> str:
    """'Tensor of shape (2, 3) and dtype torch.float32', or the type's name."""
    shape = getattr(obj, "shape", None)
    if shape is None or not hasattr(obj, "dtype"):
        return type(obj).__name__
    return f"{type(obj).__name__} of shape {tuple(shape)} and dtype {obj.dtype}"
