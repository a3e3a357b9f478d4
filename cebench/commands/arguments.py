"""The checks the library calls make of their arguments, one per kind of argument (a
device's name, a file's path, a number of seconds, a byte budget, results to compare):
a value of the wrong type is a `UsageError` naming the argument, as the command line's
options are, never an error from inside cebench."""
from __future__ import annotations

import os
from fractions import Fraction
from numbers import Real
from pathlib import Path
from typing import TYPE_CHECKING

from cebench.core.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd


def _kind(value: object) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def name(value: object, param: str) -> str:
    """A device's or target's name ('cpu', 'cuda', 'h100'): a string."""
    if not isinstance(value, str):
        raise UsageError(f"must be a name such as 'cpu' or 'cuda', not {_kind(value)}", param)
    return value


def path(value: object, param: str) -> Path:
    """A file's path: a string or a path (`os.PathLike`)."""
    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"must be a file's path (a str or pathlib.Path), not {_kind(value)}", param)
    return Path(value)


def seconds(value: object, param: str = "point_timeout") -> float | None:
    """A time limit in seconds: a number, or None for none (`guard.time_limit` checks its range)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, Real)):
        raise UsageError(f"must be a number of seconds or None, not {_kind(value)}", param)
    return None if value is None else float(value)


def count(value: object, param: str) -> int:
    """A whole number (a batch, a number of steps): an int."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"must be a whole number, not {_kind(value)}", param)
    return value


def budget(value: object, param: str = "budget") -> int | None:
    """A memory budget in bytes: text as `--budget` takes it ('80GiB'), or a number of
    bytes, which `units.parse_bytes` checks as it checks a number without a unit (so that
    `80` is refused as '80' is, not taken for 80 bytes); None for none."""
    from cebench.core.units import parse_bytes

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UsageError(f"must be bytes (an int) or text such as '80GiB', not {_kind(value)}", param)
    return parse_bytes(str(value), param)


def tolerance(value: object, param: str) -> Fraction:
    """A tolerance: text as `--mem-tol` takes it ('1%', '0.5'; a percentage) or a `Fraction`."""
    from cebench.core.units import parse_percent

    if isinstance(value, Fraction):
        return value
    if not isinstance(value, str):
        raise UsageError(f"must be text such as '1%' or a Fraction, not {_kind(value)}", param)
    return parse_percent(value, param)


def results(value: object, param: str) -> pd.DataFrame:
    """Results to compare: a results CSV's path (loaded, `store.frame.load`) or a frame with
    the columns `load` returns."""
    import pandas as pd

    from cebench.store.frame import load
    from cebench.store.schema import ADDED, COLUMNS

    if isinstance(value, pd.DataFrame):
        missing = [c for c in COLUMNS if c not in value.columns and c not in ADDED]
        if missing:
            listed = ", ".join(missing[:4]) + (f" … ({len(missing)} in all)" if len(missing) > 4 else "")
            raise UsageError(f"the frame lacks the column(s) {listed} (cebench.load reads a results CSV "
                             "into a frame that has them)", param)
        return value
    return load(path(value, param))

