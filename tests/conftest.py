"""Shared helpers: small configs that run in milliseconds on a 2-core CPU."""
from __future__ import annotations

import pytest

from cebench.config import Config
from cebench.runner import Settings

FAST = Settings(warmup=1, repeats=2)


def cpu_config(variant: str = "dense", batch: int = 2, context: int = 64, vocab: int = 2000,
               d_model: int = 32, ce_chunk: int | None = None, workload: str = "loss",
               dtype: str = "fp32") -> Config:
    """A small fp32 CPU point."""
    return Config(variant, workload, "cpu", dtype, batch, context, vocab, d_model, ce_chunk)


@pytest.fixture
def registry(monkeypatch):
    """The variant registry, restored after the test (register test-only variants here)."""
    from cebench import variants

    monkeypatch.setattr(variants, "REGISTRY", dict(variants.REGISTRY))
    return variants
