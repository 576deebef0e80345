"""Hand-written LiveShop-style tasks shared by the reward tests."""

from __future__ import annotations

from livethink.data.schema import HelpfulFact, ProductDoc, Reference, Task, Turn

DOC_SNEAKERS = ProductDoc(
    product_id="P1",
    title="Pebble Trail Sneakers",
    text=(
        "[P1] Pebble Trail Sneakers (sneakers)\n"
        "Price: $96.00, livestream discount 20% off (now $76.80).\n"
        "Coupon: $10 off orders of $150 or more.\n"
        "Bundle: buy 3 or more and get an extra 5% off.\n"
        "Material: suede.\n"
        "Stock: navy 40: 19 left; navy 42: sold out.\n"
        "Shipping: ships in 3 days, free shipping over $49.00.\n"
        "Returns: free returns within 14 days.\n"
        "Warranty: 12 months.\n"
        "Made in Italy."
    ),
)
DOC_SERUM = ProductDoc(
    product_id="P2",
    title="Quartz Studio Face Serum",
    text=(
        "[P2] Quartz Studio Face Serum (face serum)\n"
        "Price: $1,299.00.\n"
        "Stock: black 30 ml: 5 left.\n"
        "Shipping: ships in 5 days.\n"
        "Returns: free returns within 30 days."
    ),
)
COUPON = HelpfulFact(fact="Coupon: $10 off orders of $150 or more.", match=("coupon", "$10 off"))
FREE_SHIPPING = HelpfulFact(fact="Free shipping over $49.00.", match=("free shipping",))
RETURNS = HelpfulFact(fact="Free returns within 14 days.", match=("free returns", "14-day", "14 days"))
ALTERNATIVE = HelpfulFact(fact="navy is in stock in size 40.", match=("navy 40", "size 40", "in 40"))


def make_task(
    question: str,
    reference: Reference,
    kind: str,
    facts: tuple[HelpfulFact, ...] = (COUPON, FREE_SHIPPING),
    docs: tuple[ProductDoc, ...] = (DOC_SNEAKERS,),
    history: tuple[Turn, ...] = (),
) -> Task:
    return Task(
        id=f"t-{abs(hash((question, kind))) % 10**8}",
        split="train",
        product_docs=docs,
        question=question,
        history=history,
        reference=reference,
        helpful_facts=facts,
        kind=kind,
        difficulty=1,
    )


PRICE_ONE = make_task("How much is the Pebble Trail Sneakers right now?", Reference(kind="number", value=76.8, unit="usd"), "price")
PRICE_TWO = make_task("How much for 2 Pebble Trail Sneakerss?", Reference(kind="number", value=143.6, unit="usd"), "price")
PRICE_BIG = make_task(
    "How much is the Quartz Studio Face Serum?", Reference(kind="number", value=1299.0, unit="usd"), "price",
    facts=(HelpfulFact(fact="It ships in 5 days.", match=("ships in 5 days", "5 days")),), docs=(DOC_SERUM,),
)
SHIPPING = make_task("How many days until the Pebble Trail Sneakers ships?", Reference(kind="number", value=3.0, unit="days"), "attribute", facts=(FREE_SHIPPING, RETURNS))
RETURN_WINDOW = make_task("What's the return window for the Pebble Trail Sneakers?", Reference(kind="number", value=14.0, unit="days"), "attribute", facts=(FREE_SHIPPING,))
WARRANTY = make_task("How long is the warranty on the Pebble Trail Sneakers?", Reference(kind="number", value=12.0, unit="months"), "attribute", facts=(RETURNS,))
AVAILABLE_42 = make_task("is the navy Pebble Trail Sneakers in 42 still available?", Reference(kind="yes_no", value=False), "availability", facts=(ALTERNATIVE, FREE_SHIPPING))
AVAILABLE_40 = make_task("Do you have the Pebble Trail Sneakers in navy in 40?", Reference(kind="yes_no", value=True), "availability", facts=(HelpfulFact(fact="Only 19 left in navy in 40.", match=("19 left", "only 19")), FREE_SHIPPING))
SOLD_OUT_40 = make_task("Is the navy 40 Pebble Trail Sneakers sold out?", Reference(kind="yes_no", value=False), "availability", facts=(FREE_SHIPPING,))
COUNT_40 = make_task("How many navy Pebble Trail Sneakers in 40 are left?", Reference(kind="number", value=19.0, unit="items"), "availability", facts=(COUPON, FREE_SHIPPING))
COUNT_42 = make_task("How many navy Pebble Trail Sneakers in 42 are left?", Reference(kind="number", value=0.0, unit="items"), "availability", facts=(ALTERNATIVE,))
MATERIAL = make_task("What is the Pebble Trail Sneakers made of?", Reference(kind="entity", value="suede"), "attribute", facts=(RETURNS, FREE_SHIPPING))
DOC_MESH = ProductDoc(
    product_id="P3",
    title="Nimbus Cloud Sneakers",
    text=(
        "[P3] Nimbus Cloud Sneakers (sneakers)\n"
        "Price: $60.00.\n"
        "Material: mesh.\n"
        "Stock: red 41: 3 left.\n"
        "Shipping: ships in 2 days.\n"
        "Returns: free returns within 7 days."
    ),
)
MATERIAL_TWO_DOCS = make_task("What material is the Pebble Trail Sneakers?", Reference(kind="entity", value="suede"), "attribute", facts=(RETURNS,), docs=(DOC_MESH, DOC_SNEAKERS))
MADE_OF_NYLON = make_task("is the Pebble Trail Sneakers made of nylon?", Reference(kind="yes_no", value=False), "attribute", facts=(RETURNS,))
COMPARISON = make_task(
    "Which is cheaper right now, the Quartz Studio Face Serum or the Pebble Trail Sneakers?",
    Reference(kind="entity", value="Pebble Trail Sneakers", aliases=("Pebble Trail", "the Pebble Trail")),
    "comparison",
    facts=(HelpfulFact(fact="The Pebble Trail Sneakers is $76.80.", match=("$76.80",)), COUPON),
    docs=(DOC_SERUM, DOC_SNEAKERS),
)
GIFT_BOX = make_task("Does the Pebble Trail Sneakers come with a gift box?", Reference(kind="not_stated"), "unanswerable", facts=(RETURNS, FREE_SHIPPING))
DIALOGUE = make_task(
    "what's the price of the navy one with the discount?",
    Reference(kind="number", value=76.8, unit="usd"),
    "dialogue_ref",
    docs=(DOC_SERUM, DOC_SNEAKERS),
    history=(
        Turn(role="viewer", content="do you have anything in navy?"),
        Turn(role="host", content="Yes! The Pebble Trail Sneakers comes in navy, and we also have the Quartz Studio Face Serum."),
    ),
)


def think(reply: str, reasoning: str = "Some reasoning.") -> str:
    return f"<think>\n{reasoning}\n</think>\n\n{reply}"


ALL_TASKS = (PRICE_ONE, PRICE_TWO, PRICE_BIG, SHIPPING, RETURN_WINDOW, WARRANTY, AVAILABLE_42, AVAILABLE_40, SOLD_OUT_40,
             COUNT_40, COUNT_42, MATERIAL, MATERIAL_TWO_DOCS, MADE_OF_NYLON, COMPARISON, GIFT_BOX, DIALOGUE)


def test_fixture_tasks_accept_the_canonical_reply():
    """Each fixture's reference, said the way the scripted teacher says it, is correct and helpful."""
    from livethink.data.liveshop.questions import describe_answer
    from livethink.rewards import RubricJudge

    judge = RubricJudge()
    for task in ALL_TASKS:
        verdict = judge.score(task, think(f"{describe_answer(task.reference)}. {task.helpful_facts[0].fact}"))
        assert verdict.correct and verdict.helpful, (task.question, verdict.details)
