"""The sweep's axes, each declared once, by keyword: name, type, role, option, parser,
default per device, help, the CSV column it becomes, and its grid rules as data.

Everything else is derived from `AXES`: the fields of `Config` (a point) and their types,
the grid's cartesian product and its rules (`cebench.run.grid`), each command's typer
options and their help and defaults (`verify` takes the axes with a `verify` default), the
axis's column in the results CSV (`cebench.store.schema`), the table's group heading
(`heading`) and explain's JSON. Adding an axis is one `Axis(...)` here plus its use (what a
step does with the value); `tests/test_axis_declaration.py` adds one that way.

A leaf module: it imports nothing from cebench but the error type, and never torch.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from cebench.core.errors import UsageError
from cebench.core.units import format_percent

MAX_SIZE = 2**31 - 1  # largest size in any one option: beyond it byte counts leave int64
# Ranks of one --fsdp world at most: 64 Ki, beyond any cluster's (a prediction builds a fake world of that many
# ranks in one process, a minute per 10,000; a measurement starts one process per rank).
MAX_WORLD = 65_536

# Input dtypes of h and weight: canonical short name → bytes per element.
ITEMSIZE: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2}
DTYPES: tuple[str, ...] = tuple(ITEMSIZE)
DTYPE_ALIASES: dict[str, str] = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16",
                                 "half": "fp16"}


def split(text: str, param: str) -> list[str]:
    """'a, b,a' → ['a', 'b', 'a']; an empty list or an empty item is a `UsageError`."""
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise UsageError("empty (give one or more comma-separated values)", param)
    if "" in parts:
        raise UsageError(f"'{text}' has an empty item", param)
    return parts


def _unique(values: list) -> tuple:
    return tuple(dict.fromkeys(values))


def parse_ints(text: str, param: str, most: int = MAX_SIZE, beyond: str | None = None) -> tuple[int, ...]:
    """'4,8,16' → (4, 8, 16): positive integers up to `most`, duplicates dropped, order kept
    (`beyond`: what the error says of a larger one, after it; None: 'is too large')."""
    values = []
    for part in split(text, param):
        try:
            value = int(part.replace("_", ""))
        except ValueError:
            raise UsageError(f"'{part}' is not an integer", param) from None
        if value <= 0:
            raise UsageError(f"{value} must be a positive integer", param)
        if value > most:
            said = f"{value} is too large" if beyond is None else f"{value:,} {beyond}"
            raise UsageError(f"{said} (at most {most:,})", param)
        values.append(value)
    return _unique(values)


def parse_world(text: str, param: str) -> tuple[int, ...]:
    """World sizes (ranks): as `parse_ints`, each at most `MAX_WORLD`, beyond any cluster."""
    return parse_ints(text, param, MAX_WORLD, "ranks is more than any cluster has")


def parse_vocab(text: str, param: str) -> tuple[int, ...]:
    """Vocabulary sizes: as `parse_ints`, each ≥ 2 (with one token there is nothing to predict)."""
    values = parse_ints(text, param)
    if min(values) < 2:
        raise UsageError(f"{min(values)} is too small (a vocabulary needs at least 2 tokens)", param)
    return values


def resolve_dtype(name: str, param: str = "dtype") -> str:
    """A dtype name or alias ('bf16', 'bfloat16', ...) → its canonical short name."""
    key = name.strip().lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise UsageError(f"'{name.strip()}' is not one of {', '.join(DTYPES)}", param)
    return key


def parse_dtypes(text: str, param: str = "dtype") -> tuple[str, ...]:
    """'fp32,bfloat16' → ('fp32', 'bf16'), duplicates dropped."""
    return _unique([resolve_dtype(p, param) for p in split(text, param)])


def _parse_floats(text: str, param: str, ok: Callable[[float], bool], rule: str) -> tuple[float, ...]:
    """Comma-separated numbers, each `ok` (else a `UsageError` saying it `rule`), duplicates
    dropped, order kept."""
    values = []
    for part in split(text, param):
        try:
            value = float(part)
        except ValueError:
            raise UsageError(f"'{part}' is not a number", param) from None
        if not ok(value):
            raise UsageError(f"{part} {rule}", param)
        values.append(value)
    return _unique(values)


def parse_fractions(text: str, param: str) -> tuple[float, ...]:
    """'0,0.25' → (0.0, 0.25): shares in [0, 1)."""
    return _parse_floats(text, param, lambda v: 0 <= v < 1, "must be at least 0 and below 1")


FP32_MAX = 3.4028234663852886e38  # the largest finite fp32: a loss's coefficient the loss computes with


def parse_nonnegative(text: str, param: str) -> tuple[float, ...]:
    """'0,30' → (0.0, 30.0): numbers ≥ 0 that fp32, where a loss computes with them, holds
    (`FP32_MAX`; beyond it one is inf there)."""
    values = _parse_floats(text, param, lambda v: 0 <= v < float("inf"), "must be a finite number ≥ 0")
    if max(values) > FP32_MAX:
        raise UsageError(f"{max(values):g} is beyond what fp32, where the loss computes with it, holds (at most "
                         f"{FP32_MAX:.4g})", param)
    return values


def parse_unit_interval(text: str, param: str) -> tuple[float, ...]:
    """'0,0.1' → (0.0, 0.1): numbers in [0, 1]."""
    return _parse_floats(text, param, lambda v: 0 <= v <= 1, "must be from 0 to 1")


class Choice(str, Enum):
    """A word an axis takes (an enum whose members equal, hash and print as their CSV text)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    __hash__ = str.__hash__


class Reduction(Choice):
    """How the per-row losses become the step's loss."""

    MEAN = "mean"
    SUM = "sum"
    NONE = "none"  # per-row losses; the step backpropagates a fixed upstream gradient


class Grads(Choice):
    """The gradients before each step."""

    NONE = "none"  # set to None: allocated fresh
    KEEP = "keep"  # the previous step's stay and the new ones accumulate into them


class YesNo(Choice):
    """A switch's value."""

    YES = "yes"
    NO = "no"


class Optimizer(Choice):
    """The optimizer of a model's step (torch.optim's, default settings)."""

    NONE = "none"
    SGD = "sgd"
    ADAMW = "adamw"  # its for-each implementation where the device has one (torch's default)
    ADAMW_FUSED = "adamw-fused"  # AdamW(fused=True): one in-place kernel, no parameter-sized temporaries
    # fused AdamW stepped for each parameter as its gradient is accumulated, the gradient then freed (torchtune's
    # optimizer_in_bwd): no step after the backward, no gradients held
    ADAMW_IN_BACKWARD = "adamw-in-backward"


class Checkpointing(Choice):
    """Activation checkpointing of a model's blocks."""

    NONE = "none"
    BLOCKS = "blocks"  # each block under torch.utils.checkpoint, non-reentrant


class Compile(Choice):
    """`torch.compile` of a model's blocks."""

    NONE = "none"
    BLOCKS = "blocks"  # each block compiled in place (`nn.Module.compile`), as torchtune's compile=True does


NO_MODEL = "none"  # the `model` of a point that measures the loss alone
_YES, _NO = ("yes", "true", "1", "on"), ("no", "false", "0", "off")
C = TypeVar("C", bound=Choice)


def choices(enum: type[C]) -> Callable[[str, str], tuple[C, ...]]:
    """A parser of comma-separated words, each a member of `enum` (case ignored), duplicates dropped."""
    words = tuple(m.value for m in enum)

    def parse(text: str, param: str) -> tuple[C, ...]:
        values = [p.lower() for p in split(text, param)]
        for value in values:
            if value not in words:
                raise UsageError(f"'{value}' is not one of {', '.join(words)}", param)
        return _unique([enum(v) for v in values])

    parse.__doc__ = f"'{words[0]},{words[-1]}' → ({enum.__name__}.{words[0].upper()}, ...): each one of {words}."
    return parse


def parse_models(text: str, param: str) -> tuple[str, ...]:
    """'gpt2,cfg.json' → ('gpt2', 'cfg.json'): model names as given (`cebench.models`
    resolves and checks them), duplicates dropped; `NO_MODEL`: the loss alone, never beside a model."""
    values = _unique(split(text, param))
    if NO_MODEL in values and len(values) > 1:
        raise UsageError(f"'{NO_MODEL}' (the loss alone) and a model cannot share one grid: their vocab and d_model "
                         "differ", param)
    return values


def parse_switch(text: str, param: str) -> tuple[YesNo, ...]:
    """'yes', 'true', '1', 'on' → (YES,); 'no', 'false', '0', 'off' → (NO,); comma-separated."""
    values = []
    for part in split(text, param):
        key = part.lower()
        if key not in _YES + _NO:
            raise UsageError(f"'{part}' is not yes or no", param)
        values.append(YesNo.YES if key in _YES else YesNo.NO)
    return _unique(values)


class Role(Choice):
    """What an axis is to a point; each role has its own rules (in `cebench.run.grid`,
    `verify`, the table's group heading), so an axis's role decides them."""

    SIZE = "size"  # the problem's size and dtype: every point names one value
    CHUNK = "chunk"  # a chunked variant's own (ce_chunk): other variants get None, the table shows it per row
    SEMANTICS = "semantics"  # the loss's semantics: verify checks them, a sampler takes their off value
    STEP = "step"  # the loss step's steady state: needs a graph (the loss workload)
    MODEL = "model"  # the model whose training step the loss runs in, and that step's settings


# The roles in the order the table's group heading names them.
HEADING_ROLES: tuple[Role, ...] = (Role.MODEL, Role.SIZE, Role.SEMANTICS, Role.STEP)
_KINDS: dict[type, str] = {int: "int", float: "float", str: "text"}


@dataclass(frozen=True, kw_only=True)
class Axis:
    """One sweep axis, declared by keyword; everything about it is derived from here.

    `name` is the `Config` field, the command's parameter (`--name-with-dashes`) and the CSV
    column; `type` the Python type of a value (`int`, `float`, `str` or a `Choice`; `Config`'s
    field type and the column's kind come from it); `role` decides its rules (see `Role`).
    `parse` turns the option's comma-separated text into values (raising `UsageError` naming
    the parameter); `defaults` maps a device kind ('cpu', 'cuda') or '*' to the text of its
    default values; `off` is a `Config`'s value when the axis is not swept (None: every point
    names a value). `help` is the option's help where a grid is swept, `one` where a command
    takes a single value; `unit` and `doc` describe the CSV column, `added` is the schema
    version that added it (an axis declared after schema 6 gets its column at the CSV's end).
    `keyword`: passed to a loss variant as a keyword argument of the axis's name when not
    `off` (a variant that does not take it cannot run such a point). `label` names a value
    that is not `off` in titles and the group heading ('softcap {:g}', or a function of the
    value); `sep` goes before it in the heading; `short` is a narrow column header ('cap {:g}').
    `verify`: the text of the values `cebench verify` checks at when none are given ('' the
    device's default; None: verify does not take the axis). `switch`: a flag on the command
    line (`--retain-graph`), 'yes' when given. Grid rules as data: `requires` = (an axis, why)
    whose value must not be off for this one to be anything but off; `model_sets`: a model
    decides the value (giving it with `--model` is an error); `model_default`: a model's own
    value (its attribute of the axis's name) unless the option is given (`model_help` says
    so, after `help`, where the command takes --model); `without_model`: why a value other
    than off cannot be used inside a model's step.
    """

    name: str
    type: type
    role: Role
    help: str
    one: str
    parse: Callable[[str, str], tuple]
    defaults: Mapping[str, str]
    unit: str = ""
    doc: str
    added: int = 1
    off: object = None
    metavar: str = "LIST"
    keyword: bool = False
    label: str | Callable[[object], str] = ""
    sep: str = " · "
    short: str = ""
    verify: str | None = None
    switch: bool = False
    requires: tuple[str, str] | None = None
    model_sets: bool = False
    model_default: bool = False
    model_help: str = ""
    without_model: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def kind(self) -> str:
        """The CSV column's kind: 'int', 'float' or 'text'."""
        return next(k for t, k in _KINDS.items() if issubclass(self.type, t))

    @property
    def chunked_only(self) -> bool:
        """Whether the axis applies to chunked variants alone (the others get None)."""
        return self.role is Role.CHUNK

    @property
    def loss_only(self) -> bool:
        """Whether the axis is a loss semantics (the sample workload takes its `off` value)."""
        return self.role is Role.SEMANTICS

    def default_text(self, device: str) -> str:
        """The text of `device`'s default values."""
        return self.defaults.get(device, self.defaults.get("*", ""))

    def default(self, device: str) -> tuple:
        """`device`'s default values."""
        return self.parse(self.default_text(device), self.name)

    def values(self, text: str | None, device: str) -> tuple:
        """The option's values: `text` parsed, or `device`'s default when it is None."""
        return self.default(device) if text is None else self.parse(text, self.name)

    def defaults_help(self) -> str:
        """'Default: 128.' or 'Default: cpu 128; cuda 2048.' for --help."""
        if "*" in self.defaults:
            return f"Default: {self.defaults['*']}."
        return "Default: " + "; ".join(f"{d} {t}" for d, t in self.defaults.items()) + "."

    def is_off(self, value: object) -> bool:
        """Whether `value` is this axis's `off` value; None, '' and NaN (a cell never
        written) count as off."""
        return value is None or value == "" or value != value or value == self.off  # value != value: NaN

    def text(self, value: object) -> str:
        """`value` as option text: '0.25', '30', 'mean'."""
        return f"{value:g}" if isinstance(value, float) else str(value)

    def labelled(self, value: object) -> str:
        """`value` as its label says ('softcap 30'); a CSV cell is read as the axis's type first."""
        if self.kind == "float":
            value = float(value)  # type: ignore[arg-type]
        elif self.kind == "int":
            value = int(value)  # type: ignore[call-overload]
        return self.label(value) if callable(self.label) else self.label.format(value)


def _ignored(share: object) -> str:
    """'25% ignored', '99.9% ignored': never rounded to a share it is not (0.999 is not 100%)."""
    assert isinstance(share, float), share  # labelled() reads a cell as the axis's type first
    return f"{format_percent(share)} ignored"


def _file_name(model: object) -> str:
    """A model by its file's name ('llama.json' for 'configs/llama.json', 'hf:llama.json' for
    'hf:configs/llama.json'), a `config.json` by its folder's too ('Llama-3.1-8B/config.json':
    every Hugging Face snapshot holds one of that name): the CSV keeps the path whole."""
    text = str(model)
    prefix = "hf:" if text.startswith("hf:") else ""
    parts = text[len(prefix):].split("/")
    kept = parts[-2:] if parts[-1].split(":")[0] == "config.json" and len(parts) > 1 else parts[-1:]
    return prefix + "/".join(kept)


_MODEL_STEP = ("model", "applies to a model's training step")
AXES: tuple[Axis, ...] = (
    # CPU: small enough that `cebench sweep --vocab 50257` (16 points: 5 loss variants, 2 batches, 2 chunk
    # sizes, 6 torch.compile calls) finishes in under three minutes on 2 cores with a cold compile cache, with
    # N ≫ ce_chunk at batch 8. CUDA: the 1B setting of fractus's chunked loss (d_model 2048, context 128) in bf16;
    # bf16 matmuls are ~40× slower than fp32 on a CPU.
    Axis(name="dtype", type=str, role=Role.SIZE, parse=parse_dtypes, defaults={"cpu": "fp32", "cuda": "bf16"},
         help="Dtypes of h and weight, comma-separated: fp32, bf16, fp16.",
         one="Dtype of h and weight: fp32, bf16, fp16.",
         doc="dtype of `h` and `weight`: `fp32`, `bf16`, `fp16`", verify=""),
    Axis(name="batch", type=int, role=Role.SIZE, parse=parse_ints, defaults={"cpu": "2,8", "cuda": "4,8,16,32"},
         help="Batch sizes, comma-separated.", one="Batch size.", unit="sequences", doc="sequences per step",
         label="batch {}"),
    Axis(name="context", type=int, role=Role.SIZE, parse=parse_ints, defaults={"*": "128"},
         help="Context lengths (tokens per sequence).", one="Context length.", unit="tokens",
         doc="tokens per sequence", label="context {}", sep=" × "),
    Axis(name="vocab", type=int, role=Role.SIZE, parse=parse_vocab, defaults={"*": "50257"},
         help="Vocabulary sizes (≥ 2).", one="Vocabulary size (≥ 2).", unit="tokens", doc="vocabulary size",
         label="vocab {:,}", model_sets=True),
    Axis(name="d_model", type=int, role=Role.SIZE, parse=parse_ints, defaults={"cpu": "128", "cuda": "2048"},
         help="Hidden sizes.", one="Hidden size.", doc="hidden size", label="d_model {:,}", model_sets=True),
    Axis(name="ce_chunk", type=int, role=Role.CHUNK, parse=parse_ints, defaults={"cpu": "256,512", "cuda": "2048,8192"},
         help="Rows per chunk, for chunked variants.", one="Rows per chunk, for chunked variants.", unit="rows",
         doc="rows per chunk; empty for variants that do not chunk"),
    Axis(name="ignore_frac", type=float, role=Role.SEMANTICS, parse=parse_fractions, defaults={"*": "0"}, off=0.0,
         help="Shares of the targets set to -100 (ignored: padding), each in [0, 1), placed at random.",
         one="Share of the targets set to -100 (ignored: padding), in [0, 1).",
         doc="share of the targets set to -100 (`ignore_index`: padding), placed at random with the fixed seed; the "
             "loss is the mean over the others", added=4, label=_ignored, short="ign {:g}", verify="0.25"),
    Axis(name="softcap", type=float, role=Role.SEMANTICS, parse=parse_nonnegative, defaults={"*": "0"}, off=0.0,
         help="Final-logit softcaps c: logits become c·tanh(logits / c) before the loss (Gemma 2: 30); 0: none.",
         model_help="With --model: the model's own (its config's final_logit_softcapping) unless given.",
         one="Final-logit softcap c (logits → c·tanh(logits / c)); 0: none.",
         doc="final-logit softcap c: the loss sees c·tanh(logits / c); 0: none", added=5, keyword=True,
         label="softcap {:g}", short="cap {:g}", verify="2", model_default=True),
    Axis(name="label_smoothing", type=float, role=Role.SEMANTICS, parse=parse_unit_interval, defaults={"*": "0"},
         off=0.0, help="Label smoothing ε, each in [0, 1] (torch's definition).",
         one="Label smoothing ε in [0, 1] (torch's definition).",
         doc="label smoothing ε (torch's definition: (1 − ε)·CE + ε·mean over the vocabulary of −log p)", added=5,
         keyword=True, label="smoothing {:g}", short="ls {:g}", verify="0.1"),
    Axis(name="z_loss", type=float, role=Role.SEMANTICS, parse=parse_nonnegative, defaults={"*": "0"}, off=0.0,
         help="z-loss coefficients: coefficient × the mean squared log-sum-exp, added to the loss.",
         one="z-loss coefficient: × the mean squared log-sum-exp, added to the loss.",
         doc="z-loss coefficient: the loss gains it × the mean (over real targets) of log-sum-exp²", added=5,
         keyword=True, label="z-loss {:g}", short="z {:g}", verify="0.01"),
    Axis(name="reduction", type=Reduction, role=Role.SEMANTICS, parse=choices(Reduction), defaults={"*": "mean"},
         off=Reduction.MEAN,
         help="Reductions: mean, sum, none (none: the step backpropagates a fixed random upstream gradient).",
         one="Reduction: mean, sum or none.",
         doc="`mean`, `sum` or `none` (per-row losses; the step backpropagates a fixed, non-uniform upstream "
             "gradient)", added=5, keyword=True, label="reduction {}", short="{}", verify="sum,none"),
    # Steady-state semantics of the step (loss workload only; not loss semantics: verify ignores them).
    Axis(name="grads", type=Grads, role=Role.STEP, parse=choices(Grads), defaults={"*": "none"}, off=Grads.NONE,
         help="Gradients before each step: none (set to None: allocated fresh) or keep (the previous step's stay "
              "allocated and the new ones accumulate into them, as in gradient accumulation and in Liger-Kernel's "
              "harness); comma-separated.",
         one="Gradients before the step: none (set to None) or keep (the previous step's stay and the new ones "
             "accumulate into them).",
         doc="`none` (gradients set to None before each step) or `keep` (the previous step's stay allocated, counted "
             "in `base_bytes`, and the new ones accumulate into them)", added=5, label="grads {}", short="grads {}",
         without_model="a model's step ends with zero_grad(set_to_none=True): its gradients are not kept"),
    Axis(name="retain_graph", type=YesNo, role=Role.STEP, parse=parse_switch, defaults={"*": "no"}, off=YesNo.NO,
         help="Call backward(..., retain_graph=True): the saved tensors stay alive until the step ends.",
         one="Call backward(..., retain_graph=True).",
         doc="`yes`: the step calls `backward(..., retain_graph=True)`, so the saved tensors live until it ends",
         added=5, label="retain graph", short="retain", switch=True),
    # The model whose training step the loss runs in (its vocab and d_model are the model's), and that step's
    # optimizer and activation checkpointing; a loss alone has neither.
    Axis(name="model", type=str, role=Role.MODEL, parse=parse_models, defaults={"*": NO_MODEL}, off=NO_MODEL,
         help="Models whose training step the loss runs in, comma-separated: a preset (cebench models; or the "
              "Hugging Face id it cites, as meta-llama/Llama-3.1-8B, case ignored), a Hugging "
              "Face config.json (cebench's decoder; :repeat-kv after it repeats grouped keys and values per query "
              "head, as torchtune's attention does), either after hf: (the transformers model itself; :no-dropout, "
              ":no-cache after it turn those off), or path/to/file.py:build / package.module:build; the model sets "
              "vocab and d_model. A name that is a preset's and an existing file's at once is refused (./name "
              "names the file).",
         one="Model whose training step the loss runs in: a preset (cebench models; or its Hugging Face id), a "
             "config.json, either after hf: (the transformers model), or file.py:build / package.module:build.",
         doc="the model whose training step the loss ran in (a preset, a config.json path, either after `hf:`, or a "
             "build); `none`: the loss alone", added=6, metavar="MODEL", label=_file_name, short="{}"),
    Axis(name="optimizer", type=Optimizer, role=Role.MODEL, parse=choices(Optimizer), defaults={"*": "adamw"},
         off=Optimizer.NONE, help="Optimizers of the model's step: none, sgd, adamw (torch.optim's, default "
                                  "settings), adamw-fused (AdamW(fused=True)), adamw-in-backward (fused, "
                                  "stepped for each parameter as its gradient is made, the gradient then freed, "
                                  "as torchtune's optimizer_in_bwd); with --model.",
         one="Optimizer of the model's step: none, sgd, adamw, adamw-fused or adamw-in-backward (with --model).",
         doc="`none`, `sgd`, `adamw` (torch.optim's, default settings), `adamw-fused` (`AdamW(fused=True)`) or "
             "`adamw-in-backward` (that, stepped for each parameter in a post-accumulate-grad hook, the "
             "gradient then freed): the optimizer step of a `model` row; `none` for the loss alone", added=6,
         label="{}", short="{}", requires=_MODEL_STEP),
    Axis(name="activation_checkpointing", type=Checkpointing, role=Role.MODEL, parse=choices(Checkpointing),
         defaults={"*": "none"}, off=Checkpointing.NONE,
         help="Activation checkpointing of the model's blocks: none, blocks (each block under "
              "torch.utils.checkpoint, non-reentrant); with --model.",
         one="Activation checkpointing: none or blocks (with --model).",
         doc="`none` or `blocks` (each block of the model under `torch.utils.checkpoint`, non-reentrant)", added=6,
         label="checkpointing {}", short="ac {}", requires=_MODEL_STEP),
    Axis(name="fsdp", type=int, role=Role.MODEL, parse=parse_world, defaults={"*": "1"}, off=1, metavar="RANKS",
         help="Ranks the model's step is sharded over with FSDP2 (fully_shard on each block, then on the root; the "
              f"optimizer on the shards), comma-separated, at most {MAX_WORLD:,}; memory is per rank; 1: one process, "
              "unsharded; with --model.",
         one=f"Ranks the model's step is sharded over with FSDP2 (1: unsharded; at most {MAX_WORLD:,}); memory is "
             "per rank (with --model).",
         doc="ranks the `model`'s step was sharded over with FSDP2 (`fully_shard` on each block, then on the root; "
             "the optimizer on the shards); the memory columns are one rank's, the largest; 1: one process, "
             "unsharded", added=7, unit="ranks", label="FSDP ×{}", short="fsdp {}", requires=_MODEL_STEP),
    Axis(name="tp", type=int, role=Role.MODEL, parse=parse_world, defaults={"*": "1"}, off=1, metavar="RANKS",
         help="Ranks each layer of the model's step is split over with tensor parallelism (attention's and the MLP's "
              "projections column- then row-wise, the embedding and the output head over the vocabulary, as "
              "torchtitan splits a Llama; the loss on the vocabulary's shards), comma-separated; the world is "
              "--fsdp × --tp ranks; memory is per rank; 1: unsplit; with --model (cebench's decoder).",
         one="Ranks each layer is split over with tensor parallelism (the head over the vocabulary; the world is "
             "--fsdp × --tp; 1: unsplit; with --model).",
         doc="ranks each layer of the `model`'s step was split over with tensor parallelism (attention's and the "
             "MLP's projections column- then row-wise, the embedding and the output head over the vocabulary; the "
             "loss on the vocabulary's shards); the world is `fsdp` × `tp` ranks, the memory columns one rank's, "
             "the largest; 1: unsplit", added=10, unit="ranks", label="TP ×{}", short="tp {}", requires=_MODEL_STEP),
    Axis(name="compile", type=Compile, role=Role.MODEL, parse=choices(Compile), defaults={"*": "none"},
         off=Compile.NONE,
         help="torch.compile of the model's blocks: none, blocks (each block compiled in place, as torchtune's "
              "compile=True and torchtitan compile them; the loss as its variant says); with --model.",
         one="torch.compile of the model's blocks: none or blocks (with --model).",
         doc="`none` or `blocks` (each block of the model compiled in place, `nn.Module.compile()`; the loss is "
             "compiled or not as its variant says)", added=8, label="compiled {}", short="compile {}",
         requires=_MODEL_STEP),
)
BY_NAME: dict[str, Axis] = {a.name: a for a in AXES}
MODEL_AXES: tuple[str, ...] = tuple(a.name for a in AXES if a.role is Role.MODEL)  # a point with a model only
# The settings of a model's step (the axes that need a model: optimizer, activation checkpointing): `fit` answers
# for each value given, side by side, as it does for each ce_chunk.
STEP_SETTINGS: tuple[str, ...] = tuple(a.name for a in AXES if a.requires is not None and a.requires[0] == "model")
SEMANTICS: tuple[Axis, ...] = tuple(a for a in AXES if a.loss_only)  # the loss's semantics, padding included
FEATURES: tuple[Axis, ...] = tuple(a for a in AXES if a.keyword)  # those a variant must take as keywords
VERIFIED: tuple[Axis, ...] = tuple(a for a in AXES if a.verify is not None)  # the axes `cebench verify` takes
# What a figure's x axis can run along: the numeric axes (ce_chunk is a line's own).
X_AXES: tuple[str, ...] = tuple(a.name for a in AXES if a.kind in ("int", "float") and not a.chunked_only)


def semantics_label(values: Mapping[str, object]) -> str:
    """'25% ignored · softcap 30' for a point's (or a row's) semantics that are not off; ''
    when every one is off. A missing or empty value counts as off."""
    return " · ".join(a.labelled(values.get(a.name)) for a in SEMANTICS if not a.is_off(values.get(a.name)))


def heading(values: Mapping[str, object]) -> str:
    """The group heading of a point's (or a row's) values: 'gpt2 · adamw · batch 8 × context
    128 · vocab 50,257 · d_model 768 · softcap 30 · grads keep': each labelled axis whose
    value is not off (every one that has no off value), by `HEADING_ROLES`, then declaration order."""
    text = ""
    for role in HEADING_ROLES:
        for axis in AXES:
            value = values.get(axis.name)
            if axis.role is role and axis.label and (axis.off is None or not axis.is_off(value)):
                text += (axis.sep if text else "") + axis.labelled(value)
    return text
