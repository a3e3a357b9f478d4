"""The CPU memory probe is exact, and the figures it gives are explainable."""
import pytest
import torch

from cebench.core import devices
from cebench.core.memory import running_peak, storage_bytes
from cebench.run.runner import run
from conftest import FAST, cpu_config

CPU = devices.get("cpu")


def test_probe_reports_one_known_allocation_exactly():
    reading = CPU.peak(lambda: torch.empty(12_345, dtype=torch.float64), live=[])
    assert reading.peak_delta_bytes == 12_345 * 8
    assert reading.method == CPU.mem_method


def test_probe_peak_is_the_high_water_mark_not_the_sum():
    def step():
        for _ in range(10):
            torch.empty(1000, dtype=torch.float32)  # each freed before the next
        keep = torch.empty(500, dtype=torch.float32)
        torch.empty(250, dtype=torch.float32)
        return keep

    assert CPU.peak(step, live=[]).peak_delta_bytes == 4000


def test_base_counts_live_storages_once():
    a = torch.zeros(100, 10)
    reading = CPU.peak(lambda: None, live=[a, a.t(), a[3:]])
    assert reading.base_bytes == storage_bytes([a]) == 4000
    assert reading.peak_bytes == 4000


def test_running_peak():
    assert running_peak([10, 20, -20, 5, -15]) == 30
    assert running_peak([-8, 4]) == 0


def test_dense_peak_is_three_fp32_logits():
    # Forward keeps the log-softmax output (N×V); backward adds the gradient of the
    # log-probabilities (N×V) and the log-softmax gradient (N×V) before the matmul
    # gradients are allocated: peak Δ = 3 × N × V × 4 bytes + two fp32 scalars.
    config = cpu_config("dense", batch=2, context=64, vocab=5000, d_model=64)
    result = run(config, FAST)
    assert result.status == "ok", result.error
    assert result.peak_delta_bytes >= result.logits_fp32_bytes == config.logits_fp32_bytes == 128 * 5000 * 4
    assert result.peak_delta_bytes == 3 * result.logits_fp32_bytes + 8
    assert result.base_bytes == (128 * 64 + 5000 * 64) * 4 + 128 * 8
    assert result.peak_bytes == result.base_bytes + result.peak_delta_bytes


def test_chunked_peak_is_below_dense_when_tokens_far_exceed_ce_chunk():
    dense = run(cpu_config("dense", batch=8, context=64, vocab=4000), FAST)
    chunked = run(cpu_config("chunked", batch=8, context=64, vocab=4000, ce_chunk=64), FAST)
    assert dense.status == chunked.status == "ok"
    # One chunk of 64 rows instead of 512: the same three (rows × vocab) fp32 buffers as
    # dense, but chunk-sized, plus the gradients of h and weight (the lower bound) and
    # under 64 KiB of per-chunk bookkeeping.
    chunk_logits = 64 * 4000 * 4
    assert chunked.peak_delta_bytes < dense.peak_delta_bytes / 2
    floor = 3 * chunk_logits + chunked.lower_bound_bytes
    assert floor <= chunked.peak_delta_bytes <= floor + 64 * 1024


def test_timing_columns_are_ordered():
    result = run(cpu_config("chunked", ce_chunk=32), FAST)
    assert result.repeats == FAST.repeats
    assert 0 < result.time_ms_min <= result.time_ms_p25 <= result.time_ms_median <= result.time_ms_p75
    assert result.tokens_per_s == pytest.approx(128 / (result.time_ms_median / 1e3))
    assert result.compile_s is None


@pytest.mark.slow
@pytest.mark.compile
def test_compiled_variant_memory_comes_from_allocator_events():
    config = cpu_config("dense-compiled", batch=4, context=64, vocab=3000, d_model=32)
    result = run(config, FAST)
    assert result.status == "ok", result.error
    assert result.mem_method == CPU.mem_method
    # Inductor fuses the softmax, but the (N, vocab) logits buffer is still allocated by
    # compiled code: the probe must see it (a dispatch-mode tracker sees nothing there).
    assert result.peak_delta_bytes >= result.logits_fp32_bytes
    assert result.compile_s is not None and result.compile_s >= 0
