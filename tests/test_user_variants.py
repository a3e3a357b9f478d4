"""Bring your own loss: user variants by file or module, entry points, the CI story, and
the peers (torch's own F.linear_cross_entropy; Liger and CCE where they can run)."""
from __future__ import annotations

import csv
import re
import shlex
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cebench.analyze.verify import LOSS_CASES, verify_loss
from cebench.cli import app
from cebench.core import devices
from cebench.core.config import Config
from cebench.losses import inputs, variants
from cebench.losses.workloads import make_step
from cebench.run.runner import Settings, run
from conftest import FAST, in_child

GRID = ["--device", "cpu", "--batch", "1,4", "--context", "64", "--vocab", "3000", "--d-model", "32",
        "--ce-chunk", "64", "--repeats", "1"]

MY_LOSS = '''
import torch.nn.functional as F

def my_ce(h, weight, targets, ce_chunk):
    """Two-pass loss: logits in fp32, then cross-entropy."""
    logits = F.linear(h, weight).float()
    return F.cross_entropy(logits, targets)
'''
# A user's chunked loss, each chunk under torch.utils.checkpoint: what the README's CI gate guards.
CHUNKED_LOSS = '''
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _chunk_ce(h, weight, targets):
    return F.cross_entropy(F.linear(h, weight).float(), targets, reduction="sum")


def my_ce(h, weight, targets, ce_chunk):
    """Mean cross-entropy, ce_chunk rows at a time; each chunk's logits are recomputed in backward."""
    total = 0
    for i in range(0, h.shape[0], ce_chunk):
        rows = slice(i, i + ce_chunk)
        total = total + checkpoint(_chunk_ce, h[rows], weight, targets[rows], use_reentrant=False)
    return total / h.shape[0]
'''
# The regression a change might bring: the checkpointing dropped, every chunk's buffers kept alive for backward.
UNCHECKPOINTED = CHUNKED_LOSS.replace("checkpoint(_chunk_ce, h[rows], weight, targets[rows], use_reentrant=False)",
                                      "_chunk_ce(h[rows], weight, targets[rows])")
README = Path(__file__).resolve().parents[1] / "README.md"


def write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source))
    return path


def test_a_loss_in_a_file_is_swept_and_its_peak_is_what_the_allocator_says(registry, tmp_path):
    src = write(tmp_path / "mine.py", MY_LOSS)
    out = tmp_path / "r.csv"
    res = CliRunner().invoke(app, ["sweep", *GRID, "--variant", f"dense,{src}:my_ce", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = [r for r in csv.DictReader(out.open()) if r["variant"] == f"{src}:my_ce"]
    assert [(r["batch"], r["status"], r["ce_chunk"]) for r in rows] == [("1", "ok", "64"), ("4", "ok", "64")]
    fn = variants.get(f"{src}:my_ce").load()
    for row in rows:
        config = Config(variant=row["variant"], workload="loss", device="cpu", dtype="fp32",
                        batch=int(row["batch"]), context=64, vocab=3000, d_model=32, ce_chunk=64)
        x = inputs.make(config)
        step = make_step(fn, x, config)
        step.run()  # warm-up, as the sweep does
        step.prepare()
        assert int(row["peak_delta_bytes"]) == devices.get("cpu").peak(step.run, x.tensors()).peak_delta_bytes
        assert int(row["peak_delta_bytes"]) >= 2 * config.logits_fp32_bytes  # logits and their log-softmax


def test_declared_name_summary_and_a_loss_without_ce_chunk(registry, tmp_path):
    write(tmp_path / "declared.py", '''
        import cebench
        import torch.nn.functional as F

        @cebench.variant(name="my-dense", summary="my dense loss")
        def loss(h, weight, targets):
            return F.cross_entropy(F.linear(h, weight).float(), targets)
    ''')
    v = variants.resolve(f"{tmp_path / 'declared.py'}:loss")
    assert (v.name, v.summary, v.chunked, v.workload) == ("my-dense", "my dense loss", False, "loss")
    twin = variants.resolve("my-dense-compiled")
    assert twin.compiled and twin.load() is v.load() and twin.on_request
    result = run(Config(variant="my-dense", workload="loss", device="cpu", dtype="fp32",
                        batch=1, context=16, vocab=500, d_model=16, ce_chunk=None), FAST)
    assert result.status == "ok" and result.peak_delta_bytes == 3 * 16 * 500 * 4 + 8  # as dense


BAD = [
    ("nosuchmodule_xyz:fn", "cannot import nosuchmodule_xyz (ModuleNotFoundError"),
    ("{dir}/mine.py:nope", "has no attribute 'nope'"),
    ("{dir}/mine.py:NOT_CALLABLE", "int object is not callable"),
    ("{dir}/mine.py:two_args", "takes (h, weight) but a loss variant is called as fn(h, weight, targets, ce_chunk)"),
    ("{dir}/mine.py:returns_logits", "returned Tensor of shape (12, 16)"),
    ("{dir}/mine.py:detached", "does not require grad"),
    ("{dir}/mine.py:raises", "raised RuntimeError: boom on a tiny cpu problem"),
    ("{dir}/broken.py:fn", "cannot import {dir}/broken.py (ZeroDivisionError"),
    ("{dir}/missing.py:fn", "missing.py: no such file"),
]


@pytest.mark.parametrize("spec,message", BAD, ids=[b[1].split(" (")[0][:30] for b in BAD])
def test_a_bad_user_variant_is_one_line_exit_2_and_no_csv(registry, tmp_path, spec, message):
    write(tmp_path / "mine.py", MY_LOSS + '''
NOT_CALLABLE = 3

def two_args(h, weight):
    return h.sum()

def returns_logits(h, weight, targets, ce_chunk):
    return h @ weight.T

def detached(h, weight, targets, ce_chunk):
    return (h @ weight.T).sum().detach()

def raises(h, weight, targets, ce_chunk):
    raise RuntimeError("boom")
''')
    write(tmp_path / "broken.py", "1 / 0\n")
    spec, message = spec.format(dir=tmp_path), message.format(dir=tmp_path)
    out = tmp_path / "r.csv"
    for command in ("sweep", "predict", "verify"):
        args = [command, "--variant", spec] + (GRID + ["--out", str(out)] if command == "sweep" else
                                               ["--target", "cpu", "--out", str(out)] if command == "predict" else [])
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (command, res.output)
        assert res.stderr.count("\n") == 1 and message in res.stderr, (command, res.stderr)
        assert not out.exists()


def test_an_entry_point_variant_is_listed_and_swept(registry, tmp_path, monkeypatch):
    write(tmp_path / "shipped_loss.py", MY_LOSS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(variants, "_PENDING", {})
    ep = EntryPoint(name="shipped-ce", value="shipped_loss:my_ce", group=variants.GROUP)
    monkeypatch.setattr(variants, "entry_points", lambda group: [ep] if group == variants.GROUP else [])
    variants.discover()
    listing = CliRunner().invoke(app, ["variants", "--device", "cpu"])
    assert listing.exit_code == 0 and "shipped-ce" in listing.stdout
    assert "Two-pass loss" in listing.stdout and "entry point shipped_loss:my_ce" in listing.stdout
    assert "shipped-ce" in variants.defaults("loss")  # installed variants join the default sweep
    out = tmp_path / "r.csv"
    res = CliRunner().invoke(app, ["sweep", *GRID, "--variant", "shipped-ce", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert {r["variant"] for r in csv.DictReader(out.open())} == {"shipped-ce"}


def readme_gate() -> list[list[str]]:
    """The commands of the README's CI gate recipe (its first sh block), each as argv."""
    section = README.read_text().split("\n## Your own loss, and the CI gate\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README.md: ## Your own loss, and the CI gate has no sh block"
    return [words for line in block[1].replace("\\\n", " ").splitlines() if (words := shlex.split(line, comments=True))]


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.slow
def test_the_readmes_ci_gate_fails_a_loss_that_drops_its_checkpointing(registry, tmp_path, monkeypatch):
    """The README's recipe, its commands as written, in a user's project (tmp_path) whose
    loss is a chunked, checkpointed cross-entropy at the path the recipe names: the baseline,
    a CI run of the same loss (exit 0), then one of the loss without its checkpointing,
    which keeps every chunk's buffers for backward (exit 1, naming the variant). Each CI
    sweep is a process of its own, as in CI (the file imported as it is then); the baseline
    and `check` run in this one."""
    baseline, current, check = readme_gate()
    assert [c[:2] for c in (baseline, current, check)] == [["cebench", "sweep"]] * 2 + [["cebench", "check"]]
    out = baseline.index("--out")
    assert current[:out] + current[out + 2:] == baseline[:out] + baseline[out + 2:]  # the same sweep
    spec = option(baseline, "--variant")
    loss, chunk = tmp_path / spec.rpartition(":")[0], int(option(baseline, "--ce-chunk"))
    context, vocab = int(option(baseline, "--context")), int(option(baseline, "--vocab"))
    batches = [int(b) for b in option(baseline, "--batch").split(",")]
    assert all(chunk < b * context for b in batches)  # several chunks at every batch: what checkpointing saves
    loss.parent.mkdir(parents=True)
    write(loss, CHUNKED_LOSS)
    monkeypatch.chdir(tmp_path)  # the project's root, where the recipe runs

    def sweep(argv: list[str], in_process: bool = False) -> list[dict[str, str]]:
        if in_process:
            res = CliRunner().invoke(app, argv[1:])
            assert res.exit_code == 0, res.output
        else:
            code, _, stderr = in_child(argv[1:])
            assert code == 0, stderr
        rows = list(csv.DictReader(Path(option(argv, "--out")).open()))
        assert [(r["variant"], int(r["batch"]), r["status"]) for r in rows] == [(spec, b, "ok") for b in batches]
        return rows

    base = sweep(baseline, in_process=True)  # imports the loss here: the file as it is now
    sweep(current)
    same = CliRunner().invoke(app, check[1:])
    assert same.exit_code == 0 and "PASS" in same.stdout, same.stdout
    assert UNCHECKPOINTED != CHUNKED_LOSS
    write(loss, UNCHECKPOINTED)
    worse = sweep(current)  # --overwrite: the earlier run's rows are gone
    failed = CliRunner(env={"COLUMNS": "200"}).invoke(app, check[1:])
    assert failed.exit_code == 1 and "FAIL" in failed.stdout, failed.stdout
    assert [line.split()[:2] for line in failed.stdout.splitlines() if spec in line] == [["regressed", spec]] * 2
    # Each chunk's softmax stays alive for backward: more than one more chunk of fp32 logits at each batch.
    grown = [int(w["peak_delta_bytes"]) - int(b["peak_delta_bytes"]) for w, b in zip(worse, base, strict=True)]
    assert all(g > chunk * vocab * 4 for g in grown) and grown[0] < grown[1], grown


@pytest.mark.parametrize("case", LOSS_CASES[:3], ids=lambda c: c.name)
@pytest.mark.parametrize("name", ["torch-lce", "torch-lce-auto"])
def test_torch_lce_matches_the_float64_reference(name, case):
    check = verify_loss(name, case, "fp32")
    assert check.passed, check.errors


@pytest.mark.parametrize("shape", [(8, 128, 8192, 64, 256), (10, 300, 5000, 48, 128), (7, 100, 3001, 40, 97)])
def test_torch_lce_peak_is_one_chunk_of_logits_and_below_the_seeds(shape):
    batch, context, vocab, d_model, chunk = shape
    one_step = Settings(warmup=1, repeats=1)  # the peak is what is checked, not the time
    lce = run(Config(variant="torch-lce", workload="loss", device="cpu", dtype="fp32",
                     batch=batch, context=context, vocab=vocab, d_model=d_model, ce_chunk=chunk), one_step)
    seed = run(Config(variant="chunked", workload="loss", device="cpu", dtype="fp32",
                      batch=batch, context=context, vocab=vocab, d_model=d_model, ce_chunk=chunk), one_step)
    n = batch * context
    assert lce.status == seed.status == "ok" and n > 2 * chunk
    # One fp32 chunk of logits (reused in place), a chunk-sized scratch of d_model × 4 + 8 bytes
    # a row, 13 bytes a token of bookkeeping, and the gradients (computed in the forward).
    assert lce.peak_delta_bytes == chunk * vocab * 4 + chunk * (d_model * 4 + 8) + n * 13 + lce.lower_bound_bytes
    # The seed: three chunk-sized fp32 buffers, the gradients, and a 5,056-byte CPU RNG state
    # saved by each checkpointed chunk but the last (up to a few bytes of scalars).
    chunks = -(-n // chunk)
    floor = 3 * chunk * vocab * 4 + seed.lower_bound_bytes + (chunks - 1) * 5056
    assert floor <= seed.peak_delta_bytes <= floor + 64
    assert lce.peak_delta_bytes < seed.peak_delta_bytes / 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cut_cross_entropy_is_unsupported_on_cpu_with_an_actionable_reason(tmp_path):
    name = "cut-cross-entropy"
    reason = variants.get(name).unsupported_reason("cpu")
    assert reason.startswith("needs CUDA")
    if __import__("importlib").util.find_spec("cut_cross_entropy") is None:
        assert "pip install --no-deps cut-cross-entropy==" in reason
    res = CliRunner().invoke(app, ["sweep", *GRID, "--variant", f"dense,{name}", "--out", str(tmp_path / "r.csv")])
    assert res.exit_code == 0, res.output
    assert f"not run on cpu here: {name}: needs CUDA" in res.stderr
    assert {r["variant"] for r in csv.DictReader((tmp_path / "r.csv").open())} == {"dense"}
    verify = CliRunner().invoke(app, ["verify", "--variant", name])
    assert f"not checked (cannot run on this CPU): {name}" in verify.output
    assert verify.exit_code == 1 and "nothing was checked" in verify.output  # nothing checked is not a pass


def test_liger_runs_on_cpu_interpreted_or_says_what_to_install():
    reason = variants.get("liger-kernel").unsupported_reason("cpu")
    if __import__("importlib").util.find_spec("liger_kernel") is None:
        assert reason is not None and "pip install --no-deps liger-kernel==" in reason
    else:  # Triton's interpreter: cebench chose it when imported, before triton was
        assert reason is None
    assert "liger-kernel" not in variants.defaults("loss", "cpu")  # interpreted: too slow for a default sweep


def test_a_variant_declares_the_peer_code_that_sees_the_target(registry, tmp_path, monkeypatch):
    """Code that branches on its tensors' device takes its GPU branch in a prediction for a GPU
    only where its variant names its modules (`Variant.peer`): no list elsewhere to extend."""
    from dataclasses import replace

    from cebench.api import predict

    write(tmp_path / "branching_peer.py", '''
        import torch
        import torch.nn.functional as F

        def loss(h, weight, targets, *_):
            if h.device.type == "cuda":  # a GPU-only buffer: 1 MiB
                torch.empty(2**20, dtype=torch.uint8, device=h.device).fill_(0)
            return F.cross_entropy(F.linear(h, weight).float(), targets)
    ''')
    monkeypatch.syspath_prepend(str(tmp_path))
    plain = variants.register(variants.Variant("branching", "loss", "branching_peer:loss", chunked=False,
                                               compiled=False, summary="branches on its device"))
    grid = {"variant": "branching", "batch": 2, "context": 8, "vocab": 64, "d_model": 8, "dtype": "bf16"}
    (unseen,) = predict(target="h100-80gb", **grid)
    registry.REGISTRY["branching"] = replace(plain, peer=variants.Peer(("branching_peer",), "branching-peer"))
    (seen,) = predict(target="h100-80gb", **grid)
    assert (unseen.status, seen.status) == ("ok", "ok"), (unseen.error, seen.error)
    assert seen.peak_delta_bytes == 2**20 > unseen.peak_delta_bytes  # its GPU branch ran: its buffer is the peak
