"""The grid: defaults per device, chunked variants expanded over ce_chunk only."""
from collections import Counter

import pytest

from cebench.core.axes import BY_NAME, parse_ints
from cebench.core.errors import UsageError
from cebench.run.grid import GridOptions


def test_default_cpu_sweep_covers_every_loss_variant_two_batches_and_two_chunk_sizes():
    grid, unsupported = GridOptions(vocab="50257").grid("cpu").runnable()
    points = grid.expand()
    per_variant = Counter(p.variant for p in points)
    # torch-lce-auto only on request on a CPU: its automatic chunks are 2 rows there (17x dense's time)
    assert per_variant == {"dense": 2, "chunked": 4, "dense-compiled": 2, "chunked-compiled": 4, "torch-lce": 4}
    assert set(unsupported) == {"cut-cross-entropy"}  # needs a GPU; Liger runs interpreted, on request
    assert {p.batch for p in points} == {2, 8} and {p.ce_chunk for p in points} == {None, 256, 512}
    assert {p.dtype for p in points} == {"fp32"}
    # N = 1,024 tokens at batch 8: four chunks of 256, so chunking engages.
    assert max(p.tokens for p in points) >= 4 * min(BY_NAME["ce_chunk"].default("cpu"))


def test_cuda_defaults_are_the_seeds_1b_setting_in_bf16():
    grid = GridOptions().grid("cuda")
    assert (grid.dtype, grid.d_model, grid.context, grid.vocab) == (("bf16",), (2048,), (128,), (50257,))
    assert grid.batch == (4, 8, 16, 32) and grid.ce_chunk == (2048, 8192)


def test_non_chunking_variants_are_measured_once_per_shape():
    points = GridOptions(batch="1", context="8", vocab="100", d_model="8", ce_chunk="1,2,3",
                         variant="dense,chunked").grid("cpu").expand()
    assert [(p.variant, p.ce_chunk) for p in points] == [("dense", None), ("chunked", 1), ("chunked", 2),
                                                         ("chunked", 3)]


def test_dtype_is_a_sweep_axis():
    points = GridOptions(batch="1", context="8", vocab="100", d_model="8", variant="dense",
                         dtype="fp32,bfloat16,fp32").grid("cpu").expand()
    assert [p.dtype for p in points] == ["fp32", "bf16"]


def test_parse_ints_keeps_order_drops_duplicates_and_rejects_bad_values():
    assert parse_ints("8, 2,8,1_024", "--batch") == (8, 2, 1024)
    for text in ("0", "-1", "2.5", "", "a", "1,,2", " , ", "99999999999999999999", str(10**30)):
        with pytest.raises(UsageError):
            parse_ints(text, "--batch")


def test_a_grid_whose_logits_no_int64_can_count_is_refused():
    with pytest.raises(UsageError, match="the full fp32 logits would take"):
        GridOptions(batch="2147483647", context="2147483647", vocab="4").grid("cpu")


def test_ignore_frac_is_an_axis_off_by_default_and_checked():
    points = GridOptions(batch="1", context="8", vocab="100", d_model="8", variant="dense",
                         ignore_frac="0,0.25").grid("cpu").expand()
    assert [p.ignore_frac for p in points] == [0.0, 0.25]
    assert GridOptions(variant="dense").grid("cpu").expand()[0].ignore_frac == 0.0
    for text in ("1", "-0.1", "x", "0.5,"):
        with pytest.raises(UsageError) as info:
            GridOptions(ignore_frac=text).grid("cpu")
        assert info.value.param == "ignore_frac"


def test_an_unknown_axis_is_a_usage_error_naming_it():
    with pytest.raises(UsageError) as info:
        GridOptions(batchsize="8")
    assert info.value.param == "batchsize"


def test_a_weight_no_machine_holds_is_refused_before_any_work():
    """vocab × d_model in fp32 beyond 2⁶² bytes: one line (torch's storage-overflow traceback, before)."""
    with pytest.raises(UsageError, match="the fp32 weight would take 16,000,000,000,000,000,000 bytes") as caught:
        GridOptions(vocab=2 * 10**9, d_model=2 * 10**9, batch=1, context=1).grid("cuda")
    assert caught.value.param == "vocab × d_model"
