"""Correctness C: hand-written replies, adversarial ones included (rules in livethink/rewards/correctness.py)."""

from __future__ import annotations

import pytest

from livethink.rewards import check_correctness, correctness
from livethink.rewards.text import number_mentions
from tests.rewards.test_fixtures import (
    AVAILABLE_40,
    AVAILABLE_42,
    COMPARISON,
    COUNT_40,
    COUNT_42,
    DIALOGUE,
    GIFT_BOX,
    MADE_OF_NYLON,
    MATERIAL,
    MATERIAL_TWO_DOCS,
    PRICE_BIG,
    PRICE_ONE,
    PRICE_TWO,
    RETURN_WINDOW,
    SHIPPING,
    SOLD_OUT_40,
    WARRANTY,
    think,
)

CASES = [
    # --- prices and formats
    ("price exact", PRICE_ONE, "$76.80. Coupon: $10 off orders of $150 or more.", 1),
    ("price short decimals", PRICE_ONE, "It's $76.8 right now.", 1),
    ("price in dollars", PRICE_ONE, "76.80 dollars with the livestream discount.", 1),
    ("price with usd prefix", PRICE_ONE, "USD 76.80.", 1),
    ("price bare number is not usd", PRICE_ONE, "76.80 with the discount.", 0),
    ("price: list price is wrong", PRICE_ONE, "$96.00.", 0),
    ("price: was/now reads the now", PRICE_ONE, "Was $96.00, now $76.80.", 1),
    ("price: down from", PRICE_ONE, "$76.80, down from $96.00 (20% off).", 1),
    ("price thousands", PRICE_BIG, "$1,299.00. It ships in 5 days.", 1),
    ("price thousands no comma", PRICE_BIG, "$1299 right now.", 1),
    ("price thousands in dollars", PRICE_BIG, "1,299 dollars.", 1),
    ("price off by a cent is rounding", PRICE_ONE, "$76.81.", 1),
    ("price off by two cents is wrong", PRICE_ONE, "$76.82.", 0),
    ("coupon applied, coupon amount skipped", PRICE_TWO, "$143.60 for 2 with the $10 off coupon.", 1),
    ("coupon amount first, then total", PRICE_TWO, "With $10 off orders of $150 or more, 2 cost $143.60.", 1),
    ("deal first, then 'a total of'", PRICE_TWO, "With $10 off, a total of $143.60 for 2.", 1),
    ("forgot the coupon", PRICE_TWO, "$153.60 for 2.", 0),
    ("hallucinated extra price", PRICE_ONE, "$76.80, and shipping costs $5.99.", 0),
    ("hedging between two totals", PRICE_TWO, "$143.60 or maybe $153.60.", 0),
    ("intermediate arithmetic in the reply", PRICE_TWO, "$76.80 x 2 = $153.60, minus $10 = $143.60.", 0),
    ("dialogue reference price", DIALOGUE, "The navy one is $76.80. Coupon: $10 off orders of $150 or more.", 1),
    ("dialogue: other product's price", DIALOGUE, "$1,299.00.", 0),
    # --- units
    ("days", SHIPPING, "It ships in 3 days. Free shipping over $49.00.", 1),
    ("days in words", SHIPPING, "Ships in three days.", 1),
    ("right number, wrong unit (months for days)", SHIPPING, "It ships in 3 months.", 0),
    ("days without a unit", SHIPPING, "3.", 0),
    ("14 months for 14 days", RETURN_WINDOW, "You can return it within 14 months.", 0),
    ("two weeks = 14 days", RETURN_WINDOW, "Free returns within 2 weeks.", 1),
    ("14-day returns", RETURN_WINDOW, "It has a 14-day return window.", 1),
    ("warranty months", WARRANTY, "12 months. Free returns within 14 days.", 1),
    ("warranty one year", WARRANTY, "One year of warranty.", 1),
    ("warranty in days", WARRANTY, "12 days.", 0),
    # --- availability counts
    ("count", COUNT_40, "19 left. Coupon: $10 off orders of $150 or more.", 1),
    ("count after a size", COUNT_40, "In navy 40 we have 19 left.", 1),
    ("count as dollars", COUNT_40, "$19.", 0),
    ("count zero as sold out", COUNT_42, "Navy 42 is sold out, but navy 40 is in stock.", 1),
    ("count wrong", COUNT_40, "Only 5 left.", 0),
    # --- yes / no
    ("yes-no: no + sold out", AVAILABLE_42, "No, navy 42 is sold out. navy is in stock in size 40.", 1),
    ("yes-no: sold out without a no", AVAILABLE_42, "Sorry, it's sold out in 42, but navy 40 is in stock.", 1),
    ("yes-no: 'No, it's not sold out' contradicts itself", AVAILABLE_42, "No, it's not sold out.", 0),
    ("yes-no: wrong yes", AVAILABLE_42, "Yes! Free shipping over $49.00.", 0),
    ("yes-no: yes with count", AVAILABLE_40, "Yes, only 19 left in navy 40.", 1),
    ("yes-no: in stock without a yes", AVAILABLE_40, "It's in stock: 19 left.", 1),
    ("yes-no: no answer at all", AVAILABLE_40, "Free shipping over $49.00.", 0),
    ("sold-out question: no, not sold out", SOLD_OUT_40, "No, it's not sold out: 19 left.", 1),
    ("sold-out question: yes is wrong", SOLD_OUT_40, "Yes, it's sold out.", 0),
    ("material yes-no", MADE_OF_NYLON, "No, it's made of suede.", 1),
    ("material yes-no wrong", MADE_OF_NYLON, "Yes.", 0),
    # --- entities
    ("material entity", MATERIAL, "It's made of Suede. Free returns within 14 days.", 1),
    ("material wrong", MATERIAL, "Leather.", 0),
    ("material hedging with the other product's material", MATERIAL_TWO_DOCS, "Suede or mesh, I think.", 0),
    ("material with the other product named", MATERIAL_TWO_DOCS, "Suede. Free returns within 14 days.", 1),
    ("not stated when the doc states it", MATERIAL, "The docs don't say what it's made of.", 0),
    ("comparison: full title", COMPARISON, "The Pebble Trail Sneakers. The Pebble Trail Sneakers is $76.80.", 1),
    ("comparison: short name first", COMPARISON, "The Pebble Trail is cheaper than the Quartz Studio.", 1),
    ("comparison: names both, wrong one first", COMPARISON, "The Quartz Studio Face Serum costs more than the Pebble Trail Sneakers.", 0),
    ("comparison: wrong product", COMPARISON, "Quartz Studio Face Serum.", 0),
    ("comparison: no product named", COMPARISON, "The cheaper one, definitely.", 0),
    # --- not stated
    ("not stated", GIFT_BOX, "The docs don't say. Free returns within 14 days.", 1),
    ("no information", GIFT_BOX, "There's no information about a gift box.", 1),
    ("can't find", GIFT_BOX, "I can't find that in the product docs.", 1),
    ("guessing instead of not stated", GIFT_BOX, "Yes, it comes in a gift box.", 0),
    ("not stated plus a hallucinated number", GIFT_BOX, "Not stated, but it usually costs $4.99.", 0),
]


@pytest.mark.parametrize(("name", "task", "reply", "expected"), CASES, ids=[c[0] for c in CASES])
def test_correctness_cases(name, task, reply, expected):
    result = check_correctness(task, think(reply))
    assert int(result.correct) == expected, result


def test_enough_hand_written_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize(
    "completion",
    ["", "   \n ", "<think>\nthe answer is $76.80", "<think>\n$76.80\n</think>\n\n", "<think></think>"],
    ids=["empty", "whitespace", "unclosed-think", "empty-reply", "empty-think"],
)
def test_no_reply_is_wrong(completion):
    result = check_correctness(PRICE_ONE, completion)
    assert not result.correct and result.reason == "empty reply"


def test_missing_think_block_judges_the_whole_text():
    assert correctness(PRICE_ONE, "$76.80. Coupon: $10 off orders of $150 or more.") == 1.0


def test_reasons_are_explicit():
    assert "wrong unit" in check_correctness(SHIPPING, think("3 months")).reason
    assert check_correctness(PRICE_ONE, think("$76.80 plus $5.99 shipping")).unsupported == ("$5.99",)
    assert "docs state it" in check_correctness(MATERIAL, think("Not stated.")).reason
    assert "contradiction" in check_correctness(AVAILABLE_42, think("No, it's not sold out.")).reason


def test_number_mentions_units_and_formats():
    found = [(m.value, m.unit) for m in number_mentions("$1,299.00, 20% off, 3 days, 2 weeks, 1 year, 19 left, P0384, navy 42")]
    assert found == [(1299.0, "usd"), (20.0, "pct"), (3.0, "days"), (14.0, "days"), (12.0, "months"), (19.0, "items"), (42.0, None)]
