"""Whether a point can run: the one answer to "can this point run here?", for a point measured
on its device here (`cebench sweep`, `explain`, `verify`) and for one predicted for its target
on meta tensors (`predict`, `fit`, `explain --meta`); every command asks here, and the row of
a point that cannot run is `unsupported` with the reason in one line.

Each check stays where its knowledge lives and is asked only through here, in this order:

- the model's step: settings that exclude each other (`training.unsharded_only`: an optimizer
  stepped in backward, compiled blocks, in a sharded step);
- the variant: what it needs of the device and of this machine (`Variant.unsupported_reason`;
  predicted: its eager twin's, for the target's kind of device, as compiled code is run as
  inductor's code runs, never built), then the loss semantics it takes (`Variant.lacks`);
- a sharded step on a torch whose FSDP2 cebench does not follow (`shims.fsdp.SINCE`);
- measured only: a sharded step's ranks, one process each, on more GPUs or CPU cores than
  this machine has (`Device.ranks_reason`: one each);
- predicted only: what a step on meta cannot follow (compiled code, `compiled.unsupported_reason`;
  a sharded step's collectives on a torch without their meta kernels).

Imports torch only when a point is asked about (the command line parses without it).
"""
from __future__ import annotations

from cebench.core import devices
from cebench.core.config import Compile, Config
from cebench.core.version import torch_release
from cebench.losses import variants
from cebench.shims import fsdp


def variant_reason(name: str, device: devices.Device, *, predicted: bool = False,
                   imported: bool = False) -> str | None:
    """Why variant `name` cannot run on `device` here at all (None: it can): measured there, or
    (`predicted`) predicted for it, where a compiling variant needs what its eager twin needs;
    `imported`: its packages imported to tell (a broken install found), not only found."""
    own = variants.eager_twin(name) if predicted else name
    return variants.get(own).unsupported_reason(device.kind, imported)


def reason(config: Config, *, predicted: bool = False) -> str | None:
    """Why `config` cannot run (None: it can): measured on its device here, or (`predicted`)
    predicted on meta tensors for its target; one line, the first check that refuses it (see
    the module's docstring)."""
    from cebench.models import training

    return (training.unsharded_only(config)
            or _unfollowed_fsdp(config)
            or variant_reason(config.variant, devices.get(config.device), predicted=predicted)
            or variants.get(config.variant).lacks(config)
            or (_unpredictable(config) if predicted else _ranks_here(config)))


def _ranks_here(config: Config) -> str | None:
    """Why `config`'s ranks cannot run on this machine, one each on a GPU or a CPU core of
    its device (None: they can, or it is not sharded)."""
    return devices.get(config.device).ranks_reason(config.world.size) if config.world.sharded else None


def _unfollowed_fsdp(config: Config) -> str | None:
    """Why `config`'s sharded or split step cannot be run here (None: it can, or is neither):
    this torch's FSDP2 and DTensor are older than those whose storage helpers and collectives
    cebench follows."""
    release = torch_release()
    if not config.world.sharded or release is None or release >= fsdp.SINCE:
        return None
    since = f"torch {fsdp.SINCE[0]}.{fsdp.SINCE[1]} or newer: torch {release[0]}.{release[1]}'s"
    if config.tp > 1:
        return f"--tp needs {since} DTensor and FSDP2 run other collectives than those cebench follows and settles"
    return f"--fsdp needs {since} FSDP2 calls other collectives than those cebench follows and settles"


def _unpredictable(config: Config) -> str | None:
    """Why a step on meta cannot follow `config`'s (None: it can): its compiled blocks or
    compiled loss for its target, or its collectives, sharded, on a torch without meta
    kernels for them."""
    from cebench.engine import compiled
    from cebench.shims.torch_names import RELEASE, fake_collectives

    target = devices.get(config.device)
    reason = compiled.unsupported_reason(target) if config.compile == Compile.BLOCKS else None
    if not reason and variants.get(config.variant).compiles:
        reason = compiled.unsupported_reason(target, config.world.sharded, config.chunks)
    if not reason and config.world.sharded and not fake_collectives():
        reason = (f"torch {RELEASE}'s collectives have no meta kernels, so a sharded step cannot be followed in a "
                  "fake world: --fsdp is predicted with torch 2.9 or newer; measure it with cebench sweep")
    return reason
