"""`cebench explain` as a library call: each point's allocations at its peak
(`cebench.analyze.explain`), or a model's training step part by part
(`cebench.analyze.anatomy`). Nothing here imports torch until a function runs."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cebench.commands import arguments
from cebench.commands.predict import one_value, warn_user_code, warn_worlds
from cebench.core import devices
from cebench.core.axes import BY_NAME, NO_MODEL
from cebench.core.config import LOSS, Config
from cebench.core.errors import UsageError, describe
from cebench.core.guard import time_limit, user_code
from cebench.losses import variants
from cebench.run.grid import GridOptions

if TYPE_CHECKING:
    from cebench.analyze.anatomy import Anatomy
    from cebench.analyze.explain import Explanation


@dataclass(frozen=True)
class Explained:
    """`explain`'s answer: one `Explanation` per variant and ce_chunk (with a model: one
    `Anatomy` of its training step each, in `anatomies`), the points that could not be
    explained (label → why), and whether they were traced on meta tensors."""

    explanations: list[Explanation]
    not_explained: Mapping[str, str]
    meta: bool
    anatomies: list[Anatomy] = field(default_factory=list)


EXPLAIN_VARIANTS = "dense,chunked"


def explain(*, device: str | None = None, meta: bool = False, target: str | None = None,
            point_timeout: float | None = None, **grid: Any) -> Explained:
    """What one loss step of each point holds at its peak, allocation by allocation: on
    `device` ('auto', 'cpu', 'cuda'; default auto) from the allocator's events, or on meta
    tensors (`meta`, and always for cuda without a GPU here and for a named GPU target).
    `target` is another name for `device`. One value of each axis but ce_chunk; batch
    defaults to the largest of the device's sweep defaults, variant to dense,chunked. With a
    `model`: what its training step holds at its peak, part by part (parameters, optimizer
    state, gradients, activations, the loss's buffers), traced on meta for the device. A
    user's loss or build still running after `point_timeout` seconds is stopped (`UsageError`;
    None: no limit)."""
    seconds = arguments.seconds(point_timeout)
    with time_limit(seconds):
        warn_user_code(GridOptions(**grid), seconds, "explain")
        return _explain(None if device is None else arguments.name(device, "device"), meta,
                        None if target is None else arguments.name(target, "target"), grid)


def _explain(device: str | None, meta: bool, target: str | None, grid: dict[str, Any]) -> Explained:
    if device is not None and target is not None:
        raise UsageError("give the device once (--device; --target is another name for it)", "target")
    param = "target" if target is not None else "device"
    name = device or target or "auto"
    if name.strip().lower() != "auto":  # checked before the grid; 'auto' resolved after it (torch looks for a GPU)
        devices.target(name, auto=True, param=param)
    options = GridOptions(**{**grid, "variant": grid.get("variant") or EXPLAIN_VARIANTS, "workload": LOSS})
    checked = options.given(batch=options.axes.get("batch") or "1")
    one_value(checked, devices.HOST.kind, "explain")  # before any model is resolved
    checked.grid(devices.HOST)  # every other option too, before 'auto' imports torch to look for a GPU
    here = devices.target(name, auto=True, param=param)
    meta = meta or here.is_target or not here.available()
    if options.axes.get("batch") is None:
        options = options.given(batch=str(max(BY_NAME["batch"].default(here.kind))))
    points = options.grid(here)
    if points.model[0] != NO_MODEL:
        return _anatomies(points, options)

    from cebench.analyze.explain import Unexplainable
    from cebench.analyze.explain import explain as explain_point

    variants.smoke_test(points.variants, devices.HOST if meta else here)
    done, skipped = [], {}
    for point in points.expand():
        try:
            with user_code(point.variant.name, "variant"):  # measured: its step runs here
                done.append(explain_point(point, meta))
        except Unexplainable as exc:
            skipped[_label(point)] = str(exc)
    return Explained(done, skipped, meta)


def _label(point: Config) -> str:
    """'chunked ce_chunk=256': a point as the answer names one it could not explain."""
    return point.variant.name if point.ce_chunk is None else f"{point.variant.name} ce_chunk={point.ce_chunk}"


def _anatomies(points: Any, options: GridOptions) -> Explained:
    """`explain` of a model's training step: each point's `Anatomy`, on meta (its world
    announced as `options` asked for it, where it is large: `warn_worlds`)."""
    from cebench.analyze.anatomy import anatomy
    from cebench.engine import support
    from cebench.engine.fake_world import session

    variants.smoke_test(points.variants, devices.HOST)
    expanded = points.expand()
    warn_worlds(expanded, options, "explain")
    done, skipped = [], {}
    with session():  # the points' sharded steps share their fake world and models
        for point in expanded:
            # what cannot be predicted (its step's settings, or its loss alone) cannot be taken apart
            why = support.reason(point, predicted=True)
            if why is None:
                try:
                    done.append(anatomy(point))
                except Exception as exc:  # a model's body that cannot be traced on meta (a custom op, say)
                    why = describe(exc)
            if why is not None:
                skipped[_label(point)] = why
    return Explained([], skipped, True, done)
