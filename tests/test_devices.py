"""The device backend: lookup, 'auto', and what each device owns, all checked on a CPU."""
import dataclasses
import subprocess
import sys

import pytest
import torch

from cebench.core import devices
from cebench.core.errors import UsageError

CPU, CUDA = devices.get("cpu"), devices.get("cuda")


def test_get_knows_every_device_whether_or_not_it_is_here():
    assert devices.DEVICES == ("cpu", "cuda")
    assert devices.get(" CUDA ") is CUDA and CPU.name == "cpu" and CUDA.name == "cuda"
    with pytest.raises(UsageError) as err:
        devices.get("tpu", param="target")
    assert err.value.param == "target" and "'tpu' is not one of cpu, cuda" in str(err.value)


def test_resolve_auto_and_a_missing_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.resolve("auto") is CPU and devices.resolve("cpu") is CPU
    with pytest.raises(UsageError) as err:
        devices.resolve("cuda")
    assert err.value.param == "device"
    assert err.value.message == f"no CUDA GPU is visible to this torch ({torch.__version__}); use cpu"
    with pytest.raises(UsageError, match="'gpu' is not one of auto, cpu, cuda"):
        devices.resolve("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.resolve("auto") is CUDA and devices.resolve("cuda") is CUDA


def test_each_device_s_figures():
    assert (CPU.repeats, CPU.warmup, CPU.isolate_by_default, CPU.nominal_flops) == (4, 1, False, 1e11)
    assert (CUDA.repeats, CUDA.warmup, CUDA.isolate_by_default, CUDA.nominal_flops) == (20, 3, True, 3e14)
    assert (CPU.granularity, CUDA.granularity) == (1, 512)
    assert (CPU.mem_method, CUDA.mem_method) == ("cpu-allocator-events", "cuda-max-memory-allocated")
    assert (CPU.events_method, CUDA.events_method) == ("cpu-allocator-events", "cuda-allocator-events")
    assert CPU.host_tensors_count and not CUDA.host_tensors_count
    assert [CPU.rate_probe_size(d) for d in ("fp32", "bf16")] == [1024, 256] and CUDA.rate_probe_size("fp32") == 4096


def test_a_named_target_is_one_more_instance():
    h100 = dataclasses.replace(CUDA, name="h100-80gb", granularity=2 * 1024 * 1024)
    assert isinstance(h100, devices.CUDA) and h100.granularity == 2 * 1024 * 1024 and h100.warmup == CUDA.warmup


def test_cpu_times_one_step_and_reads_its_peak_exactly():
    calls = []
    assert CPU.time_once(lambda: calls.append(1)) >= 0.0 and calls == [1]
    live = torch.zeros(100, 10)  # 4,000 bytes, seen through two views
    reading = CPU.peak(lambda: torch.empty(12_345, dtype=torch.float64), live=[live, live.t()])
    assert (reading.base_bytes, reading.peak_delta_bytes, reading.method) == (4000, 12_345 * 8, CPU.mem_method)
    assert CPU.live_bytes([live, live[3:]]) == 4000


@pytest.mark.parametrize("device", [CPU, CUDA], ids=lambda d: d.name)
def test_is_oom(device):
    assert device.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB"))
    assert device.is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4 EiB"))
    assert not device.is_oom(RuntimeError("shape mismatch")) and not device.is_oom(ValueError("can't allocate memory"))


def test_local_index_is_the_launcher_s_gpu():
    env = {"LOCAL_RANK": "1"}
    assert CPU.local_index(env) is None and CUDA.local_index(env) == 1
    assert CUDA.local_index({"SLURM_LOCALID": "2", "SLURM_STEP_NUM_TASKS": "4"}) == 2
    assert CUDA.local_index({}) is None


def test_what_torch_compile_needs(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert "C++ compiler" in CPU.compile_unsupported_reason()
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton → ImportError
    assert CUDA.compile_unsupported_reason() == "torch.compile on CUDA needs triton, which is not installed"


def test_the_module_does_not_import_torch():
    code = "import sys, cebench.core.devices as d; d.get('cuda'); d.resolve('cpu'); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


class _Cycle:
    """A tensor held by an object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me, self.tensor = self, torch.ones(4)


def test_a_frozen_heap_still_frees_what_its_steps_made_and_thaws_what_it_froze(monkeypatch):
    import gc
    import weakref

    from cebench.core import devices as devices_mod

    frozen_by_the_suite = gc.get_freeze_count()  # conftest freezes the suite's imports for good
    monkeypatch.setattr(devices_mod, "_FOR_GOOD", [False])  # as a process that never froze its heap
    gc.unfreeze()
    try:
        before = _Cycle()
        old = weakref.ref(before.tensor)
        with devices.frozen_heap():
            assert gc.get_freeze_count() > 0
            del before
            made = _Cycle()
            new = weakref.ref(made.tensor)
            del made
            with devices.frozen_heap():  # a nested block (a sweep's point) is the outer one
                CPU.free_cache()
            assert new() is None  # made in the block: collected between steps
            assert old() is not None and gc.get_freeze_count() > 0  # alive on entry: frozen until the block ends
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert old() is None
        gc.freeze()  # a process that froze its heap itself keeps it frozen, the block's objects too
        with devices.frozen_heap():
            pass
        assert gc.get_freeze_count() > 0
        gc.unfreeze()
        devices.freeze_for_good()  # one that says so is not even asked how much it froze
        monkeypatch.setattr(gc, "get_freeze_count", lambda: pytest.fail("counted the frozen objects"))
        with devices.frozen_heap():
            pass
        monkeypatch.undo()
        assert gc.get_freeze_count() > 0
    finally:
        devices_mod._FOR_GOOD[0] = True
        gc.collect()
        if frozen_by_the_suite:
            gc.freeze()


def test_a_device_says_whether_it_is_the_host_or_a_gpu():
    """Callers ask the device, never compare its kind's name."""
    from cebench.core import devices as devices_mod

    assert devices_mod.get("cpu").is_host and not devices_mod.get("cpu").is_gpu
    for name in ("cuda", "h100-80gb", "mi300x"):
        assert devices_mod.get(name).is_gpu and not devices_mod.get(name).is_host
