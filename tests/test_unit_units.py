"""`cebench.core.units` beyond test_units.py: durations in seconds, the unit boundaries,
TiB and negative sizes, ranges, the byte sizes `--budget` and `--mem-tol` accept, and `--unit`'s units."""
from __future__ import annotations

import pytest

from cebench.core.errors import UsageError
from cebench.core.units import (
    format_bytes,
    format_duration,
    format_ms,
    format_ms_range,
    format_sig3,
    parse_bytes,
    parse_unit,
)


@pytest.mark.parametrize("seconds,text", [
    (5e-7, "0.500 µs"), (0.0123, "12.3 ms"), (0.5, "500 ms"), (59.4, "59.4 s"),
    (59.5, "1 min 00 s"), (60, "1 min 00 s"), (119.6, "2 min 00 s"), (200, "3 min 20 s"), (3599.4, "59 min 59 s"),
    (3599.5, "1 h 00 min"), (3600, "1 h 00 min"), (7500, "2 h 05 min"),
])
def test_format_duration_rounds_into_the_next_unit_without_a_60(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("n,text", [
    (2**40, "1.00 TiB"), (1.5 * 2**40, "1.50 TiB"), (2**50, "1024 TiB"),  # no unit above TiB
    (1023.4, "1023 B"), (1023.5, "1.00 KiB"), (1023.3856, "1023 B"),  # 1.00 KiB from 0.9995 KiB on
    (-2048, "-2.00 KiB"), (-1, "-1 B"),  # a size that shrank
])
def test_format_bytes_boundaries_tib_and_negative(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize("ms,text", [(1e-4, "0.100 µs"), (0.99949, "999 µs"), (0.9996, "1.00 ms"), (1, "1.00 ms"),
                                     (999.4, "999 ms"), (999.6, "1.00 s"), (12_345_678, "12346 s")])
def test_format_ms_units(ms, text):
    assert format_ms(ms) == text


def test_a_range_takes_the_unit_of_the_value_it_is_shown_with():
    assert format_ms_range(0.5, 0.75, 0.6) == "500–750"  # µs, as format_ms(0.6)
    assert format_ms_range(900, 1100, 1000) == "0.900–1.10"  # s, as format_ms(1000)
    assert format_ms_range(None, 1, 1) == format_ms_range(1, None, 1) == format_ms_range(1, 2, None) == "–"


@pytest.mark.parametrize("x,text", [(0.00012345, "0.000123"), (-5.812, "-5.81"), (99.95, "100"), (1234.5, "1,234"),
                                    (0, "0.00")])
def test_format_sig3_more(x, text):
    assert format_sig3(x) == text


@pytest.mark.parametrize("text,n", [
    ("80gib", 80 * 2**30), ("1 GiB ", 2**30), ("  7 B ", 7), (" 4 b", 4),  # any case, spaces around
    ("1 kb", 1000), ("2K", 2000), ("3t", 3 * 10**12), ("1.5 GB", 1_500_000_000),  # decimal units
    ("1e3KiB", 1024 * 1000), (".5MiB", 2**19),  # an exponent, no leading digit
])
def test_parse_bytes_more(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text", ["5e", "-1GiB", "1,000", "1 2 GiB", "GiB", "1 GiBs"])
def test_parse_bytes_rejects_more_with_examples(text):
    with pytest.raises(UsageError, match="is not a byte size \\(examples: 80GiB, 40GB, 512MiB\\)"):
        parse_bytes(text)


@pytest.mark.parametrize("n,unit,text", [
    (25_165_825_024, "MiB", "24,000 MiB"), (25_165_825_024, "GB", "25.2 GB"), (25_165_825_024, "B", "25,165,825,024 B"),
    (617_558_024, "KiB", "603,084 KiB"), (512, "MiB", "0.000488 MiB"), (8, "B", "8 B"),
    (99.96 * 2**20, "MiB", "100 MiB"), (-2048, "KiB", "-2.00 KiB"),
])
def test_format_bytes_in_a_chosen_unit(n, unit, text):
    assert format_bytes(n, unit) == text


@pytest.mark.parametrize("text,unit", [("MiB", "MiB"), (" mib ", "MiB"), ("gb", "GB"), ("b", "B"), ("TiB", "TiB"),
                                       ("auto", None), ("AUTO", None)])
def test_parse_unit_takes_any_case(text, unit):
    assert parse_unit(text) == unit
    assert parse_unit(None) is None


@pytest.mark.parametrize("text", ["", "M", "mebibytes", "1MiB", "GiBs"])
def test_parse_unit_rejects_what_is_no_unit_naming_the_option(text):
    with pytest.raises(UsageError, match="is not a unit of memory \\(choose from B, KB, MB, GB, TB, KiB, MiB, GiB, "
                                         "TiB or auto\\)") as caught:
        parse_unit(text)
    assert caught.value.param == "unit"
