"""The variant registry: name → implementation and its metadata.

A variant's function is given either as a callable or as an import path
``'package.module:function'`` that is imported on first use, so listing, parsing and
`--help` never import torch. Adding a variant is one `register` call; its compiled twin
is `compiled(base)`.

Besides the built-in variants, `resolve` accepts what a user names on the command line:
``package.module:function`` or ``path/to/file.py:function`` (see `cebench.losses.contract`), and
any name with ``-compiled`` appended (``torch-lce-compiled``, ``my.mod:ce-compiled``) for
its `torch.compile`d twin. Installed packages ship variants through the entry-point group
``cebench.variants`` (entry-point name = variant name, value = ``module:function``): they
are discovered at start-up and imported when first used.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, cast

from cebench.core import devices as devices_mod
from cebench.core import interpreter, pins
from cebench.core.axes import FEATURES
from cebench.core.config import LOGITS, LOSS, SAMPLE, Config
from cebench.core.devices import Device
from cebench.core.errors import UsageError, describe
from cebench.core.guard import user_code
from cebench.core.named import ByName
from cebench.losses import contract, loader

if TYPE_CHECKING:
    import torch

Fn = Callable[..., "torch.Tensor"]  # a loss or sample variant (`contract.LossFn`, `contract.SampleFn`)
GROUP = "cebench.variants"
COMPILED = "-compiled"
BUILT_IN = "built-in"
INTERPRETED = "Triton interpreter on a CPU"  # how a row's note starts when its kernels ran interpreted


@dataclass(frozen=True)
class Requires:
    """What a variant needs besides torch: importable `packages` (module → the distribution
    that installs it: a peer pinned in `cebench.core.pins` is named with the command that keeps
    torch), a minimum torch (`torch_attr` must exist in torch.nn.functional)."""

    packages: tuple[tuple[str, str], ...] = ()
    torch_attr: str | None = None
    torch_version: str | None = None

    def missing(self, imported: bool = False) -> list[str]:
        """Why it cannot run here for lack of software (empty when nothing is missing);
        `imported`: each package imported too (an installed one whose import fails is missing)."""
        reasons = [why for module, pip in self.packages if (why := _unimportable(module, pip, imported))]
        if self.torch_attr:
            import torch
            import torch.nn.functional as F

            if not hasattr(F, self.torch_attr):
                reasons.append(f"needs torch >= {self.torch_version} for F.{self.torch_attr} "
                               f"(this is torch {torch.__version__})")
        return reasons


def _unimportable(module: str, pip: str, imported: bool) -> str | None:
    """Why `module` cannot be imported here (None: it can): not installed (or a pinned peer's
    own needs, Triton, are not: `cebench.core.pins.NEEDS`), or (`imported`: it is imported now,
    after Triton's interpreter is chosen where there is no GPU) its import raises."""
    if importlib.util.find_spec(module) is None:
        return f"needs {module}: {pins.install(pip)}"
    if absent := [need for need in pins.NEEDS.get(pip, ()) if pins.absent(need)]:
        return f"{module} needs {', '.join(absent)}: {'; '.join(pins.install(need) for need in absent)}"
    if not imported:
        return None
    interpreter.enable()
    try:
        importlib.import_module(module)
    except Exception as exc:  # a broken install: its own error, one line
        return f"{module} is installed but its import fails ({describe(exc, 200)})"
    return None


def _named(path: str) -> object:
    """The object a built-in ``'module:attr'`` path names (its module imported now)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Peer:
    """A peer's code, as a prediction follows it on meta: the `modules` (name prefixes) whose
    Python sees the target GPU (`cebench.engine.device_view`), the distribution they come
    from (`dist`), and the releases of it whose code cebench's rules were checked against
    (`checked`: the installed one, and those that measured published figures; empty: none
    named, the code torch ships)."""

    modules: tuple[str, ...]
    dist: str
    checked: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False, repr=False)
class Variant(ByName):
    """One implementation under test.

    `fn` is the callable or its ``'module:attr'`` path. `chunked` variants take
    `ce_chunk` and are measured once per chunk size; the others once per shape.
    `compiled` variants are wrapped in `torch.compile` afresh per point; `compiled_parts`
    ones call `torch.compile`d functions their own module holds (compiled afresh per point
    too; a prediction runs each as inductor's code runs it). It runs on
    `devices` only (`devices_reason`: why, where that is not obvious). `baseline`
    marks the variant every other one of its workload is compared with ("vs dense").
    `supports` names the loss semantics (`cebench.core.axes.FEATURES`) it takes as
    keywords; a point asking for another is `unsupported`. `triton_kernels`: its kernels
    are Triton's, launched by its Python, which allocates their buffers with torch: a
    prediction follows that Python on meta, the launches skipped and its reads of data
    answered (`cebench.engine.trace`); `kernel_matmuls`: its matmuls run inside those
    kernels, where no FLOP counter sees them (its steps' `flops` stay empty). On the
    devices in `interpreted_on` its kernels run under an interpreter: it runs there, but
    its memory and time are not those of the hardware it was written for.
    `affine_in_rows`: its step is a fixed sequence of ops plus one identical iteration per
    `ce_chunk` rows (none without chunks), every buffer's bytes affine in the rows, so a
    prediction at any size is extrapolated from a few small ones
    (`cebench.engine.series`). `same_steps`: the
    ``'module:function'`` that maps a point to another variant's whose step is this one's,
    op for op (`traced_as`). `logits_fn`: what the variant is on the logits workload, where
    it has a meaning there (dense: `F.cross_entropy` of the given logits; Liger: its
    cross-entropy kernel): ``fn(logits, targets, **semantics)`` (`on`). `peer`: the peer's
    code it runs, which a prediction shows the target (`Peer`; every registered variant's is
    shown it: `peer_modules`). `on_vocab_shards`: the semantics it takes where the head weight
    is split over the vocabulary (--tp), running on the shards themselves (its `shards_fn`
    there where it has one); None: there it runs on the weight all-gathered whole
    (`cebench.losses.vocab_shards.form`). `hidden`: cebench's own, never named by a user nor
    listed (the body step's stand-in loss, `BODY`). `spec`: what `resolve` was given to make
    it ('': its name), by which it travels to another process (pickled, it is resolved there
    again: a user's function lives in the process that loaded it).
    """

    name: str
    workload: str
    fn: Fn | str
    chunked: bool
    compiled: bool
    summary: str
    compiled_parts: bool = False
    baseline: bool = False
    devices: tuple[str, ...] = ("cpu", "cuda")
    devices_reason: str = ""
    requires: Requires = Requires()
    origin: str = BUILT_IN
    on_request: bool = False  # made when named (a '-compiled' twin, a module:function): not in default sweeps
    on_request_on: tuple[str, ...] = ()  # devices where it runs, but only when named (too slow for a default)
    supports: frozenset[str] = frozenset()
    triton_kernels: bool = False
    kernel_matmuls: bool = False
    interpreted_on: tuple[str, ...] = ()
    affine_in_rows: bool = False
    same_steps: str | None = None
    logits_fn: Fn | str | None = None
    peer: Peer | None = None
    on_vocab_shards: frozenset[str] | None = None
    shards_fn: Fn | str | None = None
    hidden: bool = False
    spec: str = ""

    def __reduce__(self) -> tuple[Callable[[str], Variant], tuple[str]]:
        return _unpickled, (self.spec or self.name,)

    @property
    def workloads(self) -> tuple[str, ...]:
        """The workloads it runs: its own, and the logits workload where it has a `logits_fn`."""
        return (self.workload,) + ((LOGITS,) if self.logits_fn is not None and self.workload != LOGITS else ())

    def on(self, workload: str) -> Variant:
        """This variant as it runs on `workload` (one of `workloads`): on the logits workload,
        its `logits_fn` called with the logits, its targets and its semantics (no chunks, its
        step one op sequence whose buffers are affine in the rows)."""
        if workload == self.workload:
            return self
        if workload not in self.workloads:
            raise ValueError(f"{self.name} is not a {workload} variant")
        fn = cast(Fn, self.logits_fn)
        return replace(self, workload=LOGITS, fn=fn, chunked=False, kernel_matmuls=False, same_steps=None,
                       affine_in_rows=True, logits_fn=None)

    @property
    def compiles(self) -> bool:
        """Whether its step runs code `torch.compile` compiles (all of it, or its own parts)."""
        return self.compiled or self.compiled_parts

    def load(self) -> Fn:
        """The eager function (its module imported now, when `fn` is a path); on the logits
        workload, one called as a loss is (`fn(h, weight, targets, ce_chunk, **semantics)`,
        `h` the logits, `weight` and `ce_chunk` unused)."""
        fn = _loaded(self.fn)
        if self.workload != LOGITS:
            return fn
        return functools.wraps(fn)(lambda logits, weight, targets, ce_chunk=None, **semantics: fn(logits, targets,
                                                                                                 **semantics))

    def on_shards(self, fn: Fn) -> Fn:
        """Its function `fn` (`load`'s, or what was built of it) as it runs on a head split over
        the vocabulary: on the shards themselves where it takes them (`on_vocab_shards`; its
        `shards_fn` where it has one), else on the weight all-gathered whole
        (`vocab_shards.form`)."""
        from cebench.losses import vocab_shards

        own = fn if self.shards_fn is None else _loaded(self.shards_fn)
        return vocab_shards.form(own, self.on_vocab_shards is not None)

    def traced_as(self, config: Config) -> Config:
        """The point whose step is `config`'s, op for op (`same_steps`; else `config`)."""
        if self.same_steps is None:
            return config
        return cast("Callable[[Config], Config]", _named(self.same_steps))(config)

    def build(self, fresh: bool = True) -> Fn:
        """The callable to measure. A compiled variant starts from an empty Dynamo cache,
        so each point compiles once for its own shapes (no silent fallback to eager after
        the recompile limit) and `compile_s` means the same thing on every row. With
        `fresh=False` (correctness checks, which time nothing) the cache is kept and shapes
        are left to Dynamo's automatic dynamic shapes, so a few compiles serve many shapes."""
        fn = self.load()
        if not self.compiles:
            return fn
        interpreter.enable()  # torch.compile imports triton
        import torch

        from cebench.shims.torch_names import dynamo_reset

        if fresh:
            dynamo_reset()
        if self.compiled_parts:
            return fn
        return torch.compile(fn, dynamic=False) if fresh else torch.compile(fn)

    def unsupported_reason(self, device: Device | str, imported: bool = False) -> str | None:
        """Why this variant cannot run on `device` (its kind's; or the device a name names)
        here, or None when it can. Asked before a variant runs: one whose kernels run
        interpreted, or compiled (Dynamo imports triton), chooses Triton's interpreter first
        where there is no GPU. `imported`: its packages are imported to tell (`cebench
        variants`; else they are only found)."""
        device = device if isinstance(device, Device) else devices_mod.get(device)
        kind = device.kind
        if self.compiles or kind in self.interpreted_on:
            interpreter.enable()
        why = f": {self.devices_reason}" if self.devices_reason else ""
        reasons = [] if kind in self.devices else [f"needs {' or '.join(self.devices).upper()} (its kernels "
                                                   f"run on {', '.join(self.devices)} only{why})"]
        with user_code(self.name, "variant"):  # a package that exits while imported: one line
            reasons += self.requires.missing(imported)
        if not reasons and kind in self.interpreted_on:
            reasons += filter(None, [interpreter.unavailable_reason()])
        if reasons:
            return "; ".join(reasons)
        if not self.compiles:
            return None
        from cebench.shims.torch_names import dynamo_supported

        if not dynamo_supported():
            return "torch.compile (Dynamo) is not supported on this Python/platform"
        return device.compile_unsupported_reason()

    def lacks(self, config: Config) -> str | None:
        """Why this variant cannot run `config`'s loss semantics (the features it asks for
        that this variant does not take, on a vocabulary-split head where --tp splits it), or
        None when it can."""
        split = config.tp > 1 and self.on_vocab_shards is not None
        supports = self.on_vocab_shards if split and self.on_vocab_shards is not None else self.supports
        missing = [a for a in FEATURES if a.name in config.features and a.name not in supports]
        if not missing:
            return None
        asked = ", ".join(f"{a.flag} {a.text(config.features[a.name])}" for a in missing)
        return f"{self.name} does not support {asked}" + (f" on a vocabulary split by --tp {config.tp}" if split
                                                          else "")

    def interpreter_note(self, device: str) -> str:
        """'' or why this variant's numbers on `device` are not its hardware's."""
        if device not in self.interpreted_on:
            return ""
        return f"{INTERPRETED}: correct values, but memory and time are not a GPU's"


def _loaded(fn: Fn | str) -> Fn:
    """`fn`, or the function its ``'module:attr'`` path names (its module imported now)."""
    return fn if not isinstance(fn, str) else cast("Fn", _named(fn))


REGISTRY: dict[str, Variant] = {}
_PENDING: dict[str, str] = {}  # entry-point variants not imported yet: name → 'module:attr'


def peer_modules() -> tuple[str, ...]:
    """The module name prefixes of every registered variant's peer code (`Variant.peer`): the
    code a prediction shows the target."""
    return tuple(dict.fromkeys(m for v in REGISTRY.values() if v.peer is not None for m in v.peer.modules))


def checked_releases() -> dict[str, Peer]:
    """Each peer's top-level package → its `Peer`, for the registered variants that run one."""
    return {m.split(".")[0]: v.peer for v in REGISTRY.values() if v.peer is not None for m in v.peer.modules}


def register(variant: Variant) -> Variant:
    """Add `variant` to the registry (names are unique) and return it."""
    if variant.name in REGISTRY:
        raise ValueError(f"variant {variant.name!r} is already registered")
    if variant.compiles and variant.name.removesuffix(COMPILED) not in REGISTRY:
        raise ValueError(f"a compiling variant is named after its eager twin + {COMPILED!r}, not {variant.name!r}")
    REGISTRY[variant.name] = variant
    return variant


def compiled(base: Variant) -> Variant:
    """The `torch.compile`-wrapped twin of `base`, named '<base>-compiled'."""
    return replace(base, name=f"{base.name}{COMPILED}", compiled=True, baseline=False,
                   summary=f"torch.compile({base.name})", on_vocab_shards=None,
                   spec=f"{base.spec or base.name}{COMPILED}")


def from_callable(obj: object, name: str, origin: str, where: str) -> Variant:
    """A variant of a user's function (checked against `cebench.losses.contract`)."""
    a = contract.adapt(obj, name, where)
    fn = cast(Fn, a.fn)  # returns a tensor, as the contract says (`contract.smoke_test` checks it)
    return Variant(a.name, a.workload, fn, chunked=a.chunked, compiled=False, summary=a.summary, origin=origin,
                   supports=a.supports)


def discover() -> None:
    """Note the variants installed packages declare in the `cebench.variants` entry-point
    group (nothing is imported until one is used)."""
    for ep in entry_points(group=GROUP):
        if ep.name not in REGISTRY:
            _PENDING[ep.name] = ep.value


def _load_pending(name: str) -> Variant:
    value = _PENDING.pop(name)
    where = f"entry point {name} = {value}"
    return register(replace(from_callable(loader.import_object(value, where), name, f"entry point {value}", where),
                            name=name))


def resolve(spec: str) -> Variant:
    """The variant `spec` names (registering it if it is new): a registered or
    entry-point name, a ``module:function`` or ``file.py:function``, each optionally with
    ``-compiled`` appended. `UsageError` when it names nothing usable. Where a variant's name
    enters cebench (an option, a CSV, a point made by name, another process), it is resolved
    here, once; everything after holds the `Variant`."""
    if spec in _PENDING or spec in REGISTRY and not REGISTRY[spec].hidden:
        return get(spec)
    if spec.endswith(COMPILED) and len(spec) > len(COMPILED):
        base = resolve(spec[: -len(COMPILED)])
        return REGISTRY.get(spec) or register(replace(compiled(base), name=spec, on_request=True))
    if loader.is_spec(spec):
        where = f"--variant {spec}"
        variant = from_callable(loader.import_object(spec, where), spec, f"user: {spec}", where)
        if variant.name in REGISTRY:  # declared under a name already resolved
            return REGISTRY[variant.name]
        return register(replace(variant, on_request=True, spec=spec))
    known = ", ".join(names())
    raise UsageError(f"unknown '{spec}' (choose from {known}; or give module:function or file.py:function, and "
                     "append -compiled for a compiled twin)", "variant")


def _unpickled(spec: str) -> Variant:
    """The variant a pickled one was (`Variant.spec`, or its name): a registered one, a hidden
    one too, or the one `spec` names, resolved in this process."""
    return REGISTRY[spec] if spec in REGISTRY else resolve(spec)


def eager_twin(variant: Variant | str) -> Variant:
    """The variant a compiling one (or the one a name names) runs eagerly (its name less
    '-compiled'); any other, itself."""
    variant = variant if isinstance(variant, Variant) else resolve(variant)
    return resolve(variant.name[: -len(COMPILED)]) if variant.compiles else variant


def untrusted(variants: Iterable[Variant], device: Device) -> list[Variant]:
    """The variants among `variants` that `smoke_test` tries: those not built in (a user's,
    an entry point's) that can run on `device`."""
    return [v for v in variants if v.origin != BUILT_IN and v.unsupported_reason(device) is None]


def smoke_test(variants: Iterable[Variant], device: Device, *, guarded: bool = True) -> None:
    """Run each user variant among `variants` that can run on `device` once on a tiny problem
    there (built-in ones are trusted); `UsageError` for the first that breaks the contract.
    `guarded`: its exits are a `UsageError` too (`user_code`: this process is cebench's);
    without, in a child process of its own, they end that process, which its parent reports
    as a crash (`cebench.run.runner.smoke_test_isolated`)."""
    for v in untrusted(variants, device):
        with user_code(v.name, "variant") if guarded else contextlib.nullcontext():
            contract.smoke_test(v.load(), v.workload, v.chunked, device.name, f"--variant {v.name}")


def get(name: str) -> Variant:
    """The registered variant called `name` (KeyError if there is none): the registry's own
    look-up (a name from outside enters through `resolve`)."""
    if name in _PENDING:
        return _load_pending(name)
    return REGISTRY[name]


def own(config: Config) -> Variant:
    """The variant `config` holds (resolved where its name entered), as registered."""
    return cast(Variant, config.variant)


def of(config: Config) -> Variant:
    """The variant `config` holds, as it runs on `config`'s workload (`Variant.on`)."""
    return own(config).on(config.workload)


def listed(workload: str | None = None, *, installed: bool = False) -> list[Variant]:
    """The variants a user can name, in registration order, optionally of one workload. With
    a workload, or `installed`, the entry-point variants are imported (to learn theirs);
    else those not imported yet are left out (`names` names them)."""
    if workload is not None or installed:
        for name in list(_PENDING):
            _load_pending(name)
    return [v for v in REGISTRY.values() if not v.hidden and (workload is None or workload in v.workloads)]


def names(workload: str | None = None) -> list[str]:
    """The names of `listed` variants, and of the entry-point ones not imported yet."""
    return [v.name for v in listed(workload)] + list(_PENDING)


def defaults(workload: str, device: str | None = None) -> list[Variant]:
    """What a sweep of `workload` on a device of kind `device` measures without --variant:
    every registered variant of it (built-in and installed), not those made or measured on
    request."""
    return [v for v in listed(workload) if not v.on_request and device not in v.on_request_on]


def baseline(workload: str) -> Variant | None:
    """The variant `workload`'s others are compared with, if registered."""
    return next((v for v in REGISTRY.values() if workload in v.workloads and v.baseline), None)


_IMPL = "cebench.losses.builtin"
# What dense and Liger implement: every loss semantics that is a keyword today (a new one joins when they implement it).
ALL_FEATURES = frozenset({"softcap", "label_smoothing", "z_loss", "reduction"})
# torch's loss_parallel() takes neither label smoothing nor the log-sum-exp a z-loss needs.
_dense = register(Variant("dense", LOSS, f"{_IMPL}:dense_cross_entropy", chunked=False, compiled=False,
                          summary="F.linear + F.cross_entropy on fp32-upcast full logits (logits: F.cross_entropy "
                                  "of the given logits; --tp: under loss_parallel())", baseline=True,
                          supports=ALL_FEATURES, affine_in_rows=True, logits_fn=f"{_IMPL}:logits_cross_entropy",
                          on_vocab_shards=frozenset({"softcap", "reduction"})))
_chunked = register(Variant("chunked", LOSS, f"{_IMPL}:vendored_chunked_cross_entropy", chunked=True,
                            compiled=False, summary="vendored chunked_cross_entropy (checkpointed chunks)",
                            affine_in_rows=True))
register(compiled(_dense))
register(compiled(_chunked))
register(Variant("vocab-parallel", LOSS, "cebench.losses.vocab_shards:vocab_parallel_cross_entropy", chunked=True,
                 compiled=False, summary="Megatron-LM's vocab-parallel cross-entropy on each rank's vocabulary "
                                         "shard (--tp), checkpointed chunks", on_request=True,
                 supports=ALL_FEATURES, affine_in_rows=True, on_vocab_shards=ALL_FEATURES))
TORCH_LCE = Requires(torch_attr="linear_cross_entropy", torch_version="2.13")
LCE_FEATURES = frozenset({"label_smoothing", "reduction"})
# torch's linear cross-entropy branches on its input's device: shown the target, like a peer's code.
TORCH_LCE_CODE = Peer(("torch.nn.modules.linear_cross_entropy",), "torch")
register(Variant("torch-lce", LOSS, f"{_IMPL}:torch_linear_cross_entropy", chunked=True, compiled=False,
                 summary="F.linear_cross_entropy, LinearCrossEntropyOptions(batch_chunk_size=ce_chunk)",
                 requires=TORCH_LCE, supports=LCE_FEATURES, affine_in_rows=True, peer=TORCH_LCE_CODE))
register(Variant("torch-lce-auto", LOSS, f"{_IMPL}:torch_linear_cross_entropy_auto", chunked=False, compiled=False,
                 summary="F.linear_cross_entropy, LinearCrossEntropyOptions() (torch picks the chunks)",
                 requires=TORCH_LCE, on_request_on=("cpu",), supports=LCE_FEATURES,  # CPU: 2-row chunks, ~17x dense
                 same_steps=f"{_IMPL}:torch_lce_auto_steps", peer=TORCH_LCE_CODE))
# On a CPU Liger's kernels run under Triton's interpreter (tested for correctness; too slow for a default sweep).
register(Variant("liger-kernel", LOSS, f"{_IMPL}:liger_fused_linear_cross_entropy", chunked=False, compiled=False,
                 summary="Liger-Kernel's fused linear cross-entropy (Triton; picks its own chunks; logits: its "
                         "cross-entropy kernel)",
                 requires=Requires(packages=(("liger_kernel", "liger-kernel"),)),
                 on_request_on=("cpu",), triton_kernels=True, interpreted_on=("cpu",), supports=ALL_FEATURES,
                 logits_fn=f"{_IMPL}:liger_cross_entropy",
                 peer=Peer(("liger_kernel",), "liger-kernel", ("0.2.1", "0.4.1", "0.4.2", "0.6.0", "0.8.5"))))
register(Variant("cut-cross-entropy", LOSS, f"{_IMPL}:cut_cross_entropy", chunked=False, compiled=False,
                 summary="Apple's Cut Cross-Entropy, impl='cce' (Triton; no logits in memory; bf16/fp16 only)",
                 devices=("cuda",),
                 devices_reason="Triton's interpreter cannot run them on a CPU, as they call libdevice (log1p in "
                                "every log-sum-exp, tanh for a softcap), which it does not implement",
                 requires=Requires(packages=(("cut_cross_entropy", "cut-cross-entropy"),)),
                 triton_kernels=True, kernel_matmuls=True, supports=frozenset({"softcap", "reduction"}),
                 peer=Peer(("cut_cross_entropy",), "cut-cross-entropy", ("25.1.1",))))
register(Variant("hf-loss", LOSS, f"{_IMPL}:transformers_causal_lm_loss", chunked=False, compiled=False,
                 summary="transformers' own causal-LM loss: lm_head logits, ForCausalLMLoss (fp32 upcast)",
                 requires=Requires(packages=(("transformers", "transformers"),)), on_request=True,
                 supports=frozenset({"softcap"}), affine_in_rows=True))
_TORCHTUNE = "cebench.losses.torchtune"
register(Variant("torchtune", LOSS, f"{_TORCHTUNE}:chunked_output_loss", chunked=False, compiled=False,
                 summary="torchtune's CEWithChunkedOutputLoss: 8 output chunks, each upcast to fp32 for its CE",
                 on_request=True))
register(Variant("torchtune-compiled", LOSS, f"{_TORCHTUNE}:chunked_output_loss_compiled", chunked=False,
                 compiled=False, compiled_parts=True, on_request=True,
                 summary="torchtune's loss with compile=True: each chunk's upcast + CE compiled, not the projection"))
# The body step's loss (`cebench.models.training.body_config`): cebench's own, hidden.
BODY = register(Variant("(body)", LOSS, f"{_IMPL}:stand_in", chunked=False, compiled=False,
                        summary="the body step's stand-in loss: each row's h · weight[target] (none vocabulary-sized)",
                        affine_in_rows=True, on_vocab_shards=frozenset(),
                        shards_fn="cebench.losses.vocab_shards:stand_in", hidden=True))
register(Variant("dense-sample", SAMPLE, f"{_IMPL}:dense_sample", chunked=False, compiled=False,
                 summary="full fp32 logits, softmax(logits / T), one torch.multinomial", baseline=True,
                 affine_in_rows=True))
register(Variant("chunked-sample", SAMPLE, f"{_IMPL}:vendored_chunked_sample", chunked=True, compiled=False,
                 summary="vendored sample_tokens_chunked", affine_in_rows=True))
discover()

