"""The results CSV's columns, declared once (a public interface).

`DECLARED` lists every column in CSV order with its kind, unit, meaning and the schema
version that added it; everything else is derived from it: the column names and their
types, the columns an older file lacks, `SCHEMA_VERSION`, the `Result` row type (written out
for type checkers in the generated block below: `make types`) and the
README's column table (`reference()`). An axis's column comes from its declaration
(`cebench.core.axes`): the axes of schemas 1–6 stand where files of those schemas have them,
and any axis declared since is appended after the last column. A new column is one more
`Column` at the end (with `added` one above today's `SCHEMA_VERSION`), then `python -m
cebench.store.schema --readme results/README.md` to regenerate the column reference there (a
test fails until it matches).

Nothing here imports torch or pandas: `Result.blank` imports torch when it is called.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cebench.core import generated
from cebench.core.axes import AXES
from cebench.core.axes import BY_NAME as AXES_BY_NAME
from cebench.core.errors import joined

if TYPE_CHECKING:
    from cebench.core.config import Config


class Status(str, Enum):
    """A row's `status`; the values are the CSV cells (a `Status` equals its string)."""

    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    TIMEOUT = "timeout"  # --point-timeout
    UNSUPPORTED = "unsupported"  # the variant cannot run here: never ran

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


STATUSES: tuple[Status, ...] = tuple(Status)
FAILED: tuple[Status, ...] = (Status.OOM, Status.ERROR, Status.TIMEOUT)  # ran and failed; `unsupported` never ran
DONE: tuple[Status, ...] = (Status.OK, Status.OOM)  # `sweep --resume` skips these (an oom would fail again)

Kind = Literal["int", "float", "text", "samples"]
# Where `Result.blank` takes a column's value: the `Config` (an attribute of that name), the
# run (device, environment, status, schema), or nowhere: a measurement, empty until taken.
Source = Literal["config", "run", "measured"]


@dataclass(frozen=True)
class Column:
    """One CSV column. `kind`: int (whole numbers), float, text, or samples (floats,
    space-separated in one cell); `unit` of its numbers ('' for none); `doc`: one line for
    the README; `added`: the schema version that added it (1: there from the start);
    `before`: the cell a row written before `added` reads as."""

    name: str
    kind: Kind
    unit: str
    doc: str
    added: int = 1
    source: Source = "measured"
    before: str = ""


def _axis(name: str) -> Column:
    """The column of an axis, as `cebench.core.axes` declares it; older files read as the
    axis's `off` value (what every row measured before it was)."""
    axis = AXES_BY_NAME[name]
    before = "" if axis.off is None else axis.text(axis.off)
    return Column(name, axis.kind, axis.unit, axis.doc, axis.added, "config", before)  # type: ignore[arg-type]


_PLACED: tuple[Column, ...] = (  # in the order of files written with schemas 1-6
    Column("variant", "text", "", "variant name (see Variants)", source="config"),
    Column("workload", "text", "", "`loss` (forward + backward)", source="config"),
    Column("device", "text", "", "`cpu` or `cuda`; predicted rows: the `--target` (a named GPU too)",
           source="config"),
    Column("device_name", "text", "", "CPU model or GPU name (`predicted for cuda` from `predict`)", source="run"),
    _axis("dtype"),
    _axis("batch"),
    _axis("context"),
    Column("tokens", "int", "tokens", "N = batch × context rows of hidden states", source="config"),
    _axis("vocab"),
    _axis("d_model"),
    _axis("ce_chunk"),
    Column("status", "text", "", "`ok`, `oom`, `error`, `timeout` (`--point-timeout`) or `unsupported`",
           source="run"),
    Column("error", "text", "", "why, for every non-ok row (exception type and first line)"),
    Column("peak_bytes", "int", "bytes", "highest bytes allocated during the step, inputs included"),
    Column("base_bytes", "int", "bytes", "bytes allocated when the step starts"),
    Column("peak_delta_bytes", "int", "bytes", "`peak_bytes` − `base_bytes`: what the step itself adds"),
    Column("mem_method", "text", "",
           "`cuda-max-memory-allocated`, `cpu-allocator-events`, or `predicted` (`cebench predict`)"),
    Column("time_ms_median", "float", "ms", "median step time"),
    Column("time_ms_p25", "float", "ms", "25th percentile step time"),
    Column("time_ms_p75", "float", "ms", "75th percentile step time"),
    Column("time_ms_min", "float", "ms", "fastest step"),
    Column("repeats", "int", "steps", "number of timed steps"),
    Column("time_ms_samples", "samples", "ms", "every timed step, space-separated in measurement order (so any "
           "statistic can be recomputed; `check --time-tol` tests them)", added=2),
    Column("tokens_per_s", "float", "tokens/s", "`tokens` / median step time, per GPU (÷ `tp`: a TP group's "
           "ranks share its step's tokens)"),
    Column("compile_s", "float", "s", "compiled variants: first call − median"),
    Column("flops", "int", "FLOP", "FLOPs of one step (2 per multiply-add) as `FlopCounterMode` counts them on "
           "`meta` tensors; compiled variants counted on their eager twin; empty where it cannot be trusted (a "
           "custom op without a Python kernel, a Triton kernel whose caller cebench does not follow) — see \"The "
           "limits\"", added=3),
    Column("tflops_per_s", "float", "10¹² FLOP/s", "`flops` / median step time", added=3),
    Column("matmul_floor_ms", "float", "ms", "the step's full-size matmuls alone (logits, ∇h, ∇weight; sample: "
           "logits), measured on the same device and dtype, median; empty where its buffers did not fit", added=3),
    Column("logits_fp32_bytes", "int", "bytes", "N × vocab × 4: the full fp32 logits, for scale", source="config"),
    Column("lower_bound_bytes", "int", "bytes", "bytes any exact implementation must allocate: gradients of `h` "
           "and `weight` in their dtype + the fp32 loss (a scalar; N rows with reduction `none`)", source="config"),
    Column("torch_version", "text", "", "`torch.__version__`", source="run"),
    Column("cebench_version", "text", "", "cebench's version", source="run"),
    Column("threads", "int", "threads", "`torch.get_num_threads()` during the run", source="run"),
    Column("timestamp", "text", "", "when the row was measured, UTC, ISO 8601", source="run"),
    Column("shard", "text", "", "`INDEX/COUNT` of the shard that measured the row; empty for an unsharded sweep",
           added=3),
    Column("schema_version", "int", "", "the CSV schema the row was written with (files without the column are "
           "version 1)", added=2, source="run", before="1"),
    _axis("ignore_frac"),
    _axis("softcap"),
    _axis("label_smoothing"),
    _axis("z_loss"),
    _axis("reduction"),
    Column("note", "text", "", "what the implementation said while it ran (its warnings: torch-lce's fallback to "
           "full logits, say) and whether its numbers are not a GPU's (Triton's CPU interpreter); of a prediction, "
           "what its trace did not run as the GPU does (Triton launches skipped, compiled helpers run eagerly) and "
           "the peer's version it followed", added=5),
    _axis("grads"),
    _axis("retain_graph"),
    Column("target", "text", "", "the named GPU target (`cebench targets`) of the row: the GPU a sweep measured on, "
           "recognised by its name, or the one `predict` predicted for; empty for a CPU or another GPU",
           added=5, source="run"),
    Column("predicted_floor_ms", "float", "ms", "predicted rows on a named GPU, bf16/fp16: an estimate, not a "
           "measurement: `flops` at the card's dense BF16 tensor rate (its roofline for the matmuls alone)",
           added=5),
    Column("grid", "text", "", "a fingerprint of the sweep's whole grid (12 hex digits of a hash of its points' "
           "keys), the same in every shard of one sweep: `merge` refuses shards of two different grids", added=5),
    _axis("model"),
    _axis("optimizer"),
    _axis("activation_checkpointing"),
    Column("n_params", "int", "parameters", "`model` rows: the model's parameters (elements; a tied head counted "
           "once)", added=6),
    Column("model_state_bytes", "int", "bytes", "`model` rows: parameters + their gradients + the optimizer's "
           "state, in the device's memory", added=6),
    Column("step_peak_bytes", "int", "bytes", "`model` rows: the highest bytes allocated during the whole training "
           "step (forward, loss, backward, optimizer step, zero_grad), everything live counted; the same as "
           "`peak_bytes`", added=6),
    Column("body_peak_bytes", "int", "bytes", "`model` rows: the same step with a stand-in loss that touches `h` "
           "and the head weight but does no vocabulary-sized work: `step_peak_bytes` − `body_peak_bytes` is what "
           "this loss costs inside this model", added=6),
    Column("body_time_ms", "float", "ms", "measured `model` rows: the median time of that step with the stand-in "
           "loss: `time_ms_median` − `body_time_ms` is what this loss costs in time inside this model", added=6),

)
_SINCE_8: tuple[Column, ...] = (  # the columns added after schema 8, in the order they were added
    Column("predicted_time_ms", "float", "ms", "predicted rows on a named GPU: the step's time from the time model "
           "(a roofline summed over its traced ops, efficiencies calibrated on published rows; `cebench targets`); "
           "a prediction, never a measurement; empty where the model cannot predict it (the note says why)",
           added=9),
    Column("predicted_tokens_per_s", "float", "tokens/s",
           "non-padding tokens / `predicted_time_ms`, per GPU (÷ `tp`, as `tokens_per_s`)", added=9),
)
_AXES_SINCE = tuple(a for a in AXES if a.name not in {c.name for c in _PLACED})
# Every column in CSV order: those placed above, the column of each axis declared up to schema 8, the columns
# added since, then the column of each axis declared after them.
DECLARED: tuple[Column, ...] = (_PLACED + tuple(_axis(a.name) for a in _AXES_SINCE if a.added <= 8) + _SINCE_8
                                + tuple(_axis(a.name) for a in _AXES_SINCE if a.added > 8))

COLUMNS: tuple[str, ...] = tuple(c.name for c in DECLARED)
BY_NAME: dict[str, Column] = {c.name: c for c in DECLARED}
INT_COLUMNS: tuple[str, ...] = tuple(c.name for c in DECLARED if c.kind == "int")
FLOAT_COLUMNS: tuple[str, ...] = tuple(c.name for c in DECLARED if c.kind == "float")
SAMPLES_COLUMNS: tuple[str, ...] = tuple(c.name for c in DECLARED if c.kind == "samples")
# Columns later releases added, with the schema version that added them: an older file
# without them loads with them as `BEFORE` says (empty; schema_version: 1).
ADDED: dict[str, int] = {c.name: c.added for c in DECLARED if c.added > 1}
BEFORE: dict[str, str] = {c.name: c.before for c in DECLARED if c.added > 1}
SCHEMA_VERSION: int = max(c.added for c in DECLARED)

# A point's identity: its variant, workload, device and one value of every axis.
KEY_COLUMNS: tuple[str, ...] = ("variant", "workload", "device") + tuple(a.name for a in AXES)
# What a configuration is besides the variant and its ce_chunk: the rows compared side by side.
SHAPE_COLUMNS = tuple(c for c in KEY_COLUMNS if c not in ("variant", "ce_chunk"))
REQUIRED_VALUES = ("variant", "workload", "device", "dtype", "batch", "context", "tokens", "vocab", "d_model", "status")
# Measurements every `ok` row has (the views draw and compare them); predicted rows
# (mem_method "predicted", from `cebench predict`) have memory but no time.
OK_MEMORY = ("peak_bytes", "base_bytes", "peak_delta_bytes")
OK_TIME = ("time_ms_median", "time_ms_p25", "time_ms_p75")
PREDICTED = "predicted"

_TYPES = {"int": "int", "float": "float", "text": "str", "samples": "tuple[float, ...]"}


def run_values(device_name: str) -> dict[str, object]:
    """The run columns of a row measured now on `device_name`: status ok, this release's
    schema, and the environment (torch and cebench versions, intra-op threads, UTC time)."""
    import torch

    from cebench.core.targets import match
    from cebench.core.version import __version__

    return {"device_name": device_name, "target": match(device_name), "status": Status.OK,
            "torch_version": torch.__version__,
            "cebench_version": __version__, "threads": torch.get_num_threads(),
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"), "schema_version": SCHEMA_VERSION}


def _fields() -> list[tuple[str, str, object]]:
    """(name, type's source, default or `generated.REQUIRED`) of each of a row's fields: config and
    run columns are required, a measurement defaults to empty (None; '' for text)."""
    fields: list[tuple[str, str, object]] = []
    for c in DECLARED:
        kind = _TYPES[c.kind] if c.kind == "text" else f"{_TYPES[c.kind]} | None"
        measured = c.source == "measured"
        fields.append((c.name, kind, ("" if c.kind == "text" else None) if measured else generated.REQUIRED))
    return fields


def typed_source() -> str:
    """The class statement of `_Columns` that the generated block below holds."""
    return generated.dataclass_source("_Columns", _fields(), frozen=False)


if TYPE_CHECKING:
    # <generated: make types>
    @dataclass(kw_only=True)
    class _Columns:
        variant: str
        workload: str
        device: str
        device_name: str
        dtype: str
        batch: int | None
        context: int | None
        tokens: int | None
        vocab: int | None
        d_model: int | None
        ce_chunk: int | None
        status: str
        error: str = ''
        peak_bytes: int | None = None
        base_bytes: int | None = None
        peak_delta_bytes: int | None = None
        mem_method: str = ''
        time_ms_median: float | None = None
        time_ms_p25: float | None = None
        time_ms_p75: float | None = None
        time_ms_min: float | None = None
        repeats: int | None = None
        time_ms_samples: tuple[float, ...] | None = None
        tokens_per_s: float | None = None
        compile_s: float | None = None
        flops: int | None = None
        tflops_per_s: float | None = None
        matmul_floor_ms: float | None = None
        logits_fp32_bytes: int | None
        lower_bound_bytes: int | None
        torch_version: str
        cebench_version: str
        threads: int | None
        timestamp: str
        shard: str = ''
        schema_version: int | None
        ignore_frac: float | None
        softcap: float | None
        label_smoothing: float | None
        z_loss: float | None
        reduction: str
        note: str = ''
        grads: str
        retain_graph: str
        target: str
        predicted_floor_ms: float | None = None
        grid: str = ''
        model: str
        optimizer: str
        activation_checkpointing: str
        n_params: int | None = None
        model_state_bytes: int | None = None
        step_peak_bytes: int | None = None
        body_peak_bytes: int | None = None
        body_time_ms: float | None = None
        fsdp: int | None
        compile: str
        predicted_time_ms: float | None = None
        predicted_tokens_per_s: float | None = None
        tp: int | None
    # </generated>
else:
    _Columns = dataclasses.make_dataclass(
        "_Columns", [(n, object) if d is generated.REQUIRED else (n, object, dataclasses.field(default=d))
                     for n, _, d in _fields()], kw_only=True, namespace={"__module__": __name__})


@dataclass(kw_only=True)
class Result(_Columns):
    """One CSV row, its fields the columns in order (see `DECLARED`). Bytes are bytes, times
    milliseconds (`compile_s` seconds); None is an empty cell (a measurement that was not
    taken, or `ce_chunk` of a non-chunking variant). Built with keywords only."""

    def add_note(self, *parts: str | None) -> None:
        """Add `parts` (those that say something) to the row's note, after what it says (`joined`)."""
        self.note = joined(self.note, *parts)

    @classmethod
    def blank(cls, config: Config, device_name: str) -> Result:
        """A row for `config` with status ok, its reference quantities and environment
        filled in, and every measurement empty."""
        config_values = {c.name: config.value(c.name) for c in DECLARED if c.source == "config"}
        return cls(**config_values, **run_values(device_name))  # type: ignore[arg-type]


def reference() -> str:
    """The Markdown table of the columns (name, unit, meaning, the schema that added it), as
    the README shows it between `START` and `END`."""
    lines = ["| column | unit | meaning | since |", "| --- | --- | --- | --- |"]
    for c in DECLARED:
        if "|" in c.doc + c.unit or "\n" in c.doc:
            raise ValueError(f"column {c.name}: its doc and unit must not hold '|' or a line break")
        lines.append(f"| `{c.name}` | {c.unit} | {c.doc} | {c.added} |")
    return "\n".join(lines) + "\n"


START = "<!-- columns:start -->"
END = "<!-- columns:end -->"


def between(text: str) -> str:
    """The README's column table: the text between `START` and `END`; ValueError when either is missing."""
    return generated.between(text, START, END)


def splice(text: str) -> str:
    """`text` (the README) with `reference()` between the markers."""
    return generated.splice(text, START, END, reference())


def main(argv: list[str]) -> int:
    """`python -m cebench.store.schema`: print the column table; with `--readme PATH`,
    rewrite it between the markers in that file instead."""
    if not argv:
        sys.stdout.write(reference())
        return 0
    if len(argv) == 2 and argv[0] == "--readme":
        path = Path(argv[1])
        path.write_text(splice(path.read_text()))
        return 0
    sys.stderr.write("usage: python -m cebench.store.schema [--readme results/README.md]\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
