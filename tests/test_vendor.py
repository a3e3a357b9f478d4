"""The system under test is vendored byte for byte."""
from pathlib import Path

import pytest

import cebench.vendor.fractus_ce as vendored

SEED = Path(__file__).resolve().parents[2] / "shared" / "seed" / "fractus_nn_ce.py"
MARKER = b"# ---- cebench: vendored body below ----\n"


@pytest.mark.skipif(not SEED.is_file(), reason="shared/seed is not beside this checkout")
def test_vendored_body_equals_seed():
    text = Path(vendored.__file__).read_bytes()
    header, sep, body = text.partition(MARKER)
    assert sep, "the origin header's marker line is missing"
    assert header.count(b"\n") <= 5, "the origin header should stay short"
    assert body == SEED.read_bytes()
