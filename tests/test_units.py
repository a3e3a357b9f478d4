"""Human units: three significant digits, no exponents, the unit that reads best."""
import pytest

from cebench.core.errors import UsageError
from cebench.core.units import format_bytes, format_ms, format_ms_range, format_sig3, parse_bytes


@pytest.mark.parametrize("n,text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1018 * 1024, "1018 KiB"),
                                    (1023.9 * 1024, "1.00 MiB"), (589 * 2**20, "589 MiB"), (7 * 2**30, "7.00 GiB"),
                                    (None, "–")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize("ms,text", [(0.01234, "12.3 µs"), (7, "7.00 ms"), (99.96, "100 ms"), (1000, "1.00 s")])
def test_format_ms(ms, text):
    assert format_ms(ms) == text


def test_range_uses_the_unit_of_the_median():
    assert format_ms_range(1500, 2500, 2000) == "1.50–2.50"


@pytest.mark.parametrize("text,n", [("80GiB", 80 * 2**30), ("40 GB", 40 * 10**9), ("512MiB", 512 * 2**20),
                                    ("1e9", 10**9), ("1.5KiB", 1536)])
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text", ["lots", "80 parsecs", "0GiB", ""])
def test_parse_bytes_rejects(text):
    with pytest.raises(UsageError):
        parse_bytes(text)


@pytest.mark.parametrize("x,suffix,text", [(0.0574, "", "0.0574"), (5.812, "×", "5.81×"), (23.46, "×", "23.5×"),
                                           (999.6, "×", "1000×"), (50257.0, "×", "50,257×"), (None, "×", "–")])
def test_format_sig3(x, suffix, text):
    assert format_sig3(x, suffix) == text
