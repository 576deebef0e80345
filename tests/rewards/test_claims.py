"""The claim checker (livethink/rewards/claims.py, claim_check.py, doc_facts.py) on hand-made replies: every claim
about a product field must agree with the docs; a claim about a field the docs leave out is unsupported."""

from __future__ import annotations

import pytest

from livethink.data.schema import HelpfulFact, ProductDoc, Reference
from livethink.rewards import RubricJudge, check_correctness, helpfulness
from livethink.rewards.claim_check import check_claims
from livethink.rewards.claims import extract_claims
from livethink.rewards.doc_facts import parse_facts, task_facts
from tests.rewards.test_fixtures import (
    AVAILABLE_40,
    AVAILABLE_42,
    COMPARISON,
    DOC_SNEAKERS,
    GIFT_BOX,
    MATERIAL,
    PRICE_ONE,
    PRICE_TWO,
    SHIPPING,
    WARRANTY,
    make_task,
    think,
)


def test_doc_facts_read_every_line():
    f = parse_facts(DOC_SNEAKERS)
    assert (f.title, f.price, f.discount_pct, f.sale_price) == ("Pebble Trail Sneakers", 96.0, 20, 76.8)
    assert (f.coupon, f.bundle, f.material, f.origin, f.care) == ((10.0, 150.0), (3, 5), "suede", "italy", None)
    assert f.stock == (("navy", "40", 19), ("navy", "42", 0))
    assert (f.shipping_days, f.free_shipping_over, f.return_days, f.warranty_months) == (3, 49.0, 14, 12)
    # 2 × 76.80 = 153.60 ≥ 150 → coupon → 143.60; 3 × 76.80 = 230.40, bundle 5% → 218.88, coupon → 208.88
    assert (f.quote(1), f.quote(2), f.quote(3)) == (76.8, 143.6, 208.88)
    assert parse_facts(ProductDoc(product_id="u", title="Mug", text="A nice mug. Ships fast.")) is None


def test_subject_is_the_product_named_last_but_not_after_than():
    claims = extract_claims("The Pebble Trail is cheaper than the Quartz Studio. It ships in 3 days.",
                            task_facts(COMPARISON))
    # docs order: (serum, sneakers); both claims are about the sneakers (index 1), "than the Quartz" does not count
    assert [(c.field, c.subject) for c in claims] == [("comparison", 1), ("shipping", 1)]


# The issue's examples: "which is cheaper, the Zephyr Cloud Face Serum or the Orchid Cloud Face Serum?"
ZEPHYR = ProductDoc(product_id="T1", title="Zephyr Cloud Face Serum", text=(
    "[T1] Zephyr Cloud Face Serum (face serum)\nPrice: $32.00.\nCoupon: $15 off orders of $50 or more.\n"
    "Material: niacinamide.\nStock: pink 30 ml: 4 left.\nShipping: ships in 4 days, free shipping over $99.00.\n"
    "Returns: free returns within 7 days."))
ORCHID = ProductDoc(product_id="T2", title="Orchid Cloud Face Serum", text=(
    "[T2] Orchid Cloud Face Serum (face serum)\nPrice: $45.00.\nStock: red 50 ml: 9 left.\n"
    "Shipping: ships in 2 days.\nReturns: free returns within 30 days."))
CHEAPER = make_task("Which is cheaper right now, the Zephyr Cloud Face Serum or the Orchid Cloud Face Serum?",
                    Reference(kind="entity", value="Zephyr Cloud Face Serum", aliases=("Zephyr Cloud",)), "comparison",
                    facts=(HelpfulFact(fact="Coupon: $15 off orders of $50 or more.", match=("coupon", "$15 off")),
                           HelpfulFact(fact="Free shipping over $99.00.", match=("free shipping",))),
                    docs=(ORCHID, ZEPHYR))


@pytest.mark.parametrize(("reply", "c", "h", "status"), [
    ("The Zephyr Cloud Face Serum is cheaper.", 1, 0, None),
    ("The Zephyr Cloud Face Serum is cheaper. It is made of cotton and ships free worldwide with a lifetime warranty.",
     0, 0, "contradicted claim 'made of cotton'"),
    ("The Zephyr Cloud Face Serum is cheaper, and returns are never accepted.", 0, 0, "contradicted claim 'returns are never"),
    ("Zephyr Cloud Face Serum. coupon $15 off free shipping", 0, 0, "incomplete"),
    ("The Zephyr Cloud Face Serum is cheaper. Coupon: $15 off orders of $50 or more.", 1, 1, None),
    ("The Zephyr Cloud Face Serum is cheaper. Shipping is free on orders over $99.00.", 1, 1, None),
    ("The Zephyr Cloud Face Serum is cheaper. The Orchid Cloud Face Serum ships in 2 days.", 1, 0, None),
    ("The Zephyr Cloud Face Serum is cheaper. The Orchid Cloud Face Serum ships in 4 days.", 0, 0, "contradicted"),
    ("The Orchid Cloud Face Serum is cheaper.", 0, 0, None),
])
def test_the_issue_examples(reply, c, h, status):
    verdict = RubricJudge().score(CHEAPER, think(reply))
    assert (int(verdict.correct), int(verdict.helpful)) == (c, h), verdict.details
    if status:
        assert verdict.details["claims"][0].startswith(status), verdict.details["claims"]


def test_every_false_claim_of_a_reply_is_listed():
    reply = "The Zephyr Cloud Face Serum is cheaper. It is made of cotton and ships free worldwide with a lifetime warranty."
    claims = RubricJudge().score(CHEAPER, think(reply)).details["claims"]
    assert [c.split(":")[0] for c in claims] == [
        "contradicted claim 'made of cotton'", "incomplete claim 'ships free'", "unsupported claim 'worldwide'",
        "unsupported claim 'lifetime warranty'"]


CASES = [
    # (name, task, reply, C): one field at a time, against DOC_SNEAKERS
    ("true material", PRICE_ONE, "$76.80. They're made of suede.", 1),
    ("false material", PRICE_ONE, "$76.80. They're made of leather.", 0),
    ("unknown material word", PRICE_ONE, "$76.80. They're made of soft nubuck.", 0),
    ("negated material, true", MATERIAL, "Suede, not leather.", 1),
    ("true origin", PRICE_ONE, "$76.80. Made in Italy.", 1),
    ("false origin", PRICE_ONE, "$76.80. Made in China.", 0),
    ("care not stated", PRICE_ONE, "$76.80. You can put them in the washing machine.", 0),
    ("true colour", PRICE_ONE, "$76.80. They come in navy.", 1),
    ("colour not offered", PRICE_ONE, "$76.80. They also come in pink.", 0),
    ("true stock", PRICE_ONE, "$76.80. Only 19 left in navy in 40.", 1),
    ("false stock count", PRICE_ONE, "$76.80. Only 5 left in navy in 40.", 0),
    ("in-stock entry said sold out", PRICE_ONE, "$76.80. The navy 40 is sold out.", 0),
    ("true shipping", PRICE_ONE, "$76.80. It ships in 3 days.", 1),
    ("false shipping", PRICE_ONE, "$76.80. It ships in 5 days.", 0),
    ("weeks are 7 days", SHIPPING, "3 days. Free returns within 2 weeks.", 1),
    ("false return window", SHIPPING, "3 days. Free returns within 30 days.", 0),
    ("returns refused", SHIPPING, "3 days. This item is non-returnable.", 0),
    ("true warranty in years", SHIPPING, "3 days. There's a 1-year warranty.", 1),
    ("lifetime warranty", SHIPPING, "3 days. It has a lifetime warranty.", 0),
    ("true coupon", SHIPPING, "3 days. Coupon: $10 off orders of $150 or more.", 1),
    ("coupon without its condition", SHIPPING, "3 days. There's a $10 off coupon.", 0),
    ("coupon with the wrong threshold", SHIPPING, "3 days. Coupon: $10 off orders of $100 or more.", 0),
    ("coupon that applies to the quote", PRICE_TWO, "$143.60 for 2 with the $10 off coupon.", 1),
    ("free shipping without its threshold", SHIPPING, "3 days, with free shipping.", 0),
    ("free shipping, wrong threshold", SHIPPING, "3 days. Free shipping over $99.00.", 0),
    ("true bundle", SHIPPING, "3 days. Buy 3 or more and get an extra 5% off.", 1),
    ("bundle word alone", SHIPPING, "3 days. Bundle deal too.", 0),
    ("true discount", PRICE_ONE, "$76.80, that's 20% off.", 1),
    ("false discount", PRICE_ONE, "$76.80, that's 30% off.", 0),
    ("list price is a true claim", PRICE_ONE, "$76.80, down from $96.00.", 1),
    ("a price that is no price of it", AVAILABLE_40, "Yes, and it's $70.00.", 0),
    ("unstated promise: gift", PRICE_ONE, "$76.80. It comes with a free gift.", 0),
    ("unstated promise: worldwide", PRICE_ONE, "$76.80. We ship worldwide.", 0),
    ("unstated promise: next-day", PRICE_ONE, "$76.80. Next-day delivery is available.", 0),
    ("not-stated clause names no claim", GIFT_BOX, "The docs don't say whether it comes in a gift box.", 1),
    ("hedge word", WARRANTY, "Probably 12 months.", 0),
    ("two candidates joined by or", PRICE_ONE, "$76.80 or $96.00.", 0),
    ("self-correction", PRICE_ONE, "$76.80. Actually, $96.00.", 0),
    ("yes then no", AVAILABLE_40, "Yes, 19 left. No, sorry.", 0),
    ("a stray figure", SHIPPING, "3 days. 14 days.", 0),
    ("a stray keyword", SHIPPING, "3 days. warranty", 0),
    ("the question's entry fills a claim", AVAILABLE_42, "No, it's sold out, but you can get it in 40.", 1),
    ("comparison claim, false", COMPARISON, "The Pebble Trail Sneakers are more expensive.", 0),
]


@pytest.mark.parametrize(("name", "task", "reply", "expected"), CASES, ids=[c[0] for c in CASES])
def test_claims_by_field(name, task, reply, expected):
    result = check_correctness(task, think(reply))
    assert int(result.correct) == expected, (result.reason, result.claims)
    if not expected and result.answer_ok and not result.unsupported:
        assert result.claims, "a claim failure carries its claim and reason"


def test_helpfulness_needs_a_true_claim_not_keywords():
    assert helpfulness(PRICE_ONE, think("$76.80. Coupon: $10 off orders of $150 or more.")) == 1.0
    assert helpfulness(PRICE_ONE, think("$76.80. coupon $10 off free shipping")) == 0.0  # the fact's keywords
    assert helpfulness(PRICE_ONE, think("$76.80. Free shipping.")) == 0.0  # the deal without its condition
    # the same fact about the other product on screen is not this task's helpful fact
    other = make_task("Which is cheaper right now, the Zephyr Cloud Face Serum or the Orchid Cloud Face Serum?",
                      CHEAPER.reference, "comparison", facts=(HelpfulFact(fact="Free returns within 7 days.",
                                                                          match=("free returns",)),), docs=(ORCHID, ZEPHYR))
    assert helpfulness(other, think("The Zephyr Cloud Face Serum is cheaper. Free returns within 7 days.")) == 1.0
    assert helpfulness(other, think("The Zephyr Cloud is cheaper. The Orchid Cloud has free returns within 30 days.")) == 0.0


def test_docs_in_another_format_check_promises_only():
    doc = ProductDoc(product_id="u1", title="Blue Mug", text="Blue Mug. Ceramic. $12.")
    task = make_task("How much is the Blue Mug?", Reference(kind="number", value=12.0, unit="usd"), "price",
                     facts=(), docs=(doc,))
    assert check_claims(task, "$12.00, and it's ceramic.").ok
    report = check_claims(task, "$12.00, with a free gift.")
    assert [i.status for i in report.issues] == ["unsupported"]
