"""Human-readable units for bytes and durations, and parsing of byte sizes."""
from __future__ import annotations

import re

from cebench.core.errors import UsageError

_BINARY = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def _sig3(x: float) -> str:
    """Three significant digits, trailing zeros kept (7 → '7.00'); no exponent (1018 → '1018')."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:#.3g}".rstrip(".")


def format_bytes(n: float | None) -> str:
    """`n` bytes as B/KiB/MiB/GiB/TiB with three significant digits; '–' for None."""
    if n is None:
        return "–"
    for unit, scale in _BINARY:
        if abs(n) >= scale * 0.9995:  # 1023.9 KiB reads as 1.00 MiB, not 1.02e+03 KiB
            return f"{_sig3(n / scale)} {unit}"
    return f"{n:.0f} B"


def _time_unit(ms: float) -> tuple[str, float]:
    """The unit of a duration in ms and its factor: 999.6 ms reads as 1.00 s, not 1000 ms."""
    if ms >= 999.5:
        return "s", 1e-3
    if ms >= 0.9995:
        return "ms", 1.0
    return "µs", 1e3


def format_ms(ms: float | None) -> str:
    """A duration given in milliseconds, as µs, ms or s; '–' for None."""
    if ms is None:
        return "–"
    unit, scale = _time_unit(ms)
    return f"{_sig3(ms * scale)} {unit}"


def format_sig3(x: float | None, suffix: str = "") -> str:
    """`x` to three significant digits ('0.0574', '23.5'; '1,234' from 1,000 on) then
    `suffix` ('×' for a ratio); '–' for None."""
    if x is None:
        return "–"
    return (f"{x:,.0f}" if abs(x) >= 1000 else _sig3(x)) + suffix


def format_ms_range(low: float | None, high: float | None, like: float | None) -> str:
    """'low–high' in the unit `format_ms(like)` chose (all in milliseconds)."""
    if low is None or high is None or like is None:
        return "–"
    _, scale = _time_unit(like)
    return f"{_sig3(low * scale)}–{_sig3(high * scale)}"


def format_duration(seconds: float) -> str:
    """A duration given in seconds: as `format_ms` below a minute, then '3 min 20 s',
    '2 h 05 min'."""
    if seconds < 59.5:
        return format_ms(seconds * 1e3)
    if seconds < 3599.5:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min"


UNITLESS_MIN = 2**20  # bytes: a number without a unit below this is taken for a slip ('80' meant 80 GiB)


def parse_bytes(text: str, param: str | None = None) -> int:
    """'80GiB', '80 GB', '512MiB', '1e9' → bytes. Decimal (GB) and binary (GiB) units differ.
    A number without a unit below `UNITLESS_MIN` ('80') and anything under one byte are
    `UsageError`s (naming `param`), the first with a hint."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise UsageError(f"'{text}' is not a byte size (examples: 80GiB, 40GB, 512MiB)", param)
    value = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if not 1 <= value < float("inf"):
        raise UsageError(f"'{text}' must be a positive, finite byte size (at least 1 B)", param)
    if not match.group(2) and value < UNITLESS_MIN:
        raise UsageError(f"'{text.strip()}' would be {int(value):,} bytes: give a unit ({text.strip()}GiB, "
                         f"{text.strip()}GB, {text.strip()}MiB; B for bytes)", param)
    return int(value)
