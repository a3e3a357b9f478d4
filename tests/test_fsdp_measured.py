"""A model's step sharded with FSDP2 over real ranks (`--fsdp 2`, gloo on the CPU): measured
equal to its prediction to the byte, a rank's failure as a row, unsharded rows as before, and
the launcher's own promises (a rank that raises, dies, runs out of memory or hangs).

The rank functions below run in the ranks' processes, which import this module: it imports
nothing heavy."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cebench import api
from cebench.core.world import World
from cebench.run import ranks
from cebench.run.isolate import Child

# 2 blocks, d_model 64, 4 heads over 2 key/value heads, vocab 512, an untied head: every parameter divides evenly
# over 2 ranks, the step takes milliseconds.
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False}
FAILING = f"{Path(__file__).parent / 'data' / 'misbehaving.py'}:rank_1_loss"
GRID = {"batch": 2, "context": 32, "ce_chunk": 16, "fsdp": "1,2"}
# What AdamW's step allocates on a CPU outside the dispatcher, which a prediction of an unsharded step cannot see
# (tests/test_model_step.py): the peak of this model's body step, which is in AdamW's step. A sharded step's optimizer
# steps DTensors, whose dispatch the prediction sees.
ADAMW_CPU_RESIDUE = 12


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    from conftest import model_file  # here: the ranks' processes import this module, and nothing heavy with it

    return str(model_file(tmp_path_factory.mktemp("fsdp"), TINY))


@pytest.fixture(scope="module")
def rows(model, tmp_path_factory) -> dict[tuple[str, int], object]:
    """One sweep, its rows by (variant, fsdp): a loss that fails on rank 1, then chunked and dense, unsharded and
    over 2 ranks."""
    out = tmp_path_factory.mktemp("fsdp") / "measured.csv"
    measured = api.sweep(device="cpu", repeats=1, warmup=1, out=out, model=model, variant=f"{FAILING},chunked,dense",
                         **GRID)
    return {(r.variant, r.fsdp): r for r in measured}


@pytest.fixture(scope="module")
def predicted(model) -> dict[tuple[str, int], object]:
    return {(r.variant, r.fsdp): r for r in api.predict(target="cpu", model=model, variant="chunked,dense", **GRID)}


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["chunked", "dense"])
def test_two_gloo_ranks_measure_what_is_predicted_to_the_byte(rows, predicted, variant):
    m, p = rows[variant, 2], predicted[variant, 2]
    assert m.status == p.status == "ok", (m.error, p.error)
    for column in ("base_bytes", "peak_bytes", "model_state_bytes", "step_peak_bytes", "body_peak_bytes", "flops",
                   "n_params"):
        assert getattr(m, column) == getattr(p, column), column
    assert m.mem_method == "cpu-allocator-events" and m.note == "" and m.body_time_ms > 0
    assert m.threads == ranks.share(None, 2)  # each rank's share of this process's threads
    assert (m.base_bytes, m.peak_delta_bytes) == (838_612, {"chunked": 1_447_820, "dense": 1_418_248}[variant])


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["chunked", "dense"])
def test_unsharded_rows_are_measured_as_before(rows, predicted, variant):
    import torch

    m, p = rows[variant, 1], predicted[variant, 1]
    assert m.status == "ok" and m.base_bytes == p.base_bytes and m.model_state_bytes == p.model_state_bytes
    assert (m.peak_bytes - p.peak_bytes, m.body_peak_bytes - p.body_peak_bytes) == (0, ADAMW_CPU_RESIDUE)
    assert m.threads == torch.get_num_threads() and m.peak_bytes > rows[variant, 2].peak_bytes


@pytest.mark.slow
def test_fused_adamw_over_two_ranks_is_measured_as_predicted(model, tmp_path):
    grid = {**GRID, "fsdp": 2, "variant": "dense", "optimizer": "adamw-fused"}
    (m,) = api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "fused.csv", model=model, **grid)
    (p,) = api.predict(target="cpu", model=model, **grid)
    assert m.status == p.status == "ok", (m.error, p.error)
    assert (m.peak_bytes, m.body_peak_bytes, m.model_state_bytes) == (p.peak_bytes, p.body_peak_bytes,
                                                                      p.model_state_bytes)
    # on a GPU each rank's fused step counts (one per parameter) are on the device, one 512-byte block each;
    # for-each AdamW keeps them on the host
    gpu = {r.optimizer: r for r in api.predict(target="h100-80gb", model=model,
                                               **{**grid, "optimizer": "adamw,adamw-fused"})}
    params = 2 * 9 + 3  # each block's two norms and seven projections; the final norm, the embedding, the head
    assert gpu["adamw-fused"].model_state_bytes - gpu["adamw"].model_state_bytes == 512 * params


@pytest.mark.slow
def test_a_rank_that_raises_is_an_error_row_and_the_sweep_goes_on(rows):
    (name,) = {v for v, _ in rows if v not in ("chunked", "dense")}
    assert rows[name, 1].status == "ok"  # no process group: no rank 1
    failed = rows[name, 2]
    assert failed.status == "error" and failed.error == "rank 1: ValueError: rank 1 gives up"
    assert failed.peak_bytes is None and failed.threads == ranks.share(None, 2)
    assert rows["chunked", 2].status == rows["dense", 2].status == "ok"  # measured after it


# -- the launcher: fn(mesh) in each rank --

def world(mesh) -> tuple[int, int, str, int]:
    import torch
    import torch.distributed as dist

    return dist.get_rank(), mesh.size(), os.environ["RANK"], torch.get_num_threads()


def raise_on_1(mesh) -> None:
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("one rank's bad value")
    dist.barrier()  # waits for rank 1, which never comes: ended by the launcher


def abort_on_1(mesh) -> None:
    import torch.distributed as dist

    if dist.get_rank() == 1:
        os.abort()
    dist.barrier()


def oom_on_0(mesh) -> None:
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    dist.barrier()


def hang(mesh, folder: str) -> None:
    import torch.distributed as dist

    Path(folder, str(dist.get_rank())).write_text(str(os.getpid()))
    time.sleep(600)


@pytest.fixture(scope="module")
def answered() -> object:
    """Two ranks that say where they stand (the forkserver started, for the tests after it)."""
    return ranks.launch(world, (), World(fsdp=2), Child(threads=3), 60)


@pytest.mark.slow
def test_the_ranks_answer_by_rank_in_a_world_of_their_own(answered):
    assert answered.status == "ok", answered.error
    assert answered.value == [(0, 2, "0", 3), (1, 2, "1", 3)]


@pytest.mark.slow
@pytest.mark.parametrize("fn, status, error", [
    (raise_on_1, "error", "rank 1: ValueError: one rank's bad value"),
    (abort_on_1, "error", "rank 1's process died of SIGABRT (exit code -6)"),
    (oom_on_0, "oom", "rank 0: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
])
def test_the_first_rank_that_fails_ends_them_all(answered, fn, status, error):
    outcome = ranks.launch(fn, (), World(fsdp=2), Child(), 60)
    assert (outcome.status, outcome.error) == (status, error)


@pytest.mark.slow
def test_ranks_past_the_timeout_are_killed(answered, tmp_path):
    outcome = ranks.launch(hang, (str(tmp_path),), World(fsdp=2), Child(), 1.5)
    assert outcome.status == "timeout" and outcome.error == ("no result after 1.5 s (--point-timeout); its 2 rank "
                                                             "processes were killed")
    pids = [int(p.read_text()) for p in tmp_path.iterdir()]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_gpu_short_of_ranks_says_so(monkeypatch):
    from cebench.core import devices

    monkeypatch.setattr(devices.CUDA, "visible", lambda self: 1)
    assert devices.get("cuda").ranks_reason(2) == "2 ranks need 2 GPUs, one each; 1 visible here"
    assert devices.get("cuda").ranks_reason(1) is None and devices.get("cpu").ranks_reason(1) is None


def test_a_sharded_sweep_inside_a_process_group_is_refused(model, tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with pytest.raises(api.UsageError, match="^fsdp: a sharded point's ranks are processes the sweep starts"):
            api.Sweep(api.GridOptions(model=model, variant="dense", fsdp=2), device="cpu", out=tmp_path / "x.csv")
    finally:
        dist.destroy_process_group()


TIED_BUILD = '''
import torch
from torch import nn


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(300, 64)
        self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(2))

    def forward(self, ids):
        h = self.embed(ids)
        for layer in self.layers:
            h = torch.relu(layer(h))
        return h


def build():
    body = Body()
    return body, body.embed.weight
'''


@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "peaks"), [("fp32", (505_756, 450_728)), ("bf16", (252_956, 225_442))])
def test_a_users_build_with_a_tied_head_over_two_ranks_is_predicted_as_measured(tmp_path, dtype, peaks):
    """A user's build whose head is its embedding's weight: predicted over a fake world of 2 (it failed as "Couldn't
    swap Embedding.weight": `Module.to` swapped the fake parameters) to the byte of 2 gloo ranks, cast to bf16 too;
    and for a GPU target, whose dtype the build's parameters are cast to."""
    (tmp_path / "tied.py").write_text(TIED_BUILD)
    grid = {"model": f"{tmp_path / 'tied.py'}:build", "variant": "dense", "batch": 1, "context": 8, "fsdp": 2,
            "dtype": dtype}
    (m,) = api.sweep(device="cpu", repeats=1, warmup=1, out=tmp_path / "tied.csv", **grid)
    (p,) = api.predict(target="cpu", **grid)
    assert m.status == p.status == "ok", (m.error, p.error)
    assert (m.step_peak_bytes, m.body_peak_bytes) == (p.step_peak_bytes, p.body_peak_bytes) == peaks
    (gpu,) = api.predict(target="h100-80gb", **{**grid, "dtype": "bf16"})
    assert gpu.status == "ok", gpu.error
