"""Option definitions shared by the commands: the axes' options derived from
`cebench.core.axes.AXES` (`with_axes`), and the other shared options. Help texts only:
nothing here parses, and nothing imports torch."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import typer

from cebench.cli.app import LOSS_VARIANTS, VARIANTS
from cebench.core import devices
from cebench.core.axes import AXES, STEP_SETTINGS
from cebench.core.targets import NAMES as TARGET_NAMES
from cebench.core.units import parse_unit
from cebench.core.world import NAMES as DEGREES
from cebench.core.world import REMAINDER

LIST = "LIST"
GPUS_HELP = ("GPUs (ranks) of a world, comma-separated: the model split --tp ways and sharded with FSDP over the "
             "rest (fsdp = gpus / tp, for each --tp), instead of --fsdp; with --model. Default: none (--fsdp × --tp).")
GPUS_ONE = ("GPUs (ranks) of the world: the model split --tp ways, FSDP over the rest (fsdp = gpus / tp), instead "
            "of --fsdp; with --model.")
ONE_POINT = tuple(a.name for a in AXES if not a.chunked_only)  # the axes of a command that looks at one point
FIT_POINT = tuple(n for n in ONE_POINT if n not in STEP_SETTINGS)  # fit: one shape, any number of step settings
F = TypeVar("F", bound=Callable[..., Any])


def per_device(attribute: str) -> str:
    """'cpu 4; cuda 20': a device setting's default on each kind of device, for --help."""
    return "; ".join(f"{d} {getattr(d, attribute)}" for d in devices.KINDS)


def with_axes(*, skip: tuple[str, ...] = (), single: tuple[str, ...] = (),
              defaults: Mapping[str, str] | None = None, after: str = "ctx") -> Callable[[F], F]:
    """Give a command one option per axis of `AXES` (but those in `skip`), in their order,
    after its `after` parameter (default `ctx`, else first): `--batch LIST` and so on, None when not given (the device's
    default), with the help and defaults the axis declares, and `--gpus` after the world's axes
    (`GridOptions`' gpus). Axes in `single` take one value (metavar VALUE, the axis's singular
    help; --gpus too where fsdp does); `defaults` replaces an axis's default text in the help.
    The command reads them from `ctx.params` (see `GridOptions.from_params`)."""
    defaults = defaults or {}

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn, eval_str=True)
        params = list(signature.parameters.values())
        axes = []
        for axis in AXES:
            if axis.name in skip:
                continue
            one = axis.name in single
            if axis.switch:  # a flag: absent is the axis's off value
                option = typer.Option(axis.flag, help=axis.one, show_default=False)
                axes.append(inspect.Parameter(axis.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                              annotation=Annotated[bool | None, option]))
                continue
            model = f" {axis.model_help}" if axis.model_help and not one and "model" not in skip else ""
            text = f"{axis.one if one else axis.help}{model} {defaults.get(axis.name, axis.defaults_help())}"
            option = typer.Option(axis.flag, metavar="VALUE" if one else axis.metavar, help=text,
                                  show_default=False)
            axes.append(inspect.Parameter(axis.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                          annotation=Annotated[str | None, option]))
            if axis.name == DEGREES[-1] and REMAINDER not in skip:  # --gpus: the world's size, beside its degrees
                gpus = typer.Option("--gpus", metavar="VALUE" if REMAINDER in single else LIST, show_default=False,
                                    help=GPUS_ONE if REMAINDER in single else GPUS_HELP)
                axes.append(inspect.Parameter("gpus", inspect.Parameter.KEYWORD_ONLY, default=None,
                                              annotation=Annotated[str | None, gpus]))
        names = [p.name for p in params]
        at = names.index(after) + 1 if after in names else 0
        params = params[:at] + axes + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params[at:]]

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            for axis in axes:
                kwargs.pop(axis.name, None)  # read through ctx.params
            return fn(*args, **kwargs)

        del command.__wrapped__
        command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return decorate


VariantNames = Annotated[str | None, typer.Option(
    metavar=LIST, help=f"Variants, comma-separated, from: {VARIANTS}. Default: every variant of the workload(s).")]
LossVariantNames = Annotated[str | None, typer.Option(
    "--variant", metavar=LIST, help=f"Loss variants, comma-separated, from: {LOSS_VARIANTS}. Default: every eager "
                                    "one.")]
Workload = Annotated[str | None, typer.Option(
    metavar=LIST, help="Workloads, comma-separated: loss (forward + backward of the loss), sample (one no-grad "
                       "sampling call), logits (the loss of given N × vocab logits + backward, no projection: dense, "
                       "dense-compiled, liger-kernel). Default: loss.")]
TEMPERATURE = 0.9  # the commands' default --temperature
Temperature = Annotated[float, typer.Option(
    show_default=False, help=f"Sampling temperature of the sample workload (> 0). Default: {TEMPERATURE:g}.")]
Wide = Annotated[bool, typer.Option("--wide", help="Show every column, however wide the terminal.")]
PointTimeout = Annotated[float | None, typer.Option(
    "--point-timeout", metavar="SECONDS", show_default=False,
    help="A user's loss or model build still running after this long in one point is stopped: one line, exit 2. "
         "Default: no limit.")]
MemoryUnit = Annotated[str | None, typer.Option(
    "--unit", metavar="UNIT", show_default=False,
    callback=lambda value: parse_unit(value),  # parsed once for every command: its spelling, or None for auto
    help="Print memory in this unit: B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (of 1024); auto: each "
         "number in the binary unit that reads best. Default: auto.")]
COLUMNS_HELP = ("Show these columns besides the ones always shown, comma-separated by key (the footer of a narrow "
                "table names the keys it left out).")
Columns = Annotated[str | None, typer.Option(metavar=LIST, help=COLUMNS_HELP)]



# One vocabulary for devices: --device wherever something runs (sweep, variants, explain, fit
# --measure), --target only for predictions (predict, fit); each command takes the other's
# spelling too (a hidden alias), so `explain --target cpu` and `predict --device cuda` work.
TARGETS_TEXT = ", ".join(TARGET_NAMES)
DEVICE_HELP = "Device to run on: auto (cuda when a GPU is visible), cpu or cuda. Default: auto."
TARGET_HELP = (f"What the prediction is for: cuda (any NVIDIA GPU: the caching allocator's blocks), cpu (exact "
               f"bytes), or a named GPU ({TARGETS_TEXT}; see cebench targets), which adds its cuBLAS workspaces and "
               "a roofline time. Sets the defaults too. Default: cuda.")
DeviceAlias = Annotated[str | None, typer.Option("--target", metavar="DEVICE", hidden=True, show_default=False,
                                                 help="Another name for --device.")]
TargetAlias = Annotated[str | None, typer.Option("--device", metavar="TARGET", hidden=True, show_default=False,
                                                 help="Another name for --target.")]

