"""Viewer questions with machine-checkable answers, one builder per question kind.

Each builder takes the products on screen (the first is the one asked about) and returns a ``Draft``;
``generate.py`` turns drafts into ``Task`` records. Reference answers are computed from the product data,
never written by hand.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from livethink.data.liveshop.catalog import Product, money, price_quote
from livethink.data.schema import HelpfulFact, Reference, Turn


@dataclass(frozen=True)
class Draft:
    question: str
    reference: Reference
    helpful_facts: tuple[HelpfulFact, ...]
    difficulty: int
    history: tuple[Turn, ...] = ()


def plural(title: str) -> str:
    """'Aurora Classic Jacket' -> '... Jackets'; titles already ending in s (Sneakers) stay as they are."""
    return title if title.endswith("s") else title + "s"


def _num(x: float) -> str:
    return f"{x:g}"


def _shipping_fact(p: Product) -> HelpfulFact:
    if p.free_shipping_over:
        return HelpfulFact(fact=f"Free shipping over {money(p.free_shipping_over)}.", match=("free shipping",))
    return HelpfulFact(fact=f"It ships in {p.shipping_days} days.", match=(f"ships in {p.shipping_days} days", f"{p.shipping_days} days"))


def _returns_fact(p: Product) -> HelpfulFact:
    return HelpfulFact(fact=f"Free returns within {p.return_days} days.", match=("free returns", f"{p.return_days}-day", f"{p.return_days} days"))


def _coupon_fact(p: Product) -> HelpfulFact | None:
    if not p.coupon:
        return None
    return HelpfulFact(fact=f"Coupon: {p.coupon.describe()}.", match=("coupon", f"${p.coupon.amount_off:,.0f} off"))


def _bundle_fact(p: Product) -> HelpfulFact | None:
    if not p.bundle:
        return None
    return HelpfulFact(fact=f"Bundle: {p.bundle.describe()}.", match=("bundle", f"extra {p.bundle.extra_pct}%"))


def _facts(*facts: HelpfulFact | None) -> tuple[HelpfulFact, ...]:
    return tuple(f for f in facts if f is not None)


def attribute(rng: random.Random, products: list[Product]) -> Draft:
    p = products[0]
    options = ["shipping", "returns"]
    if p.material:
        options.append("material")
    if p.warranty_months:
        options.append("warranty")
    if p.origin:
        options.append("origin")
    which = rng.choice(options)
    if which == "material":
        q = rng.choice(("What is the {t} made of?", "What material is the {t}?", "is the {t} made of {m}?"))
        if q.startswith("is"):
            guess = p.material if rng.random() < 0.5 else "polyester" if p.material != "polyester" else "cotton"
            return Draft(q.format(t=p.title, m=guess), Reference(kind="yes_no", value=guess == p.material),
                         _facts(_returns_fact(p), _shipping_fact(p)), 1)
        return Draft(q.format(t=p.title), Reference(kind="entity", value=p.material),
                     _facts(_returns_fact(p), _shipping_fact(p)), 1)
    if which == "warranty":
        q = rng.choice(("How long is the warranty on the {t}?", "Does the {t} come with a warranty? How many months?"))
        return Draft(q.format(t=p.title), Reference(kind="number", value=float(p.warranty_months), unit="months"),
                     _facts(_returns_fact(p)), 1)
    if which == "origin":
        q = rng.choice(("Where is the {t} made?", "Which country makes the {t}?"))
        return Draft(q.format(t=p.title), Reference(kind="entity", value=p.origin),
                     _facts(_returns_fact(p), _shipping_fact(p)), 1)
    if which == "shipping":
        q = rng.choice(("How many days until the {t} ships?", "When does the {t} ship?", "how fast is shipping for the {t}"))
        facts = [_returns_fact(p)]
        if p.free_shipping_over:
            facts.insert(0, HelpfulFact(fact=f"Free shipping over {money(p.free_shipping_over)}.", match=("free shipping",)))
        return Draft(q.format(t=p.title), Reference(kind="number", value=float(p.shipping_days), unit="days"), tuple(facts), 1)
    q = rng.choice(("Can I return the {t}? Within how many days?", "What's the return window for the {t}?"))
    return Draft(q.format(t=p.title), Reference(kind="number", value=float(p.return_days), unit="days"),
                 _facts(_shipping_fact(p), HelpfulFact(fact=f"Warranty: {p.warranty_months} months.", match=(f"{p.warranty_months} months", "warranty")) if p.warranty_months else None), 1)


def _alternatives(p: Product, colour: str, size: str) -> HelpfulFact | None:
    same_size = [c for (c, s), n in p.stock.items() if s == size and c != colour and n]
    same_colour = [s for (c, s), n in p.stock.items() if c == colour and s != size and n]
    if same_colour:
        alt = same_colour[0]
        return HelpfulFact(fact=f"{colour} is in stock in size {alt}.", match=(f"{colour} {alt}", f"size {alt}", f"in {alt}"))
    if same_size:
        alt = same_size[0]
        return HelpfulFact(fact=f"Size {size} is in stock in {alt}.", match=(f"{alt} {size}", f"in {alt}"))
    return None


def availability(rng: random.Random, products: list[Product]) -> Draft:
    p = products[0]
    colour, size = rng.choice(sorted(p.stock))
    left = p.stock[(colour, size)]
    size_words = "" if size == "one size" else f" in {size}"
    if rng.random() < 0.6:
        q = rng.choice(("Do you have the {t} in {c}{s}?", "is the {c} {t}{s} still available?", "any {c} {t}{s} left?"))
        facts = (_alternatives(p, colour, size), _shipping_fact(p)) if not left else (
            HelpfulFact(fact=f"Only {left} left in {colour}{size_words}.", match=(f"{left} left", f"only {left}")), _shipping_fact(p))
        return Draft(q.format(t=p.title, c=colour, s=size_words), Reference(kind="yes_no", value=left > 0), _facts(*facts), 1)
    q = rng.choice(("How many {c} {t}{s} are left?", "how many of the {c}{s} {t} do you still have?"))
    facts = (_alternatives(p, colour, size), _shipping_fact(p)) if not left else (_coupon_fact(p), _shipping_fact(p))
    return Draft(q.format(t=p.title, c=colour, s=size_words), Reference(kind="number", value=float(left), unit="items"), _facts(*facts), 2)


def price(rng: random.Random, products: list[Product]) -> Draft:
    p = products[0]
    quantity = rng.choice((1, 1, 2, 2, 3))
    total = price_quote(p, quantity)
    if quantity == 1:
        q = rng.choice(("How much is the {t} with the discount?", "what's the price of the {t} right now?",
                        "How much do I pay for one {t}?"))
    else:
        q = rng.choice(("How much for {n} {ts}?", "If I buy {n} of the {t}, what's the total?",
                        "what do {n} {ts} cost with all the deals?"))
    facts = [_coupon_fact(p), _bundle_fact(p), _shipping_fact(p)]
    # A helpful reply mentions a deal the viewer is not yet using, or how shipping works.
    difficulty = 1 if quantity == 1 and not (p.coupon and p.sale_price >= p.coupon.threshold) else 3 if quantity > 1 else 2
    return Draft(q.format(t=p.title, ts=plural(p.title), n=quantity), Reference(kind="number", value=total, unit="usd"),
                 _facts(*facts), difficulty)


def comparison(rng: random.Random, products: list[Product]) -> Draft | None:
    """Compare two products on a drawn attribute; None when they tie on every attribute tried."""
    a, b = products[0], products[1]
    for which in rng.sample(("cheaper", "faster", "returns"), k=3):
        if which == "cheaper" and a.sale_price != b.sale_price:
            winner = a if a.sale_price < b.sale_price else b
            q = "Which is cheaper right now, the {a} or the {b}?"
            fact = HelpfulFact(fact=f"The {winner.title} is {money(winner.sale_price)}.", match=(money(winner.sale_price),))
            facts = (fact, _coupon_fact(winner), _shipping_fact(winner))
        elif which == "faster" and a.shipping_days != b.shipping_days:
            winner = a if a.shipping_days < b.shipping_days else b
            q = "Which ships faster, the {a} or the {b}?"
            facts = (HelpfulFact(fact=f"The {winner.title} ships in {winner.shipping_days} days.",
                                 match=(f"{winner.shipping_days} days",)), _returns_fact(winner))
        elif which == "returns" and a.return_days != b.return_days:
            winner = a if a.return_days > b.return_days else b
            q = "Which one has the longer return window, the {a} or the {b}?"
            facts = (HelpfulFact(fact=f"The {winner.title} has free returns within {winner.return_days} days.",
                                 match=(f"{winner.return_days} days", f"{winner.return_days}-day")), _shipping_fact(winner))
        else:
            continue
        if rng.random() < 0.5:
            q = q.replace("the {a} or the {b}", "the {b} or the {a}")
        aliases = (f"{winner.brand} {winner.style}", f"the {winner.brand} {winner.style}")
        return Draft(q.format(a=a.title, b=b.title), Reference(kind="entity", value=winner.title, aliases=aliases),
                     _facts(*facts), 2)
    return None


def dialogue_ref(rng: random.Random, products: list[Product]) -> Draft:
    p, other = products[0], products[1]
    colour = rng.choice(p.colours)
    history = (
        Turn(role="viewer", content=rng.choice((f"do you have anything in {colour}?", f"I love {colour}, what do you have?"))),
        Turn(role="host", content=f"Yes! The {p.title} comes in {colour}, and we also have the {other.title}."),
    )
    if rng.random() < 0.5:
        q = rng.choice((f"How much is the {colour} one?", f"what's the price of the {colour} one with the discount?"))
        ref = Reference(kind="number", value=price_quote(p, 1), unit="usd")  # same rule as a price question
        facts = (_coupon_fact(p), _bundle_fact(p), _shipping_fact(p))
    else:
        q = rng.choice((f"how long does the {colour} one take to ship?", f"when would the {colour} one arrive? how many days to ship?"))
        ref = Reference(kind="number", value=float(p.shipping_days), unit="days")
        facts = (_returns_fact(p), _coupon_fact(p))
    return Draft(q, ref, _facts(*facts), 3, history)


UNANSWERABLE_ASKS = {
    "warranty_months": "Is there a warranty on the {t}?",
    "material": "What is the {t} made of?",
    "care": "Can I put the {t} in the washing machine?",
    "origin": "Where is the {t} made?",
    "never": "Does the {t} come with a gift box?",
}


def unanswerable(rng: random.Random, products: list[Product]) -> Draft:
    p = products[0]
    missing = [f for f in ("warranty_months", "material", "care", "origin") if getattr(p, f) is None] + ["never"]
    field_ = rng.choice(missing)
    q = UNANSWERABLE_ASKS[field_].format(t=p.title)
    facts = (_returns_fact(p), _shipping_fact(p))
    return Draft(q, Reference(kind="not_stated"), facts, 2)


BUILDERS = {
    "attribute": (attribute, 1),
    "availability": (availability, 1),
    "price": (price, 1),
    "comparison": (comparison, 2),
    "dialogue_ref": (dialogue_ref, 2),
    "unanswerable": (unanswerable, 1),
}
"""kind -> (builder, number of products it needs at least)."""


def describe_answer(reference: Reference) -> str:
    """The bare answer as a reply would state it (used by the scripted teacher and in docs)."""
    if reference.kind == "number":
        if reference.unit == "usd":
            return money(float(reference.value))
        unit = {"items": "left", "days": "days", "months": "months"}.get(reference.unit or "", reference.unit or "")
        return f"{_num(float(reference.value))} {unit}".strip()
    if reference.kind == "yes_no":
        return "Yes" if reference.value else "No"
    if reference.kind == "entity":
        return str(reference.value)
    return "The docs don't say"
