"""A model's step sharded with FSDP2, as torchtitan and torchtune wrap a decoder:
`fully_shard` on each block (every child of an `nn.ModuleList` in the body), then on a root
that holds the body and the head weight and runs the loss inside its own forward, so that
the head weight is gathered only while the step needs it. The optimizer is then made over
the root's (sharded) parameters.

The process group is the caller's: real ranks when measured (`cebench.run.ranks`), a fake
group in one process when predicted (`cebench.engine.fake_world`). A sharded parameter is a
`DTensor`; what a rank holds of it is its local tensor (`local`).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from cebench.models.contract import Built, blocks

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (h flattened, head weight) → loss


class Root(nn.Module):
    """The root FSDP unit: the body, and the head weight as a parameter of the body (tied)
    or of its own. `forward(ids, loss)` returns `loss(h flattened, head)`: the head is read
    when the forward runs, when FSDP has gathered it."""

    def __init__(self, built: Built) -> None:
        super().__init__()
        self.body = built.body
        tied = next((name for name, p in built.body.named_parameters() if p is built.head), None)
        if tied is None:
            self.lm_head = built.head if isinstance(built.head, nn.Parameter) else nn.Parameter(built.head)
            self._head = "lm_head"
        else:
            self._head = f"body.{tied}"

    @property
    def head(self) -> torch.Tensor:
        return self.get_parameter(self._head)

    def forward(self, ids: torch.Tensor, loss: Loss) -> torch.Tensor:
        h = self.body(ids)
        return loss(h.reshape(-1, h.shape[-1]), self.head)


def root(built: Built) -> Built:
    """`built` as the `Root` of a step that FSDP does not shard (one split by --tp alone)."""
    body = Root(built)
    return Built(body, body.head)


def shard(built: Built, mesh: DeviceMesh) -> Built:
    """`built` under FSDP2 over `mesh`: each block, then the `Root` (default settings:
    blocks reshard after forward, the root does not; one block prefetched). Its body is the
    root, its head the root's sharded head parameter."""
    from torch.distributed.fsdp import fully_shard

    root = Root(built)
    for block in blocks(root.body):
        fully_shard(block, mesh=mesh)
    fully_shard(root, mesh=mesh)
    return Built(root, root.head)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """What this rank holds of `tensor`: a DTensor's local shard, any other tensor itself."""
    return getattr(tensor, "_local_tensor", tensor)


def settle(root: nn.Module, ids: torch.Tensor, optimizer: torch.optim.Optimizer | None) -> None:
    """Bring a sharded model (its `Root`) to where its first step leaves it, for less than a step:
    FSDP's lazy setup (a forward without gradients, then every unit resharded) and the
    optimizer's state (a step on zero gradients, then the gradients set to None)."""
    from torch.distributed.fsdp import FSDPModule

    with torch.no_grad():
        root(ids, lambda h, head: h.sum())
    for module in root.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
    if optimizer is None:
        return
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for p in params:
        p.grad = None
