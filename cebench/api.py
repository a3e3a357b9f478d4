"""cebench's Python API: what each command computes, as functions that return values.

The command line parses its options into these calls and renders what they return. Each
lives in its role's module and is re-exported here: `sweep` and `Sweep` from
`cebench.commands.sweep`; `predict`, `fit` and `Fitted` from `cebench.commands.predict`;
`explain` and `Explained` from `cebench.commands.explain`; `verify` and `Verified` from
`cebench.commands.verify`; `check` and `load` from `cebench.commands.check`. None of them
imports torch until it runs.

Every function takes the grid as keyword arguments named after the axes (`batch`, `context`,
`vocab`, `d_model`, `ce_chunk`, `dtype`, and the loss semantics `ignore_frac`, `softcap`,
`label_smoothing`, `z_loss`, `reduction`, and a model's step: `model`, `optimizer`,
`activation_checkpointing`: an int, a float, a string such as "2,8", or a sequence; missing
= the device's default) plus `variant`, `workload` and `gpus` (world sizes: each `tp`
given splits one, FSDP shards the rest, fsdp = gpus / tp; instead of `fsdp`). Bad input, a
value of the wrong type too, raises `UsageError`, whose `param` names the argument at fault
(`cebench.commands.arguments`).

    import cebench

    rows = cebench.sweep(variant="dense,chunked", batch=8, vocab=50257, device="cpu", out="peak.csv")
    assert rows[1].peak_delta_bytes <= 200 * 2**20
    (chunked,) = cebench.predict(variant="chunked", batch=64, ce_chunk=2048, d_model=2048, target="cuda")
"""
from __future__ import annotations

from typing import Any

from cebench.commands.check import check, load
from cebench.commands.explain import Explained, explain
from cebench.commands.predict import Fitted, fit, predict
from cebench.commands.sweep import Sweep, sweep
from cebench.commands.verify import Verified, verify
from cebench.core.errors import UsageError
from cebench.run.grid import GridOptions

__all__ = ["Explained", "Fitted", "GridOptions", "Sweep", "UsageError", "Verified", "check", "explain", "fit",
           "load", "predict", "sweep", "targets", "verify"]


def targets() -> tuple[Any, ...]:
    """The named GPU targets (`cebench.core.targets.Target`: memory, cuBLAS workspace, BF16
    rate and their sources), as `cebench targets` lists them."""
    from cebench.core.targets import TARGETS

    return TARGETS
