"""The benchmarks' comparison math, on hand-computed cases."""

from __future__ import annotations

import pytest

from livethink.eval.compare import interpolate_at, pareto_front


def test_pareto_front():
    assert pareto_front([(100, 40), (120, 35), (80, 30), (80, 20)]) == [2, 0]  # (80, 20) and (120, 35) are beaten


def test_interpolate_at_on_a_piecewise_linear_curve():
    rft = {"name": "rft", "tokens": 200.0, "correctness": 0.40, "helpfulness": 0.30}
    mid = {"name": "length_penalty@8", "tokens": 150.0, "correctness": 0.30, "helpfulness": 0.20}
    end = {"name": "length_penalty", "tokens": 100.0, "correctness": 0.20, "helpfulness": 0.10}
    at_175 = interpolate_at(175.0, [rft, mid, end], "length_penalty")  # halfway between mid and rft
    assert at_175["correctness"] == pytest.approx(0.35) and at_175["helpfulness"] == pytest.approx(0.25)
    assert at_175["name"] == "length_penalty interpolated between length_penalty@8 and rft"
    assert interpolate_at(90.0, [rft, mid, end]) is end and interpolate_at(250.0, [rft, mid, end]) is rft  # the ends
