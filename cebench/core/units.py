"""Human-readable units for bytes and durations, and parsing of byte sizes."""
from __future__ import annotations

import re
from fractions import Fraction

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


# The units `--unit` names (each spelled as printed), with their sizes in bytes.
BYTE_UNITS: dict[str, int] = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
                              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
AUTO = "auto"  # `--unit auto`: each number in the binary unit that reads best (the default)


def parse_unit(text: str | None, param: str = "unit") -> str | None:
    """`--unit`'s text → its spelling in `BYTE_UNITS` ('mib' → 'MiB'); None or 'auto' → None
    (each number in its own binary unit); anything else a `UsageError` naming `param`."""
    if text is None or text.strip().lower() == AUTO:
        return None
    found = {u.lower(): u for u in BYTE_UNITS}.get(text.strip().lower())
    if found is None:
        raise UsageError(f"'{text}' is not a unit of memory (choose from {', '.join(BYTE_UNITS)} or {AUTO})", param)
    return found


def format_bytes(n: float | None, unit: str | None = None) -> str:
    """`n` bytes as B/KiB/MiB/GiB/TiB with three significant digits; '–' for None. In a
    given `unit` (one of `BYTE_UNITS`): from 100 of it on a whole number with thousands
    separators ('27,955 MiB', '29,312,745,472 B'), below three significant digits."""
    if n is None:
        return "–"
    if unit is not None:
        value = n / BYTE_UNITS[unit]
        return f"{value:,.0f} {unit}" if abs(value) >= 99.95 or unit == "B" else f"{_sig3(value)} {unit}"
    for name, scale in _BINARY:
        if abs(n) >= scale * 0.9995:  # 1023.9 KiB reads as 1.00 MiB, not 1.02e+03 KiB
            return f"{_sig3(n / scale)} {name}"
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


def parse_percent(text: str, param: str) -> Fraction:
    """'1%', '1' or '0.5%' (a percentage) → the fraction 1/100, 1/100, 1/200. Exact, so a
    growth of exactly a tolerance is told apart from one a byte above it."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%?\s*", text)
    if not match:
        raise UsageError(f"'{text}' is not a percentage (examples: 1%, 0.5%, 10)", param)
    return Fraction(match.group(1)) / 100


def format_percent(share: Fraction | float) -> str:
    """1/20 → '5%', 9999/10000 → '99.99%': the digits a percentage given as text has (up to
    10 significant), never rounded to a value it is not ('100%' for 99.99%)."""
    return f"{float(share) * 100:.10g}%"
