"""bench/scale.py's interval for a median (`median_interval`, the sign test's): the order
statistics a binomial table gives, and its coverage, checked by sampling."""

from __future__ import annotations

import random
import statistics
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def scale(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import scale as module

    yield module
    sys.modules.pop("scale", None)


@pytest.mark.parametrize(
    # n -> k (1-based) of a 95% interval, from a binomial table: the k-th smallest and the
    # k-th largest; below 6 none reaches 95% and the whole range is given.
    ("n", "k"),
    [(5, 1), (6, 1), (8, 1), (9, 2), (10, 2), (15, 4), (20, 6), (25, 8)],
)
def test_the_order_statistics_of_a_binomial_table(scale, n, k):
    values = [float(x) for x in random.Random(n).sample(range(1000), n)]
    s = sorted(values)
    assert scale.median_interval(values) == (s[k - 1], s[n - k])


def test_it_covers_the_median_at_least_as_often_as_it_says(scale):
    rng = random.Random(7)
    # Pair ratios as noisy as the bench's: a skewed distribution whose median is known.
    true_median = statistics.median(rng.lognormvariate(0, 0.2) for _ in range(200_001))
    runs, covered = 2000, 0
    for _ in range(runs):
        lo, hi = scale.median_interval([rng.lognormvariate(0, 0.2) for _ in range(15)])
        covered += lo <= true_median <= hi
    assert covered / runs >= 0.95 - 0.015, covered / runs  # 96.5% for 15, less sampling
