"""The benchmarks' comparison math, on hand-computed cases."""

from __future__ import annotations

import pytest

from livethink.eval.compare import t_interval


def test_t_interval_hand_computed():
    # [1, 2, 3]: mean 2, sample sd 1, t(0.975, 2) = 4.302653 -> half-width 4.302653 / √3 = 2.484138
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and low == pytest.approx(2 - 2.484138, abs=1e-6) and high == pytest.approx(2 + 2.484138, abs=1e-6)
    assert t_interval([5.0]) == (5.0, None, None)  # one seed: no interval
    assert t_interval([0.3, 0.3]) == (0.3, 0.3, 0.3)
