"""A loss inside its model's training step: token ids → body → hidden states h → the loss
variant on (h flattened, the head weight, targets) → `backward` → `optimizer.step()` →
gradients set to None (`zero_grad(set_to_none=True)`), as a user's loop runs it.

The optimizer is torch.optim's own with its default settings (`adamw-fused`: `fused=True`;
`adamw-in-backward`: that, stepped for each parameter inside the backward, `InBackward`);
its state exists from the first (warm-up) step on, so a measured step is a steady-state one.
The body's step (`body_config`) is the same step with the hidden variant `(body)` as its
loss (`cebench.losses.builtin.stand_in`): no vocabulary-sized work, its peak
`body_peak_bytes`, so that the difference is what the loss costs inside the model.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from cebench.core import devices
from cebench.core.axes import BY_NAME, MODEL_AXES, SEMANTICS, Checkpointing, Compile, Optimizer, YesNo
from cebench.core.config import Config
from cebench.core.errors import UsageError
from cebench.core.memory import storage_bytes
from cebench.losses import variants, vocab_shards
from cebench.losses.inputs import SEED, labels
from cebench.losses.workloads import Step, not_finite
from cebench.models import fsdp, tensor_parallel
from cebench.models import model as model_mod
from cebench.models.contract import Built, blocks
from cebench.models.model import Model
from cebench.shims.optim import any_device
from cebench.shims.torch_names import dynamo_reset, foreach_devices

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass
class Training:
    """A model's training state: its body and head (`built`), `optimizer` (None: none), the
    (batch, context) int64 token `ids`, the (N,) `targets` and, with reduction none, the
    `upstream` gradient of the per-row losses."""

    built: Built
    optimizer: torch.optim.Optimizer | None
    ids: torch.Tensor
    targets: torch.Tensor
    upstream: torch.Tensor | None

    @property
    def params(self) -> list[torch.Tensor]:
        """The body's parameters and the head weight, each once."""
        return self.built.params

    def state(self) -> list[torch.Tensor]:
        """The optimizer's state tensors (AdamW: exp_avg, exp_avg_sq and a step count each)."""
        return optimizer_state(self.optimizer)

    @property
    def sharded(self) -> bool:
        """Whether the model's step is sharded with FSDP (`fsdp.shard`)."""
        return isinstance(self.built.body, fsdp.Root)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors a step starts with: parameters, buffers, optimizer state, ids,
        targets, upstream gradient (a sharded one: what this rank holds of it)."""
        extra = (self.upstream,) if self.upstream is not None else ()
        return tuple(fsdp.local(t) for t in (*self.params, *self.built.body.buffers(), *self.state(), self.ids,
                                             self.targets, *extra))

    def state_bytes(self, block: Callable[[int], int], on: Callable[[torch.Tensor], bool]) -> int:
        """Bytes of parameters + their gradients + optimizer state, each storage charged
        `block(nbytes)`, counting the tensors `on` the device's memory (AdamW keeps its step
        counts on the host)."""
        kept = not isinstance(self.optimizer, InBackward)  # else each gradient is freed by its own step
        grads = sum(block(fsdp.local(p).untyped_storage().nbytes()) for p in self.params if p.requires_grad and kept)
        held = [t for t in map(fsdp.local, (*self.params, *self.state())) if on(t)]
        return storage_bytes(held, block) + grads

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


def optimizer_state(optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """`optimizer`'s state tensors (none for None)."""
    if optimizer is None:
        return []
    return [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]


def body_config(config: Config) -> Config:
    """The point of `config`'s body step: the stand-in loss (the hidden variant
    `variants.BODY`, no ce_chunk), every loss semantics off but the padding (the targets are
    the same)."""
    off: dict[str, Any] = {a.name: a.off for a in SEMANTICS if a.name != "ignore_frac"}  # Config keywords
    return replace(config, variant=variants.BODY, ce_chunk=None, **off)


def loss_alone(config: Config) -> Config:
    """`config` without its model: the loss alone at the model's vocab and d_model."""
    off: dict[str, Any] = {name: BY_NAME[name].off for name in MODEL_AXES}  # Config keywords
    return replace(config, **off)


def make(config: Config, device: str | torch.device | None = None,
         model: tuple[Built, torch.optim.Optimizer | None] | None = None, mesh: DeviceMesh | None = None) -> Training:
    """The training state of `config` (its `model`, `optimizer`, `activation_checkpointing`,
    dtype and shape) on `device` (default the config's; `meta` stands in for the config's
    device), parameters drawn with a fixed seed; `model`: its body, head and optimizer as
    `make_model` made them (for the same model, dtype, optimizer and checkpointing), which a
    step of any shape can share; else made here, sharded over `mesh` when given."""
    device = torch.device(device if device is not None else config.device.name)
    built, optimizer = model or make_model(model_mod.of(config), device, config.torch_dtype, config.optimizer,
                                           config.activation_checkpointing, config.device, mesh,
                                           compiled=config.compile == Compile.BLOCKS)
    meta = devices.is_meta(device)
    gen = torch.Generator(device="cpu" if meta else device).manual_seed(SEED)
    shape = (config.batch, config.context)
    ids = (torch.empty(shape, dtype=torch.long, device=device) if meta
           else torch.randint(0, built.vocab, shape, generator=gen, device=device))
    return Training(built, optimizer, ids, *labels(config, device, gen))


def make_model(model: Model, device: torch.device, dtype: torch.dtype, optimizer_name: Optimizer,
               checkpointing: Checkpointing, target: devices.Device, mesh: DeviceMesh | None = None,
               stand_in: bool = False, compiled: bool = False) -> tuple[Built, torch.optim.Optimizer | None]:
    """`model` built on `device` in `dtype` (parameters drawn with a fixed seed), its blocks
    checkpointed as `checkpointing` says, in the world of `mesh` when given: split over its
    TP dimension (`tensor_parallel.split`), sharded with FSDP over the other (`fsdp.shard`),
    and its optimizer `optimizer_name` over its (sharded) parameters;
    `compiled`: each block compiled in place (`nn.Module.compile()`, Dynamo's caches
    emptied first, so that the first step compiles), on a real device only (a step on meta
    runs each as inductor's code runs it: `cebench.engine.trace`). On
    `meta`, or with `stand_in` (fake tensors), it stands in for `target` (a kind of device,
    or a named GPU target): its attention kernel (by the target's compute capability) and
    optimizer implementation (torch's for-each kernels where that kind of device has them)
    are the target's; on `meta` the optimizer has the state one step gives it."""
    meta = devices.is_meta(device)
    stand_in = stand_in or meta
    torch.manual_seed(SEED)
    blocks = checkpointing == Checkpointing.BLOCKS
    built = model.build(device, dtype, checkpointing=blocks, attention=target if stand_in else None)
    if mesh is not None:
        sharded, split = tensor_parallel.parts(mesh)
        if split is not None:
            built = tensor_parallel.split(built, split)
        built = fsdp.shard(built, sharded) if sharded is not None else fsdp.root(built)
    if compiled:
        compile_blocks(built.body, model.name, real=not stand_in)
    params = built.params
    optimizer = _optimizer(optimizer_name, params, target.kind if stand_in else None)
    if meta and optimizer is not None:  # its state, as after a first step (nothing is computed on meta)
        for p in params:
            p.grad = torch.empty_like(p)
        optimizer.step()
        for p in params:
            p.grad = None
    return built, optimizer


def compile_blocks(body: torch.nn.Module, name: str, real: bool = True) -> list[torch.nn.Module]:
    """`body`'s blocks (`contract.blocks`), each compiled in place when `real`. `UsageError`
    when it has none."""
    found = list(blocks(body))
    if not found:
        raise UsageError(f"{name}: --compile blocks compiles each child of an nn.ModuleList in the body; it has none",
                         "compile")
    if real:
        dynamo_reset()
        for block in found:
            block.compile()
    return found


def _optimizer(name: Optimizer, params: list[torch.Tensor], kind: str | None) -> torch.optim.Optimizer | None:
    """torch.optim's `name` (SGD, AdamW; NONE: None) over `params` with its defaults;
    `kind`: choose its for-each implementation as torch does on that kind of device (None:
    torch chooses for the parameters' own device)."""
    if name == Optimizer.NONE:
        return None
    trained = [p for p in params if p.requires_grad]
    if name == Optimizer.ADAMW_FUSED:
        return _FusedAdamW(trained, fused=True)
    if name == Optimizer.ADAMW_IN_BACKWARD:
        return InBackward(trained, fused=True)
    foreach = None if kind is None else kind in foreach_devices()
    cls = {Optimizer.SGD: torch.optim.SGD, Optimizer.ADAMW: torch.optim.AdamW}[name]
    return cls(trained, foreach=foreach)


class _FusedAdamW(torch.optim.AdamW):
    """`torch.optim.AdamW(fused=True)`, whose parameters may also be on `meta` standing in for
    a device: torch refuses meta by its name, though its fused kernel has a meta implementation
    (in place, as on the devices, its step counts on the parameters' device)."""

    def __init__(self, params: list[torch.Tensor], **kwargs: Any) -> None:
        with any_device():
            super().__init__(params, **kwargs)

    def step(self, closure: Any = None) -> Any:
        with any_device():
            return super().step(closure)


class InBackward(_FusedAdamW):
    """Fused AdamW stepped for each parameter as soon as its gradient is accumulated (a
    post-accumulate-grad hook), the gradient then freed, as torchtune's `optimizer_in_bwd`
    does: no parameter holds a gradient past its own step. A step steps the parameters that
    hold a gradient, which inside the hook is that parameter alone, and after a backward none
    (`step()` then does nothing; a first step on meta sets every state up)."""

    def __init__(self, params: list[torch.Tensor], **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        for p in params:
            p.register_post_accumulate_grad_hook(self._stepped)

    def _stepped(self, param: torch.Tensor) -> None:
        self.step()
        param.grad = None


def unsharded_only(config: Config) -> str | None:
    """Why `config`'s step cannot be sharded or split as it asks (None: it can), measured or
    predicted: --tp splits what `tensor_parallel.unsupported_reason` allows, a compiled loss
    runs on an unsplit head only; an optimizer stepped in backward steps each parameter from
    the hook of its gradient's accumulation, which FSDP, setting the sharded gradients itself,
    never runs; compiled blocks are compiled in an unsharded model only."""
    if not config.world.sharded:
        return None
    if config.tp > 1:
        if reason := config.world.beyond:
            return reason
        if reason := tensor_parallel.unsupported_reason(model_mod.of(config), config.tp):
            return reason
        if config.context % config.tp:
            return (f"--tp {config.tp} splits the sequence between the layers (sequence parallelism, as torchtitan): "
                    f"context {config.context} is not a multiple of it")
        if variants.of(config).compiles:
            return f"{config.variant.name} runs on an unsplit head only (--tp 1): cebench compiles no loss on DTensors"
        if config.compile == Compile.BLOCKS:
            return "compiled blocks run unsplit and unsharded only (--fsdp 1 --tp 1)"
        if config.optimizer == Optimizer.ADAMW_IN_BACKWARD:
            return f"{Optimizer.ADAMW_IN_BACKWARD.value} runs unsplit and unsharded only (--fsdp 1 --tp 1)"
    if config.optimizer == Optimizer.ADAMW_IN_BACKWARD:
        return (f"{Optimizer.ADAMW_IN_BACKWARD.value} runs unsharded only (--fsdp 1): FSDP sets the sharded "
                "gradients itself, past the hooks that step it")
    if config.compile == Compile.BLOCKS:
        return "compiled blocks run unsharded only (--fsdp 1): cebench compiles the blocks of an unsharded model"
    return None


def make_step(fn: Callable[..., torch.Tensor], training: Training, config: Config) -> Step:
    """The training step of `config` with `fn` as its loss (called as a loss variant is,
    with the point's semantics); `check` also says when its loss is not finite."""
    body, head = training.built.body, training.built.head
    features, retain = config.features, config.retain_graph == YesNo.YES
    optimizer = training.optimizer

    if config.tp > 1:  # the head weight is split over the vocabulary
        fn = variants.of(config).on_shards(fn)

    def loss(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return fn(h, weight, training.targets, config.ce_chunk, **features)

    def forward() -> torch.Tensor:
        if training.sharded:  # the loss runs inside the root's forward, on the head FSDP gathered
            return vocab_shards.plain(body(training.ids, loss))
        h = body(training.ids)
        return loss(h.reshape(-1, h.shape[-1]), head)

    def finish(loss: torch.Tensor) -> None:
        loss.backward(training.upstream, retain_graph=retain)
        if optimizer is not None:
            optimizer.step()
        training.zero_grad()

    def run() -> None:
        with _split_loss(config):
            finish(forward())

    def check() -> str:
        with _split_loss(config):
            loss = forward()
            problem = not_finite(loss)
            finish(loss)
        return problem

    return Step(lambda: None, run, check)


def _split_loss(config: Config) -> contextlib.AbstractContextManager[None]:
    """torch's `loss_parallel()` around a step whose head --tp splits (what `dense` on the
    shards runs under, forward and backward); else nothing."""
    if config.tp == 1:
        return contextlib.nullcontext()
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()
