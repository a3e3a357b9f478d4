"""A model's step split with tensor parallelism (`--tp`) over one dimension of a device mesh,
as torchtitan splits a Llama (its `apply_tp`, with sequence parallelism, the plan it always
uses with TP), mapped onto cebench's decoder:

- the embedding row-wise over the vocabulary, its output sequence-sharded (Shard(1));
- each norm (the blocks' and the final one; Gemma 2's on each branch's output too) on
  sequence shards (`SequenceParallel`);
- attention's q, k, v and the MLP's gate and up column-wise, their inputs gathered whole
  first; attention's o and the MLP's down row-wise, their outputs reduce-scattered back to
  sequence shards; each rank's attention runs n_heads / tp query and n_kv_heads / tp
  key/value heads;
- the output head weight split over the vocabulary (Shard(0)): rank r holds rows
  [r·⌈V/tp⌉, (r+1)·⌈V/tp⌉), the last rank fewer where tp does not divide V; the final
  norm's output is gathered whole (Replicate) for the loss, as torchtitan's output
  projection's input is. A tied head is the embedding's weight, split the same way.

Every parameter is then a `DTensor` on the mesh dimension given. The loss is given the
hidden states (a Replicate DTensor) and that vocabulary-split head weight
(`cebench.losses.vocab_shards`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

from torch import nn

from cebench.models.contract import Built

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from cebench.core.world import World
    from cebench.models.decoder import Block, Decoder
    from cebench.models.model import Model


FSDP_DIM, TP_DIM = "fsdp", "tp"  # the degrees (`cebench.core.world`) whose mesh dimensions a step is split over


def world_mesh(kind: str, world: World) -> DeviceMesh:
    """The device mesh of `world` on device `kind`, its dimensions as `World.mesh` orders and
    names them (a rank's TP peers consecutive ranks: torchtitan's layout; FSDP alone: a 1-D
    mesh). Made before fake mode, where there is one: its setup reads real tensors."""
    from torch.distributed.device_mesh import init_device_mesh

    shape, names = world.mesh
    return init_device_mesh(kind, shape, mesh_dim_names=names)


def parts(mesh: DeviceMesh) -> tuple[DeviceMesh | None, DeviceMesh | None]:
    """(the mesh FSDP shards over, the mesh TP splits over) of a `world_mesh`; None where
    that dimension has one rank."""
    if TP_DIM not in (mesh.mesh_dim_names or ()):
        return mesh, None
    fsdp = mesh[FSDP_DIM]
    return (fsdp if fsdp.size() > 1 else None), mesh[TP_DIM]


def unsupported_reason(model: Model, tp: int) -> str | None:
    """Why `model`'s step cannot be split over `tp` ranks (None: it can): cebench splits its
    own decoder (a preset or a config.json), whose query heads, key/value heads and MLP width
    `tp` must divide, and whose positions are rotary (GPT-2's learned positions are not split)."""
    from cebench.models.model import DECODER, TRANSFORMERS

    if tp == 1:
        return None
    spec = model.spec
    if spec is None or model.implementation != DECODER:
        other = "a transformers model (hf:)" if model.implementation == TRANSFORMERS else "a user's build"
        return f"--tp splits cebench's decoder (a preset or a config.json), not {other} (--tp 1)"
    if spec.rope_theta is None:
        return f"--tp splits decoders with rotary positions; {spec.model_type}'s learned positions are not split"
    for what, size in (("query heads", spec.n_heads), ("key/value heads", spec.n_kv_heads), ("d_ff", spec.d_ff)):
        if size % tp:
            return f"--tp {tp} does not divide the model's {size} {what}"
    return None


def split(built: Built, mesh: DeviceMesh) -> Built:
    """`built` (cebench's `Decoder`) split over the 1-D `mesh` in place, as the module says;
    its head the vocabulary-split weight."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    body = cast("Decoder", built.body)
    tp = mesh.size()
    plan: dict[str, object] = {"embed": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
                               "norm": SequenceParallel()}
    for i, block in enumerate(cast("list[Block]", body.blocks)):
        at = f"blocks.{i}"
        plan[f"{at}.attn_norm"], plan[f"{at}.mlp_norm"] = SequenceParallel(), SequenceParallel()
        for norm in ("attn_out_norm", "mlp_out_norm"):  # Gemma 2's: their output joins the residual stream's shard
            if not isinstance(getattr(block, norm), nn.Identity):
                plan[f"{at}.{norm}"] = SequenceParallel(use_local_output=True)
        plan[f"{at}.attn"] = PrepareModuleInput(input_layouts=(Shard(1), None),
                                                desired_input_layouts=(Replicate(), None))
        plan[f"{at}.mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        for part, name in (("attn", "q"), ("attn", "k"), ("attn", "v"), ("mlp", "gate"), ("mlp", "up")):
            if getattr(getattr(block, part), name) is not None:  # GPT-2's MLP has no gate
                plan[f"{at}.{part}.{name}"] = ColwiseParallel()
        for name in ("attn.o", "mlp.down"):
            plan[f"{at}.{name}"] = RowwiseParallel(output_layouts=Shard(1))
        block.attn.n_heads //= tp
        block.attn.n_kv_heads //= tp
    parallelize_module(body, mesh, plan)  # type: ignore[arg-type]
    # The final norm's output, whole on every rank, as the loss's input (torchtitan's output projection gathers it).
    parallelize_module(body, mesh, PrepareModuleOutput(output_layouts=Shard(1), desired_output_layouts=Replicate(),
                                                       use_local_output=False))
    if body.lm_head is not None:
        body.lm_head = nn.Parameter(distribute_tensor(body.lm_head.data, mesh, [Shard(0)]))
    return Built(body, body.head)
