"""The grid: defaults per device, chunked variants expanded over ce_chunk only."""
from collections import Counter

import pytest

from cebench.cli.options import build_grid
from cebench.config import DEFAULTS, parse_ints
from cebench.errors import UsageError


def test_default_cpu_sweep_covers_every_loss_variant_two_batches_and_two_chunk_sizes():
    points = build_grid("cpu", None, None, "50257", None, None, None, None, None, 0.9).expand()
    per_variant = Counter(p.variant for p in points)
    assert per_variant == {"dense": 2, "chunked": 4, "dense-compiled": 2, "chunked-compiled": 4}
    assert {p.batch for p in points} == {2, 8} and {p.ce_chunk for p in points} == {None, 256, 512}
    assert {p.dtype for p in points} == {"fp32"}
    # N = 1,024 tokens at batch 8: four chunks of 256, so chunking engages.
    assert max(p.tokens for p in points) >= 4 * min(DEFAULTS["cpu"].ce_chunk)


def test_cuda_defaults_are_the_seeds_1b_setting_in_bf16():
    grid = build_grid("cuda", None, None, None, None, None, None, None, None, 0.9)
    assert (grid.dtype, grid.d_model, grid.context, grid.vocab) == ("bf16", (2048,), (128,), (50257,))
    assert grid.batch == (4, 8, 16, 32) and grid.ce_chunk == (2048, 8192)


def test_non_chunking_variants_are_measured_once_per_shape():
    points = build_grid("cpu", "1", "8", "100", "8", "1,2,3", "dense,chunked", None, None, 0.9).expand()
    assert [(p.variant, p.ce_chunk) for p in points] == [("dense", None), ("chunked", 1), ("chunked", 2),
                                                         ("chunked", 3)]


def test_parse_ints_keeps_order_drops_duplicates_and_rejects_bad_values():
    assert parse_ints("8, 2,8,1_024", "--batch") == (8, 2, 1024)
    for text in ("0", "-1", "2.5", "", "a"):
        with pytest.raises(UsageError):
            parse_ints(text, "--batch")
