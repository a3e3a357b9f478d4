"""The Mann-Whitney U test of `cebench check --time-tol`: exact p-values against a brute
force over every assignment of ranks and against known values, the tie-corrected normal
approximation, and the symmetries any rank test has."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from cebench.analyze import stats
from cebench.analyze.stats import EXACT_MAX, mann_whitney_greater


def brute_force_p(x: list[float], y: list[float]) -> float:
    """P(U ≥ observed U) under H0, by counting every choice of the ranks that `x` takes."""
    m, n = len(x), len(y)
    pooled = sorted(x + y)
    observed = sum(b > a for a in x for b in y)
    hits = 0
    for picked in itertools.combinations(range(m + n), m):
        xs = [pooled[i] for i in picked]
        ys = [pooled[i] for i in range(m + n) if i not in picked]
        hits += sum(b > a for a in xs for b in ys) >= observed
    return hits / math.comb(m + n, m)


@pytest.mark.parametrize("x,y,p", [
    ([1, 2, 3], [4, 5, 6], 1 / 20),  # no overlap: the least p of 3 + 3, 1 / C(6, 3)
    ([4, 5, 6], [1, 2, 3], 1.0),  # y all smaller: no evidence at all
    ([1, 3], [2, 4], 1 / 3),  # U = 3 of 4; the counts of U = 0..4 are 1, 1, 2, 1, 1
    ([9.2, 9.6, 10.0, 10.9, 11.4], [9.4, 9.9, 10.8, 11.0, 11.6], 0.34523809523809523),  # interleaved
    ([10.0 + i for i in range(6)], [20.0 + i for i in range(6)], 1 / 924),  # check's own example
])
def test_exact_p_values_are_known_values(x, y, p):
    assert mann_whitney_greater(x, y) == pytest.approx(p, rel=1e-12)


def test_exact_p_values_match_a_brute_force_count():
    rng = random.Random(0)
    for _ in range(60):
        m, n = rng.randint(1, 6), rng.randint(1, 6)
        values = rng.sample(range(1000), m + n)  # distinct: no ties, so the exact path
        x, y = [float(v) for v in values[:m]], [float(v) for v in values[m:]]
        assert mann_whitney_greater(x, y) == pytest.approx(brute_force_p(x, y), rel=1e-12), (x, y)


def test_the_null_distribution_is_counted_whole_and_symmetric():
    for m, n in [(1, 1), (2, 3), (5, 5), (7, 4)]:
        counts = [stats._count(m, n, u) for u in range(m * n + 1)]
        assert sum(counts) == math.comb(m + n, m)
        assert counts == counts[::-1]  # U and m·n − U are equally likely
        assert counts == [stats._count(n, m, u) for u in range(m * n + 1)]
    assert stats._count(3, 3, -1) == stats._count(3, 3, 10) == 0


def test_ranks_share_ties():
    assert stats._ranks([10, 20, 20, 5]) == [2, 3.5, 3.5, 1]
    assert stats._ranks([7, 7, 7]) == [2, 2, 2]


@pytest.mark.parametrize("x,y,p", [
    # Reference values: scipy.stats.mannwhitneyu(x, y, alternative="less", method="asymptotic")
    # (with its continuity correction), which the tie correction here reproduces.
    ([1, 1, 2], [2, 3, 3], 0.055074462092973495),
    ([10.0, 10.0, 10.2, 10.4], [10.2, 10.6, 10.6, 11.0, 11.0], 0.02312571339591624),
])
def test_ties_use_the_tie_corrected_normal_approximation(x, y, p):
    assert mann_whitney_greater(x, y) == pytest.approx(p, rel=1e-9)


def test_large_samples_use_the_normal_approximation():
    x = [float(v) for v in range(EXACT_MAX + 10)]
    y = [v + 25.5 for v in x]  # no ties, but over EXACT_MAX a side
    assert mann_whitney_greater(x, y) == pytest.approx(1.2911185177850416e-10, rel=1e-9)  # scipy's, as above
    assert mann_whitney_greater(y, x) > 0.999


def test_equal_values_are_no_evidence_either_way():
    assert mann_whitney_greater([5, 5, 5], [5, 5]) == 1.0


def test_only_ranks_count():
    rng = random.Random(1)
    for _ in range(20):
        x = [rng.uniform(1, 2) for _ in range(rng.randint(2, 8))]
        y = [rng.uniform(1, 2.5) for _ in range(rng.randint(2, 8))]
        p = mann_whitney_greater(x, y)
        assert mann_whitney_greater([3 * v + 7 for v in x], [3 * v + 7 for v in y]) == pytest.approx(p)
        assert mann_whitney_greater(x[::-1], sorted(y)) == pytest.approx(p)  # order within a sample: none
        assert mann_whitney_greater(x, [v + 10 for v in y]) <= p  # y moved up: more evidence, never less


def test_swapping_the_samples_mirrors_the_p_value():
    """P(U ≥ u) + P(U ≤ u) = 1 + P(U = u); swapping x and y turns U into m·n − U."""
    rng = random.Random(2)
    for _ in range(20):
        values = rng.sample(range(100), 9)
        x, y = values[:4], values[4:]
        u = sum(b > a for a in x for b in y)
        both = mann_whitney_greater(x, y) + mann_whitney_greater(y, x)
        assert both == pytest.approx(1 + stats._count(4, 5, u) / math.comb(9, 4))


def test_an_empty_sample_is_refused():
    with pytest.raises(ValueError, match="at least one value"):
        mann_whitney_greater([], [1.0])
    with pytest.raises(ValueError, match="at least one value"):
        mann_whitney_greater([1.0], [])
