"""Helpfulness H = correct AND mentions a helpful fact (word boundaries, case-insensitive)."""

from __future__ import annotations

import pytest

from livethink.rewards import RubricJudge, check_helpfulness, helpfulness
from livethink.rewards.text import has_phrase
from tests.rewards.test_fixtures import AVAILABLE_42, GIFT_BOX, PRICE_ONE, PRICE_TWO, think

CASES = [
    ("correct + coupon", PRICE_ONE, "$76.80. Coupon: $10 off orders of $150 or more.", 1),
    ("correct + free shipping, any case", PRICE_ONE, "$76.80, and FREE SHIPPING over $49.00.", 1),
    ("correct, no fact", PRICE_ONE, "$76.80.", 0),
    ("wrong answer + fact", PRICE_ONE, "$96.00. Coupon: $10 off orders of $150 or more.", 0),
    ("hallucinated number + fact", PRICE_TWO, "$143.60 with the coupon, plus $5.99 shipping.", 0),
    ("alternative size", AVAILABLE_42, "No, it's sold out in 42, but you can get it in 40.", 1),
    ("no word-boundary false match", AVAILABLE_42, "No, sold out. We restock in 400 hours maybe.", 0),
    ("not stated + returns", GIFT_BOX, "The docs don't say, but there are free returns within 14 days.", 1),
]


@pytest.mark.parametrize(("name", "task", "reply", "expected"), CASES, ids=[c[0] for c in CASES])
def test_helpfulness_cases(name, task, reply, expected):
    assert helpfulness(task, think(reply)) == expected


def test_phrase_boundaries():
    assert has_phrase("Only 5 left!", "5 left")
    assert not has_phrase("Only 15 left!", "5 left")
    assert has_phrase("get $10 off today", "$10 off")
    assert not has_phrase("get $100 off today", "$10 off")
    assert has_phrase("a 14-day window", "14-day")


def test_rubric_verdict_details():
    verdict = RubricJudge().score(PRICE_ONE, think("$76.80. Coupon: $10 off orders of $150 or more."))
    assert verdict.correct and verdict.helpful and verdict.accepted
    assert verdict.details["helpful_match"] == "Coupon: $10 off orders of $150 or more" and verdict.details["asserted"] == "$76.80"
    assert check_helpfulness(PRICE_ONE, think("$76.80.")).reason == "correct but adds no helpful fact"
