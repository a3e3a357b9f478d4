"""The releases of a peer that measured published figures, for the tests that predict them
(`results/releases.py`): a release pip cannot install here skips the test, saying why."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "results"))
import releases  # noqa: E402 - results/ is no package: on the path first

predict_with = releases.predict_with


def installed(dist: str, version: str) -> Path:
    """`dist==version`'s directory (`releases.installed`); the test skips where pip cannot
    install it."""
    try:
        return releases.installed(dist, version)
    except releases.Unavailable as exc:
        pytest.skip(str(exc))
