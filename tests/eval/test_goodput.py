"""The goodput definition's counts and its Wilson interval (livethink/eval/goodput.py)."""

from __future__ import annotations

import pytest

from livethink.eval.goodput import ViewerOutcome, summarize, wilson_interval


def test_wilson_interval_by_hand():
    # z = 1.959964: p = 0.5, n = 10 -> centre 0.5, half-width z * sqrt(0.025 + z^2 / 400) / (1 + z^2 / 10)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.277533), abs=1e-6)  # 0 successes: not the point 0
    assert wilson_interval(10, 10) == pytest.approx((0.722467, 1.0), abs=1e-6)
    assert wilson_interval(0, 0) == (0.0, 1.0)  # nothing sent says nothing
    narrow, wide = wilson_interval(50, 100, 0.90), wilson_interval(50, 100, 0.99)
    assert wide[0] < narrow[0] < 0.5 < narrow[1] < wide[1]
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


def test_wilson_interval_matches_statsmodels():
    proportion = pytest.importorskip("statsmodels.stats.proportion")
    for k, n in [(0, 7), (3, 7), (17, 24), (99, 100), (1, 1000)]:
        assert wilson_interval(k, n) == pytest.approx(
            proportion.proportion_confint(k, n, method="wilson"), abs=1e-9
        )


def test_late_and_interval_in_the_summary():
    rows = [
        ViewerOutcome(200, 900.0, 1000.0, correct=True),  # good
        ViewerOutcome(200, 1001.0, 1000.0, correct=True),  # late
        ViewerOutcome(200, 1200.0, 1000.0, fallback=True),  # a late fallback is late too
        ViewerOutcome(429, 3.0, 1000.0),
    ]
    s = summarize(rows)
    assert (s.late, s.good, s.sent) == (2, 1, 4)
    d = s.to_dict()
    assert d["late"] == 2 and d["goodput"] == 0.25
    assert d["goodput_ci95"] == pytest.approx(list(wilson_interval(1, 4)))
