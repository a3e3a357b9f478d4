"""`largest_fitting`, the search behind `cebench fit`, on synthetic peaks: against a brute
force over every batch, convex piecewise-linear (the maximum of affine phases, as a step's
peak is) and any non-decreasing function, at the edges of its range, in few predictions."""
from __future__ import annotations

import math
import random
from collections.abc import Callable

from cebench.engine.points import largest_fitting


def brute_force(peak: Callable[[int], int], budget: int, cap: int) -> int:
    return max((b for b in range(1, cap + 1) if peak(b) <= budget), default=0)


def phases_peak(phases: list[tuple[int, int]]) -> Callable[[int], int]:
    """max over phases of base + slope × batch: convex, piecewise linear, non-decreasing."""
    return lambda b: max(base + slope * b for base, slope in phases)


class Counted:
    """`peak`, remembering the batches asked for."""

    def __init__(self, peak: Callable[[int], int]) -> None:
        self.peak, self.asked = peak, set()

    def __call__(self, b: int) -> int:
        assert isinstance(b, int) and b >= 1, b
        self.asked.add(b)
        return self.peak(b)


def test_convex_piecewise_linear_peaks_match_brute_force_in_few_predictions():
    rng = random.Random(0)
    for _ in range(300):
        peak = Counted(phases_peak([(rng.randint(0, 10**6), rng.randint(0, 5000))
                                    for _ in range(rng.randint(1, 4))]))
        cap, budget, guess = rng.randint(1, 3000), rng.randint(0, 10**7), rng.randint(-5, 3005)
        assert largest_fitting(peak, budget, guess, cap) == brute_force(peak.peak, budget, cap)
        assert all(1 <= b <= cap for b in peak.asked)
        assert len(peak.asked) <= 2 * math.ceil(math.log2(cap + 1)) + 4  # no worse than bisection's order


def test_a_linear_peak_is_solved_by_the_chord():
    peak = Counted(lambda b: 1000 + 37 * b)
    budget = 1000 + 37 * 1234 + 36  # batch 1234 fits, 1235 does not
    assert largest_fitting(peak, budget, 1, 4096) == 1234
    assert len(peak.asked) <= 6  # the ends, the guess and its neighbour, where the chord lands, and its neighbour


def test_a_guess_next_to_the_answer_asks_nothing_else():
    """Not even the batch limit, whose prediction may be the costliest (a chunked loss's chunks), nor batch 1."""
    for guess in (1234, 1235):
        peak = Counted(lambda b: 1000 + 37 * b)
        assert largest_fitting(peak, 1000 + 37 * 1234 + 36, guess, 4096) == 1234
        assert peak.asked == {1234, 1235}


def test_any_non_decreasing_peak_matches_brute_force():
    """Steps (a convex search's worst case) and plateaus: slower, but still the right batch."""
    rng = random.Random(1)
    for _ in range(200):
        cap = rng.randint(1, 2000)
        edges = sorted(rng.sample(range(1, cap + 1), min(cap, rng.randint(1, 12))))
        heights = sorted(rng.randint(0, 10**5) for _ in edges)
        flat = rng.random() < 0.5  # plateaus: equal peaks at neighbouring batches

        def peak(b: int, edges=edges, heights=heights, flat=flat) -> int:
            return max([0] + [h for e, h in zip(edges, heights, strict=True) if b >= e]) + (0 if flat else b)

        budget, guess = rng.randint(0, 10**5 + cap), rng.randint(-5, cap + 5)
        assert largest_fitting(peak, budget, guess, cap) == brute_force(peak, budget, cap)


def test_the_ends_of_the_range():
    grows = phases_peak([(100, 10)])  # peak(b) = 100 + 10 b
    assert largest_fitting(grows, 109, 5, 50) == 0  # not even batch 1 fits
    assert largest_fitting(grows, 110, 5, 50) == 1
    assert largest_fitting(grows, 600, 5, 50) == 50  # the cap fits: the cap, nothing beyond is asked
    assert largest_fitting(grows, 10**9, 5, 1) == 1
    assert largest_fitting(grows, 599, 5, 50) == 49
    for guess in (-3, 0, 1, 25, 49, 50, 51, 10**6):  # a guess anywhere, inside the range or not
        assert largest_fitting(grows, 355, guess, 50) == 25
    assert largest_fitting(lambda b: 7, 7, 3, 10) == 10 and largest_fitting(lambda b: 8, 7, 3, 10) == 0  # flat
