"""The sample workload: rows in the CSV with memory and time, and explainable peaks."""
import csv

from typer.testing import CliRunner

from cebench.cli import app
from cebench.run.runner import run
from conftest import FAST, cpu_config


def test_sample_rows_appear_in_the_csv_with_memory_and_time(tmp_path):
    out = tmp_path / "r.csv"
    res = CliRunner().invoke(app, ["sweep", "--device", "cpu", "--workload", "loss,sample", "--batch", "4",
                                   "--variant", "dense,chunked,dense-sample,chunked-sample",
                                   "--context", "32", "--vocab", "1000", "--d-model", "16", "--ce-chunk", "32",
                                   "--repeats", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = [r for r in csv.DictReader(out.open()) if r["workload"] == "sample"]
    assert [(r["variant"], r["ce_chunk"]) for r in rows] == [("dense-sample", ""), ("chunked-sample", "32")]
    for r in rows:
        assert r["status"] == "ok" and int(r["peak_delta_bytes"]) > 0 and float(r["time_ms_median"]) > 0
        assert int(r["lower_bound_bytes"]) == 128 * 8  # the (N,) int64 token ids


def test_chunked_sampling_peak_is_below_dense_when_tokens_far_exceed_ce_chunk():
    config = dict(workload="sample", batch=8, context=64, vocab=4000)  # N = 512
    dense = run(cpu_config("dense-sample", **config), FAST)
    chunked = run(cpu_config("chunked-sample", ce_chunk=64, **config), FAST)
    assert dense.status == chunked.status == "ok"
    assert chunked.peak_delta_bytes < dense.peak_delta_bytes
    # Dense holds logits / T and the probabilities: 2 × N × V × 4, plus the output ids.
    logits = 2 * dense.logits_fp32_bytes
    assert logits <= dense.peak_delta_bytes <= logits + 2 * dense.lower_bound_bytes
    # The vendored loop keeps the previous chunk's probabilities alive while the next
    # chunk's logits, logits / T and probabilities are computed: 4 chunk-sized buffers.
    assert chunked.peak_delta_bytes == 4 * 64 * 4000 * 4 + chunked.lower_bound_bytes


def test_sample_workload_rejects_a_loss_variant_and_bad_temperature(tmp_path):
    runner = CliRunner()
    for args, message in ((["--workload", "sample", "--variant", "dense"], "dense is not a sample variant"),
                          (["--workload", "nope"], "--workload: unknown 'nope'"),
                          (["--workload", "sample", "--temperature", "0"], "--temperature: 0.0 must be positive"),
                          (["--vocab", "1"], "--vocab: 1 is too small")):
        res = runner.invoke(app, ["sweep", "--device", "cpu", *args, "--out", str(tmp_path / "r.csv")])
        assert res.exit_code == 2 and message in res.output, (args, res.output)
        assert not (tmp_path / "r.csv").exists()
