"""The Mann-Whitney U test: is one set of step times stochastically larger than another?

Exact for small samples without ties (the null distribution of U counted by recursion),
the normal approximation with a tie correction otherwise. Pure Python: no SciPy needed.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

EXACT_MAX = 50  # samples per side up to which the exact distribution is counted


def _ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties given the mean of the ranks they span."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@cache
def _count(m: int, n: int, u: int) -> int:
    """Orderings of m x's and n y's in which x precedes y in exactly u of the m·n pairs."""
    if u < 0 or u > m * n:
        return 0
    if m == 0 or n == 0:
        return 1 if u == 0 else 0
    return _count(m - 1, n, u - n) + _count(m, n - 1, u)


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided p-value of H1: values of `y` tend to be larger than those of `x`.

    U counts the pairs (x_i, y_j) with y_j > x_i (ties count a half); a p-value below a
    threshold (cebench check uses 0.05) says `y` is larger beyond what chance explains."""
    m, n = len(x), len(y)
    if not m or not n:
        raise ValueError("both samples need at least one value")
    ranks = _ranks(list(x) + list(y))
    u = sum(ranks[m:]) - n * (n + 1) / 2  # pairs in which y is the larger
    ties = len(set(list(x) + list(y))) < m + n
    if not ties and m <= EXACT_MAX and n <= EXACT_MAX:
        total = math.comb(m + n, m)
        return sum(_count(m, n, k) for k in range(int(u), m * n + 1)) / total
    groups: dict[float, int] = {}
    for v in list(x) + list(y):
        groups[v] = groups.get(v, 0) + 1
    size = m + n
    variance = m * n / 12 * ((size + 1) - sum(t**3 - t for t in groups.values()) / (size * (size - 1)))
    if variance <= 0:
        return 1.0  # every value equal: no evidence either way
    z = (u - m * n / 2 - 0.5) / math.sqrt(variance)  # continuity-corrected
    return 0.5 * math.erfc(z / math.sqrt(2))
