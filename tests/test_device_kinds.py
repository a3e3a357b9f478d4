"""No module compares device kinds by name but the device backend (`cebench.core.devices`,
`cebench.core.targets`): every other asks a `Device` (`is_host`, `is_gpu`, `card`,
`capability`) or the backend's helpers (`devices.is_meta`, `devices.on_host`). Read with
`ast`, so nothing is imported for it. And the attention kernel a prediction runs follows the
target's compute capability, not its kind."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cebench"
BACKEND = {PACKAGE / "core" / "devices.py", PACKAGE / "core" / "targets.py"}
KINDS = frozenset({"cpu", "cuda", "meta", "mps", "xpu"})
COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _kinds_named(node: ast.expr) -> list[str]:
    """The device kinds `node` names as string literals: itself, or the elements of a tuple,
    list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in KINDS else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [kind for element in node.elts for kind in _kinds_named(element)]
    return []


def _compares_a_kind(node: ast.AST) -> bool:
    """Whether `node` is an ==, !=, in or not in with a device kind's name as a string literal
    on either side (a literal passed as an argument, `torch.device("meta")`, is no comparison)."""
    return (isinstance(node, ast.Compare) and any(isinstance(op, COMPARISONS) for op in node.ops)
            and any(_kinds_named(side) for side in (node.left, *node.comparators)))


def kind_comparisons() -> list[str]:
    """'path:line: the comparison' for each comparison of a device kind by name outside the
    backend."""
    return [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}"
            for path in sorted(PACKAGE.rglob("*.py")) if path not in BACKEND
            for node in ast.walk(ast.parse(path.read_text(), str(path))) if _compares_a_kind(node)]


def test_no_module_but_the_backend_compares_device_kinds_by_name():
    found = kind_comparisons()
    assert not found, "device kinds compared by name (ask the Device, cebench.core.devices):\n" + "\n".join(found)


def test_the_scan_sees_each_form_of_comparison():
    """The rule's own check: each form it must catch is caught; an argument, another word, is not."""
    forms = {'x.type == "cuda"': True, '"cpu" != kind': True, 'kind in ("cpu", "mps")': True,
             'kind not in {"xpu"}': True, 'torch.device("meta")': False, 'name == "cudagraphs"': False}
    assert {form: any(map(_compares_a_kind, ast.walk(ast.parse(form)))) for form in forms} == forms


def test_the_attention_kernel_follows_the_targets_compute_capability():
    """Flash attention needs sm80 (every named target has it); below, a V100 (sm70) or a T4
    (sm75), made up here, runs the memory-efficient kernel in fp16 and fp32 (sm50 on) and
    the math fallback in bf16 (the efficient kernel's bf16 needs sm80), and a model there
    repeats its grouped key/value heads, which that kernel cannot take grouped."""
    from dataclasses import replace

    import torch

    from cebench.core import devices, targets
    from cebench.models import resolve_model
    from cebench.models.attention import EFFICIENT, FLASH, kernel_for, repeats_kv

    named = [devices.get(name) for name in targets.NAMES]
    assert all(d.capability >= (8, 0) for d in named)
    assert all(kernel_for(d.capability, torch.bfloat16, 32, 8, 64) == FLASH for d in named)
    h100 = targets.BY_NAME["h100-80gb"]
    for name, capability in (("v100", (7, 0)), ("t4", (7, 5))):
        card = replace(h100, name=name, model=name, capability=capability, names=(name,))
        old = replace(devices.get("cuda"), name=name, family="cuda", card=card)
        assert old.is_gpu and old.capability == capability
        assert kernel_for(old.capability, torch.float16, 32, 32, 64) == EFFICIENT
        assert kernel_for(old.capability, torch.float32, 32, 32, 64) == EFFICIENT
        assert kernel_for(old.capability, torch.bfloat16, 32, 32, 64) is None
        assert kernel_for(old.capability, torch.float16, 32, 8, 64) is None  # grouped: math, unless repeated
        assert repeats_kv(old.capability, torch.float16, 64) and not repeats_kv(h100.capability, torch.float16, 64)
        assert kernel_for((4, 0), torch.float32, 32, 32, 64) is None  # below sm50: neither kernel
        llama = resolve_model("llama-3.2-1b")  # 32 query heads, 8 key/value heads of 64
        attn = llama.build("meta", torch.float16, attention=old).body.blocks[0].attn
        assert attn.kernel == EFFICIENT and attn.repeat_kv
    body = resolve_model("llama-3.2-1b").build("meta", torch.float16, attention=devices.get("h100-80gb")).body
    assert body.blocks[0].attn.kernel == FLASH and not body.blocks[0].attn.repeat_kv
