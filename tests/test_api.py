"""The Python API: the README's example runs as written, and the library names the
parameter at fault where the command line names the flag."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cebench
from cebench import api
from cebench.run.grid import GridOptions

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    section = README.read_text().split("## Your own loss, and the CI gate", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def test_the_readmes_pytest_example_passes_as_written(tmp_path):
    namespace: dict = {}
    exec(compile(readme_example(), "README.md", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0](tmp_path)
    assert (tmp_path / "peak.csv").read_text().count("\n") == 2  # header and the one row


def test_a_sweep_is_planned_when_made_and_measured_when_iterated(tmp_path):
    out = tmp_path / "s.csv"
    s = cebench.Sweep(GridOptions(variant="dense,chunked", batch="1,2", context=16, vocab=300, d_model=8,
                                  ce_chunk=16), device="cpu", repeats=1, out=out)
    assert [(p.variant, p.batch, p.ce_chunk) for p in s.points] == [
        ("dense", 1, None), ("chunked", 1, 16), ("dense", 2, None), ("chunked", 2, 16)]
    assert not out.exists()  # nothing written before the first point is measured
    rows = []
    for row in s:
        rows.append(row)
        assert out.read_text().count("\n") == len(rows) + 1  # each row is on disk when it is yielded
    assert [r.status for r in rows] == ["ok"] * 4 and s.written == rows


@pytest.mark.parametrize("call,param", [
    (lambda: cebench.sweep(batch=0, device="cpu"), "batch"),
    (lambda: cebench.sweep(ignore_frac=1.5, device="cpu"), "ignore_frac"),
    (lambda: cebench.sweep(device="tpu"), "device"),
    (lambda: cebench.sweep(resume=True, device="cpu"), "resume"),
    (lambda: cebench.predict(target="tpu"), "target"),
    (lambda: cebench.predict(batchsize=4), "batchsize"),
    (lambda: cebench.fit(2**30, context="64,128"), "context"),
    (lambda: cebench.check("a.csv", "b.csv", mem_tol="lots"), "mem_tol"),
])
def test_bad_input_is_a_usage_error_naming_the_parameter(call, param):
    with pytest.raises(cebench.UsageError) as info:
        call()
    assert info.value.param == param and str(info.value).startswith(f"{param}: ")


def test_predict_fit_and_check_return_values():
    (row,) = cebench.predict(variant="dense", target="cpu", batch=2, context=16, vocab=300, d_model=8)
    assert row.peak_delta_bytes == 3 * 32 * 300 * 4 + 8  # dense: three N × vocab fp32 buffers + two scalars
    fitted = cebench.fit(f"{row.peak_bytes}B", variant="dense", target="cpu", context=16, vocab=300, d_model=8,
                         headroom="0%")
    assert [f.batch for f in fitted.fits] == [2]  # batch 2 fits its own peak exactly, batch 3 does not


def test_ignored_targets_are_placed_by_the_seed_and_cost_dense_no_memory(tmp_path):
    from cebench.core.config import Config
    from cebench.losses import inputs

    point = Config(variant="dense", workload="loss", device="cpu", dtype="fp32",
                   batch=2, context=32, vocab=300, d_model=8, ce_chunk=None, ignore_frac=0.25)
    targets = inputs.make(point).targets
    assert int((targets == inputs.IGNORE_INDEX).sum()) == 16 and targets.equal(inputs.make(point).targets)
    plain = inputs.make(Config(variant="dense", workload="loss", device="cpu", dtype="fp32",
                               batch=2, context=32, vocab=300, d_model=8, ce_chunk=None)).targets
    kept = targets != inputs.IGNORE_INDEX
    assert targets[kept].equal(plain[kept])  # the same draws, some of them padded
    rows = cebench.sweep(variant="dense", device="cpu", batch=2, context=32, vocab=300, d_model=8,
                         ignore_frac="0,0.5", repeats=1, out=tmp_path / "i.csv")
    assert [r.ignore_frac for r in rows] == [0.0, 0.5]
    assert rows[0].peak_delta_bytes == rows[1].peak_delta_bytes
    frame = cebench.load(tmp_path / "i.csv")
    assert list(frame["ignore_frac"]) == [0.0, 0.5]


def test_a_swept_axis_an_older_csv_cannot_hold_is_refused_before_measuring(tmp_path):
    old = tmp_path / "old.csv"
    cebench.sweep(variant="dense", device="cpu", batch=1, context=8, vocab=50, d_model=4, repeats=1, out=old)
    lines = old.read_text().splitlines()  # the same file as a schema-3 release wrote it: no ignore_frac
    header = lines[0].split(",")
    drop = header.index("ignore_frac")
    old.write_text("\n".join(",".join(c for i, c in enumerate(line.split(",")) if i != drop) for line in lines) + "\n")
    before = old.read_text()
    with pytest.raises(cebench.UsageError) as info:
        cebench.Sweep(GridOptions(variant="dense", batch=1, context=8, vocab=50, d_model=4, ignore_frac="0.5"),
                      device="cpu", out=old)
    assert info.value.param == "out" and "ignore_frac" in str(info.value) and old.read_text() == before
    rows = cebench.sweep(variant="dense", device="cpu", batch=2, context=8, vocab=50, d_model=4, repeats=1, out=old)
    assert rows[0].status == "ok" and old.read_text().count("\n") == 3  # off-value rows still append there


def test_the_facades_predict_is_the_function_whatever_was_imported_before():
    """`cebench.predict` is the API's function, a plain function (its signature and help are
    the function's), whether or not the engine was imported first."""
    import inspect

    import cebench.engine.points  # noqa: F401
    import cebench.engine.trace  # noqa: F401

    assert cebench.predict is api.predict and inspect.isfunction(cebench.predict)
    assert "target" in inspect.signature(cebench.predict).parameters
    fresh = ("import cebench.engine.points, cebench.engine.trace, inspect, cebench; "
             "assert inspect.isfunction(cebench.predict) and cebench.predict is cebench.api.predict")
    assert subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True).returncode == 0
    (row,) = cebench.predict(variant="dense", target="cpu", batch=2, context=16, vocab=300, d_model=8)
    assert row.peak_delta_bytes > 0
