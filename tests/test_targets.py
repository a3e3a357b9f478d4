"""Named GPU targets, the allocator's own terms, steady-state semantics (`--grads`,
`--retain-graph`), `predicted_floor_ms`, and one vocabulary for devices across commands."""
from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from cebench.api import fit
from cebench.cli import app
from cebench.core import devices, targets
from cebench.engine.points import predict
from cebench.engine.trace import predict_peak
from cebench.run.runner import run
from conftest import FAST, cpu_config

MIB = 2**20


def test_the_target_table():
    assert set(targets.NAMES) >= {"a100-40gb", "a100-80gb", "h100-80gb", "h200", "b200", "l40s", "rtx-4090"}
    for t in targets.TARGETS:
        d = devices.get(t.name)
        assert d.kind == "cuda" and d.is_target and d.granularity == 512 and t.sources
        if t.vendor == "nvidia":  # ROCm's hipBLAS kept its workspace outside the caching allocator (MI300X, 2024)
            assert t.workspace_bytes == (32 * MIB if t.capability[0] >= 9 else 4096 * 1024 * 2 + 16 * 1024 * 8)
        else:
            assert t.workspace_bytes == 0
        assert t.hbm_bytes_per_s > 1e11 and t.fp32_flops < t.bf16_flops and t.arch
    assert targets.CUBLAS_DEFAULT_WORKSPACE == 8_519_680
    assert devices.get("h100-80gb").capacity_bytes == 85_017_755_648  # deviceQuery's totalGlobalMem
    assert not devices.get("cuda").is_target and devices.get("cuda").workspace_bytes == 0
    names = {"NVIDIA A100-SXM4-80GB": "a100-80gb", "NVIDIA A100 80GB PCIe": "a100-80gb-pcie",
             "NVIDIA H100 80GB HBM3": "h100-80gb", "NVIDIA L40S": "l40s", "NVIDIA GeForce RTX 4090": "rtx-4090",
             "NVIDIA A100-SXM4-40GB": "a100-40gb", "NVIDIA H200": "h200", "NVIDIA B200": "b200",
             "NVIDIA H100 NVL": "h100-nvl", "AMD Instinct MI300X": "mi300x", "AMD EPYC 7B13": ""}
    assert {n: targets.match(n) for n in names} == names


def test_the_block_rule():
    cuda, cpu = devices.get("cuda"), devices.get("cpu")
    assert [cpu.block_bytes(n) for n in (0, 1, 513)] == [0, 1, 513]
    assert [cuda.block_bytes(n) for n in (0, 1, 513, 3 * MIB // 2)] == [0, 512, 1024, 3 * MIB // 2]
    assert cuda.block_bytes(501 * MIB) == 502 * MIB  # a 502 MiB segment, 1 MiB left: not split, all charged
    assert cuda.block_bytes(250 * MIB + MIB // 2) == 250 * MIB + MIB // 2  # 1.5 MiB left: split
    assert cuda.block_bytes(9 * MIB + 1) == 9 * MIB + 512  # below 10 MiB: a 20 MiB segment, always split


def test_a_named_target_adds_its_workspaces_to_the_base_and_a_roofline_estimate():
    point = replace(cpu_config(batch=4, context=32, vocab=3000, d_model=64), device="cuda", dtype="bf16")
    generic = predict(point)
    for name, threads in (("a100-80gb", 2), ("h100-80gb", 2)):
        row = predict(replace(point, device=name))
        ws = devices.get(name).workspace_bytes
        assert row.base_bytes == generic.base_bytes + threads * ws and row.peak_delta_bytes == generic.peak_delta_bytes
        assert row.target == name and generic.target == "" and row.device == name
        assert row.predicted_floor_ms == row.flops / devices.get(name).bf16_flops * 1e3 and row.time_ms_median is None
    sample = predict(replace(point, device="h100-80gb", variant="dense-sample", workload="sample"))
    assert sample.base_bytes - predict(replace(point, variant="dense-sample", workload="sample")).base_bytes == 32 * MIB
    assert predict(replace(point, device="h100-80gb", dtype="fp32")).predicted_floor_ms is None  # bf16/fp16 only


def test_fit_on_a_named_gpu_needs_no_budget_and_counts_the_workspaces():
    fitted = fit(target="h100-80gb", variant="dense", vocab=128256, d_model=4096, context=128)
    capacity = devices.get("h100-80gb").capacity_bytes
    (f,) = fitted.fits
    assert fitted.budget == capacity and fitted.limit == capacity * 19 // 20  # 5 % kept free by default
    assert 0 < f.batch and f.peak_bytes <= fitted.limit
    at = predict_peak(replace(f.config, batch=f.batch))
    assert f.peak_bytes == at.peak_bytes and at.base_bytes >= 2 * 32 * MIB  # the two workspaces are in it
    assert predict_peak(replace(f.config, batch=f.batch + 1)).peak_bytes > fitted.limit


@pytest.mark.parametrize("variant,ce_chunk", [("dense", None), ("chunked", 32)])
def test_grads_keep_measured_equals_predicted_and_adds_exactly_the_gradients(variant, ce_chunk):
    base = cpu_config(variant, batch=2, context=40, vocab=700, d_model=24, ce_chunk=ce_chunk)
    grads = (base.tokens + base.vocab) * base.d_model * 4
    rows = {}
    for semantics in ({}, {"grads": "keep"}, {"grads": "keep", "retain_graph": "yes"}, {"retain_graph": "yes"}):
        point = replace(base, **semantics)
        measured, predicted = run(point, FAST, calibrate=False), predict(point)
        assert measured.status == predicted.status == "ok", (measured.error, predicted.error)
        assert measured.base_bytes == predicted.base_bytes, semantics
        # Known residue: the checkpointed chunks under retain_graph make two 4-byte scalars the tracker misses
        residue = 8 if variant == "chunked" and semantics.get("retain_graph") else 0
        assert measured.peak_bytes - predicted.peak_bytes == residue, semantics
        rows[tuple(semantics.values())] = measured
    none, keep = rows[()], rows[("keep",)]
    # dense peaks in its backward, before the new gradients exist: the kept ones are all it adds
    assert keep.peak_bytes - none.peak_bytes == grads and keep.base_bytes - none.base_bytes == grads
    assert rows[("keep", "yes")].peak_bytes >= keep.peak_bytes


def one_line_exit_2(*args: str) -> str:
    """stderr of `cebench *args`, checked to be one line and exit code 2 (in process: what
    the installed command adds is tested in test_cli.py)."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output, result.stderr
    return result.stderr


@pytest.mark.parametrize("args,message", [
    (["predict", "--target", "h1000"], "--target: 'h1000' is not one of cpu, cuda, a100-40gb"),
    (["fit", "--target", "rtx4090", "--budget", "1GiB"], "--target: 'rtx4090' is not one of"),
    (["predict", "--grads", "kep"], "--grads: 'kep' is not one of none, keep"),
    (["sweep", "--device", "cpu", "--grads", "none,kep"], "--grads: 'kep' is not one of none, keep"),
    (["predict", "--retain-graph", "--workload", "sample"], "--retain-graph: needs the loss workload"),
    (["sweep", "--device", "cpu", "--retain-graph", "--workload", "loss,sample"], "--retain-graph: needs the loss"),
    (["sweep", "--device", "cpu", "--grads", "keep", "--variant", "dense-sample"], "--grads: needs the loss"),
    (["sweep", "--target", "h100-80gb"], "cebench predict --target h100-80gb"),
    (["fit", "--target", "cuda"], "--budget: is needed for target cuda"),
    (["explain", "--device", "cpu", "--target", "cpu"], "--target: another name for --device"),
    (["predict", "--target", "cuda", "--device", "cpu"], "--device: another name for --target"),
])
def test_bad_names_are_one_line_and_exit_2(args, message):
    assert message in one_line_exit_2(*args)


def test_each_command_takes_the_other_spelling_of_the_device(tmp_path):
    runner = CliRunner()
    shape = ["--batch", "1", "--context", "16", "--vocab", "300", "--d-model", "8", "--variant", "dense"]
    for args in (["predict", "--device", "cpu", *shape], ["predict", "--target", "a100-40gb", *shape],
                 ["variants", "--target", "cpu"], ["explain", "--device", "cpu", "--json", *shape],
                 ["explain", "--target", "h100-80gb", "--json", *shape]):
        extra = ["--out", str(tmp_path / "f.png")] if args[0] == "explain" else []
        result = runner.invoke(app, args + extra)
        assert result.exit_code == 0, (args, result.output)
    helps = {c: runner.invoke(app, [c, "--help"], env={"COLUMNS": "200"}).output
             for c in ("sweep", "variants", "explain", "predict", "fit")}
    assert all("--device" in helps[c] and "--target" not in helps[c] for c in ("sweep", "variants", "explain"))
    assert all("--target" in helps[c] and "--device" not in helps[c] for c in ("predict", "fit"))
    assert "h100-80gb" in helps["predict"] and "cebench targets" in helps["fit"]


def test_targets_command_lists_every_card_with_its_sources():
    result = CliRunner().invoke(app, ["targets", "--wide"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for t in targets.TARGETS:
        assert t.name in result.output and f"{t.capacity_bytes:,}" in result.output and t.sources[:30] in result.output
    assert "8,519,680 B" in result.output and "33,554,432 B" in result.output


def test_the_hidden_columns_note_names_only_the_options_the_command_has(at_width):
    """`targets` has --wide but no --columns: its note at 80 columns offers only --wide;
    `predict` has both and names both."""
    shown = " ".join(at_width(["targets"], 80).output.split())
    assert "(--wide shows every column)" in shown and "--columns" not in shown
    shown = at_width(["predict", "--target", "cpu", "--batch", "2", "--context", "8", "--vocab", "100", "--d-model",
                      "8", "--ce-chunk", "8"], 60).output
    assert "(--wide shows every column; --columns picks them)" in " ".join(shown.split())
