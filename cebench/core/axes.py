"""The sweep's axes, each declared once: name, option, parser, default per device, help,
and the CSV column it becomes.

Everything else is derived from `AXES`: the fields of `Config` (a point), the grid's
cartesian product, each command's typer options and their help, the defaults shown in
`--help`, and the axis's column in the results CSV (`cebench.store.schema`). Adding an
axis is one `Axis(...)` here plus its use (what a step does with the value).

A leaf module: it imports nothing from cebench but the error type, and never torch.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cebench.core.errors import UsageError

MAX_SIZE = 2**31 - 1  # largest size in any one option: beyond it byte counts leave int64

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


def parse_ints(text: str, param: str) -> tuple[int, ...]:
    """'4,8,16' → (4, 8, 16): positive integers up to `MAX_SIZE`, duplicates dropped, order kept."""
    values = []
    for part in split(text, param):
        try:
            value = int(part.replace("_", ""))
        except ValueError:
            raise UsageError(f"'{part}' is not an integer", param) from None
        if value <= 0:
            raise UsageError(f"{value} must be a positive integer", param)
        if value > MAX_SIZE:
            raise UsageError(f"{value} is too large (at most {MAX_SIZE:,})", param)
        values.append(value)
    return _unique(values)


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


def parse_nonnegative(text: str, param: str) -> tuple[float, ...]:
    """'0,30' → (0.0, 30.0): finite numbers ≥ 0."""
    return _parse_floats(text, param, lambda v: 0 <= v < float("inf"), "must be a finite number ≥ 0")


def parse_unit_interval(text: str, param: str) -> tuple[float, ...]:
    """'0,0.1' → (0.0, 0.1): numbers in [0, 1]."""
    return _parse_floats(text, param, lambda v: 0 <= v <= 1, "must be from 0 to 1")


REDUCTIONS: tuple[str, ...] = ("mean", "sum", "none")
GRADS: tuple[str, ...] = ("none", "keep")
OPTIMIZERS: tuple[str, ...] = ("none", "sgd", "adamw")  # torch.optim's, with their defaults
CHECKPOINTING: tuple[str, ...] = ("none", "blocks")
_YES, _NO = ("yes", "true", "1", "on"), ("no", "false", "0", "off")


def _parse_choices(text: str, param: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    """Comma-separated words, each one of `choices` (case ignored), duplicates dropped."""
    values = [p.lower() for p in split(text, param)]
    for value in values:
        if value not in choices:
            raise UsageError(f"'{value}' is not one of {', '.join(choices)}", param)
    return _unique(values)


def parse_grads(text: str, param: str) -> tuple[str, ...]:
    """'none,keep' → ('none', 'keep'): each one of `GRADS`."""
    return _parse_choices(text, param, GRADS)


def parse_optimizers(text: str, param: str) -> tuple[str, ...]:
    """'adamw,none' → ('adamw', 'none'): each one of `OPTIMIZERS`."""
    return _parse_choices(text, param, OPTIMIZERS)


def parse_checkpointing(text: str, param: str) -> tuple[str, ...]:
    """'none,blocks' → ('none', 'blocks'): each one of `CHECKPOINTING`."""
    return _parse_choices(text, param, CHECKPOINTING)


def parse_models(text: str, param: str) -> tuple[str, ...]:
    """'gpt2,cfg.json' → ('gpt2', 'cfg.json'): model names as given (`cebench.models`
    resolves and checks them), duplicates dropped; 'none': the loss alone, never beside a model."""
    values = _unique(split(text, param))
    if "none" in values and len(values) > 1:
        raise UsageError("'none' (the loss alone) and a model cannot share one grid: their vocab and d_model differ",
                         param)
    return values


def parse_switch(text: str, param: str) -> tuple[str, ...]:
    """'yes', 'true', '1', 'on' → ('yes',); 'no', 'false', '0', 'off' → ('no',); comma-separated."""
    values = []
    for part in split(text, param):
        key = part.lower()
        if key not in _YES + _NO:
            raise UsageError(f"'{part}' is not yes or no", param)
        values.append("yes" if key in _YES else "no")
    return _unique(values)


def parse_reductions(text: str, param: str) -> tuple[str, ...]:
    """'mean,none' → ('mean', 'none'): each one of `REDUCTIONS`."""
    return _parse_choices(text, param, REDUCTIONS)


@dataclass(frozen=True)
class Axis:
    """One sweep axis.

    `name` is the `Config` field, the command's parameter and the CSV column; `parse`
    turns the option's comma-separated text into values (raising `UsageError` naming the
    parameter); `defaults` maps a device kind ('cpu', 'cuda') or '*' to the text of its
    default values; `off` is a `Config`'s value when the axis is not swept (None: the axis
    has no such value, every point names one). `chunked_only` axes apply to chunked
    variants alone (the others get None). `kind`, `unit` and `doc` describe the CSV column,
    `added` is the schema version that added it. `loss_only` axes are loss semantics (the
    sample workload takes their `off` value); `keyword` ones are passed to a loss variant as
    a keyword argument of the axis's name when not `off`, and a variant that does not take
    it cannot run such a point. `label` formats a value that is not `off` for titles
    ('softcap {:g}'), `short` for a narrow column header ('cap {:g}'). `verify` is the text of
    the values `cebench verify` checks a loss semantics at when none are given.
    """

    name: str
    help: str
    one: str  # the help of a command that takes a single value ("Batch size")
    parse: Callable[[str, str], tuple]
    defaults: Mapping[str, str]
    kind: str
    unit: str
    doc: str
    added: int = 1
    off: object = None
    chunked_only: bool = False
    metavar: str = field(default="LIST")
    loss_only: bool = False
    keyword: bool = False
    label: str = ""
    short: str = ""
    verify: str = ""
    switch: bool = False  # a flag on the command line (--retain-graph), 'yes' when given

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

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


AXES: tuple[Axis, ...] = (
    # CPU: small enough that `cebench sweep --vocab 50257` (16 points: 5 loss variants, 2 batches, 2 chunk
    # sizes, 6 torch.compile calls) finishes in under three minutes on 2 cores with a cold compile cache, with
    # N ≫ ce_chunk at batch 8. CUDA: the 1B setting of fractus's chunked loss (d_model 2048, context 128) in bf16;
    # bf16 matmuls are ~40× slower than fp32 on a CPU.
    Axis("dtype", "Dtypes of h and weight, comma-separated: fp32, bf16, fp16.", "Dtype of h and weight: fp32, "
         "bf16, fp16.", parse_dtypes, {"cpu": "fp32", "cuda": "bf16"}, "text", "",
         "dtype of `h` and `weight`: `fp32`, `bf16`, `fp16`"),
    Axis("batch", "Batch sizes, comma-separated.", "Batch size.", parse_ints,
         {"cpu": "2,8", "cuda": "4,8,16,32"}, "int", "sequences", "sequences per step"),
    Axis("context", "Context lengths (tokens per sequence).", "Context length.", parse_ints, {"*": "128"},
         "int", "tokens", "tokens per sequence"),
    Axis("vocab", "Vocabulary sizes (≥ 2).", "Vocabulary size (≥ 2).", parse_vocab, {"*": "50257"}, "int",
         "tokens", "vocabulary size"),
    Axis("d_model", "Hidden sizes.", "Hidden size.", parse_ints, {"cpu": "128", "cuda": "2048"}, "int", "",
         "hidden size"),
    Axis("ce_chunk", "Rows per chunk, for chunked variants.", "Rows per chunk, for chunked variants.", parse_ints,
         {"cpu": "256,512", "cuda": "2048,8192"}, "int", "rows", "rows per chunk; empty for variants that "
         "do not chunk", chunked_only=True),
    Axis("ignore_frac", "Shares of the targets set to -100 (ignored: padding), each in [0, 1), placed at "
         "random.", "Share of the targets set to -100 (ignored: padding), in [0, 1).", parse_fractions, {"*": "0"},
         "float", "", "share of the targets set to -100 (`ignore_index`: padding), placed at random with the fixed "
         "seed; the loss is the mean over the others", added=4, off=0.0, loss_only=True, label="{:.0%} ignored",
         short="ign {:g}", verify="0.25"),
    Axis("softcap", "Final-logit softcaps c: logits become c·tanh(logits / c) before the loss (Gemma 2: 30); 0: "
         "none.", "Final-logit softcap c (logits → c·tanh(logits / c)); 0: none.", parse_nonnegative, {"*": "0"},
         "float", "", "final-logit softcap c: the loss sees c·tanh(logits / c); 0: none", added=5, off=0.0,
         loss_only=True, keyword=True, label="softcap {:g}", short="cap {:g}", verify="2"),
    Axis("label_smoothing", "Label smoothing ε, each in [0, 1] (torch's definition).", "Label smoothing ε in [0, "
         "1] (torch's definition).", parse_unit_interval, {"*": "0"}, "float", "", "label smoothing ε (torch's "
         "definition: (1 − ε)·CE + ε·mean over the vocabulary of −log p)", added=5, off=0.0, loss_only=True,
         keyword=True, label="smoothing {:g}", short="ls {:g}", verify="0.1"),
    Axis("z_loss", "z-loss coefficients: coefficient × the mean squared log-sum-exp, added to the loss.",
         "z-loss coefficient: × the mean squared log-sum-exp, added to the loss.", parse_nonnegative, {"*": "0"},
         "float", "", "z-loss coefficient: the loss gains it × the mean (over real targets) of log-sum-exp²",
         added=5, off=0.0, loss_only=True, keyword=True, label="z-loss {:g}", short="z {:g}",
         verify="0.01"),
    Axis("reduction", "Reductions: mean, sum, none (none: the step backpropagates a fixed random upstream "
         "gradient).", "Reduction: mean, sum or none.", parse_reductions, {"*": "mean"}, "text", "",
         "`mean`, `sum` or `none` (per-row losses; the step backpropagates a fixed, non-uniform upstream "
         "gradient)", added=5, off="mean", loss_only=True, keyword=True, label="reduction {}", short="{}",
         verify="sum,none"),
    # Steady-state semantics of the step (loss workload only; not loss semantics: verify ignores them).
    Axis("grads", "Gradients before each step: none (set to None: allocated fresh) or keep (the previous step's "
         "stay allocated and the new ones accumulate into them, as in gradient accumulation and in Liger-Kernel's "
         "harness); comma-separated.", "Gradients before the step: none (set to None) or keep (the previous "
         "step's stay and the new ones accumulate into them).", parse_grads, {"*": "none"}, "text", "",
         "`none` (gradients set to None before each step) or `keep` (the previous step's stay allocated, counted in "
         "`base_bytes`, and the new ones accumulate into them)", added=5, off="none", label="grads {}",
         short="grads {}"),
    Axis("retain_graph", "Call backward(..., retain_graph=True): the saved tensors stay alive until the step "
         "ends.", "Call backward(..., retain_graph=True).", parse_switch, {"*": "no"}, "text", "",
         "`yes`: the step calls `backward(..., retain_graph=True)`, so the saved tensors live until it ends",
         added=5, off="no", label="retain graph", short="retain", switch=True),
    # The model whose training step the loss runs in (its vocab and d_model are the model's), and that step's
    # optimizer and activation checkpointing; a loss alone has neither.
    Axis("model", "Models whose training step the loss runs in, comma-separated: a preset (cebench models), a "
         "Hugging Face config.json, or path/to/file.py:build / package.module:build; the model sets vocab and "
         "d_model.", "Model whose training step the loss runs in: a preset (cebench models), a config.json, or "
         "file.py:build / package.module:build.", parse_models, {"*": "none"}, "text", "",
         "the model whose training step the loss ran in (a preset, a config.json path or a build); `none`: the "
         "loss alone", added=6, off="none", metavar="MODEL", label="{}", short="{}"),
    Axis("optimizer", "Optimizers of the model's step: none, sgd, adamw (torch.optim's, default settings); with "
         "--model.", "Optimizer of the model's step: none, sgd or adamw (with --model).", parse_optimizers,
         {"*": "adamw"}, "text", "", "`none`, `sgd` or `adamw` (torch.optim's, default settings): the optimizer "
         "step of a `model` row; `none` for the loss alone", added=6, off="none", label="{}", short="{}"),
    Axis("activation_checkpointing", "Activation checkpointing of the model's blocks: none, blocks (each block "
         "under torch.utils.checkpoint, non-reentrant); with --model.", "Activation checkpointing: none or blocks "
         "(with --model).", parse_checkpointing, {"*": "none"}, "text", "", "`none` or `blocks` (each block of the "
         "model under `torch.utils.checkpoint`, non-reentrant)", added=6, off="none", label="checkpointing {}",
         short="ac {}"),
)
MODEL_AXES: tuple[str, ...] = ("model", "optimizer", "activation_checkpointing")  # a point with a model only
BY_NAME: dict[str, Axis] = {a.name: a for a in AXES}
SEMANTICS: tuple[Axis, ...] = tuple(a for a in AXES if a.loss_only)  # the loss's semantics, padding included
FEATURES: tuple[Axis, ...] = tuple(a for a in AXES if a.keyword)  # those a variant must take as keywords
# What a figure's x axis can run along: the numeric axes (ce_chunk is a line's own).
X_AXES: tuple[str, ...] = tuple(a.name for a in AXES if a.kind in ("int", "float") and not a.chunked_only)


def semantics_label(values: Mapping[str, object]) -> str:
    """'25% ignored · softcap 30' for a point's (or a row's) semantics that are not off; ''
    when every one is off. A missing or empty value counts as off."""
    labels = []
    for axis in SEMANTICS:
        value = values.get(axis.name)
        if axis.is_off(value):
            continue
        labels.append(axis.label.format(float(value) if axis.kind == "float" else value))
    return " · ".join(labels)
