"""What a LiveShop product doc states, read back line by line: the facts the claim checker (``claims.py``,
``claim_check.py``) holds a reply's claims against.

The doc format is the one ``livethink.data.liveshop.catalog.render_doc`` writes, one field per line::

    [V0055] Atlas Classic Dress (dress)
    Price: $133.90, livestream discount 20% off (now $107.12).
    Coupon: $30 off orders of $50 or more.
    Bundle: buy 3 or more and get an extra 5% off.
    Material: silk.
    Stock: black L: sold out; navy S: 23 left.
    Shipping: ships in 7 days, free shipping over $49.00.
    Returns: free returns within 14 days.
    Warranty: 12 months.
    Care: hand wash only.
    Made in Portugal.

A field whose line is absent is *not stated* (``None``): a claim about it is unsupported. A doc whose header and
price lines are not in this format parses to ``None`` (docs from user data): the checker then holds only the
promises no doc line could back (``claim_check``) against the raw text.

The vocabularies below name what a reply can claim about a field even when no doc on screen uses the word
(a reply saying "made of cashmere" claims a material whatever the docs say).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from livethink.data.liveshop.catalog import CATEGORIES, COLOURS, cents, percent_off
from livethink.data.schema import ProductDoc, Task

MATERIALS: tuple[str, ...] = tuple(sorted(
    {m for spec in CATEGORIES.values() for m in spec["materials"]}
    | {"cotton", "polyester", "leather", "nylon", "wool", "wool blend", "mesh", "silk", "linen", "canvas", "denim",
       "cashmere", "merino", "bamboo", "rubber", "steel", "aluminum", "ceramic", "wood", "velvet", "satin", "spandex",
       "elastane", "acrylic", "vinyl", "faux leather", "vegan leather", "retinol", "collagen", "titanium",
       "carbon fiber", "gore-tex", "jersey", "corduroy", "lycra"},
    key=lambda m: (-len(m), m)))  # longest first: "wool blend" before "wool"
COUNTRIES: tuple[str, ...] = (
    "portugal", "vietnam", "italy", "china", "turkey", "japan", "france", "germany", "spain", "india", "bangladesh",
    "usa", "united states", "america", "uk", "united kingdom", "england", "korea", "south korea", "taiwan", "mexico",
    "indonesia", "thailand", "cambodia", "pakistan", "sri lanka", "brazil", "canada", "poland", "romania", "morocco",
    "switzerland", "sweden", "denmark", "netherlands", "australia")
ALL_COLOURS: tuple[str, ...] = tuple(dict.fromkeys(COLOURS + (
    "purple", "yellow", "orange", "gold", "silver", "cream", "olive", "tan", "khaki", "maroon", "teal", "ivory",
    "charcoal", "burgundy", "lavender", "mint", "coral", "turquoise", "violet")))
# How a reply words a care instruction -> the canonical instruction; a doc's care line allows exactly one.
CARE_WORDS: tuple[tuple[str, str], ...] = (
    (r"machine[- ]wash\w*|washing machine|in the (?:washer|machine)|wash(?:es)? cold", "machine"),
    (r"hand[- ]wash\w*|wash(?:ed)? by hand", "hand"),
    (r"dry[- ]clean\w*", "dry clean"),
    (r"wipe(?:s|d)?(?: it| them)? clean|wipe(?:s|d)? (?:it |them )?(?:down|with)", "wipe"),
    (r"tumble[- ]dr\w+|dishwasher[- ]safe|in the dishwasher|iron(?:ed|ing)?\b|bleach", "other"),
)
DOC_CARE = {"machine wash cold": "machine", "hand wash only": "hand", "dry clean only": "dry clean", "wipe clean": "wipe"}

_HEADER = re.compile(r"^\[(?P<id>[^\]]+)\] (?P<title>.+) \((?P<category>[^)]+)\)$")
_PRICE = re.compile(r"^Price: \$(?P<price>[\d,]+\.\d\d)(?:, livestream discount (?P<pct>\d+)% off "
                    r"\(now \$(?P<now>[\d,]+\.\d\d)\))?\.$")
_LINES = {
    "coupon": re.compile(r"^Coupon: \$(?P<a>[\d,]+(?:\.\d\d)?) off orders of \$(?P<b>[\d,]+(?:\.\d\d)?) or more\.$"),
    "bundle": re.compile(r"^Bundle: buy (?P<a>\d+) or more and get an extra (?P<b>\d+)% off\.$"),
    "shipping": re.compile(r"^Shipping: ships in (?P<a>\d+) days(?:, free shipping over \$(?P<b>[\d,]+\.\d\d))?\.$"),
    "returns": re.compile(r"^Returns: free returns within (?P<a>\d+) days\.$"),
    "warranty": re.compile(r"^Warranty: (?P<a>\d+) months\.$"),
    "material": re.compile(r"^Material: (?P<a>.+)\.$"),
    "care": re.compile(r"^Care: (?P<a>.+)\.$"),
    "origin": re.compile(r"^Made in (?P<a>.+)\.$"),
    "stock": re.compile(r"^Stock: (?P<a>.+)\.$"),
}
_STOCK_ENTRY = re.compile(r"^(?P<colour>\S+) (?P<size>.+): (?:(?P<n>\d+) left|sold out)$")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class ProductFacts:
    """One product's doc, as facts. ``None``: the doc does not state the field."""

    title: str
    category: str
    price: float
    discount_pct: int = 0
    sale_price: float = 0.0
    coupon: tuple[float, float] | None = None  # (amount off, order threshold)
    bundle: tuple[int, int] | None = None  # (min quantity, extra %)
    material: str | None = None
    stock: tuple[tuple[str, str, int], ...] = ()  # (colour, size, units left)
    shipping_days: int | None = None
    free_shipping_over: float | None = None
    return_days: int | None = None
    warranty_months: int | None = None
    care: str | None = None
    origin: str | None = None
    text: str = ""  # the doc, lower-case

    @property
    def short_name(self) -> str | None:
        """Brand and style ("Atlas Classic"), the name replies and aliases use; None for a two-word title."""
        words = self.title.split()
        return " ".join(words[:2]) if len(words) >= 3 else None

    @property
    def colours(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for c, _, _ in self.stock))

    @property
    def sizes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s for _, s, _ in self.stock))

    def quote(self, quantity: int) -> float:
        """What ``quantity`` units cost: the discount, then the bundle, then the coupon (as ``catalog.price_quote``)."""
        subtotal = Decimal(str(self.sale_price)) * quantity
        if self.bundle and quantity >= self.bundle[0]:
            subtotal = Decimal(str(percent_off(subtotal, self.bundle[1])))
        if self.coupon and subtotal >= Decimal(str(self.coupon[1])):
            subtotal = max(Decimal(0), subtotal - Decimal(str(self.coupon[0])))
        return cents(subtotal)


def parse_facts(doc: ProductDoc) -> ProductFacts | None:
    """The facts of one rendered LiveShop doc; None if its header or price line is not in the format."""
    lines = doc.text.strip().splitlines()
    header = _HEADER.match(lines[0]) if lines else None
    price = _PRICE.match(lines[1]) if len(lines) > 1 else None
    if not header or not price:
        return None
    values: dict[str, object] = {}
    for line in lines[2:]:
        for name, pattern in _LINES.items():
            if m := pattern.match(line.strip()):
                values[name] = m
                break
    sale = _f(price["now"]) if price["now"] else percent_off(_f(price["price"]), int(price["pct"] or 0))
    get = values.get
    stock = ()
    if m := get("stock"):
        entries = [_STOCK_ENTRY.match(e.strip()) for e in m["a"].split(";")]
        stock = tuple((e["colour"].lower(), e["size"], int(e["n"] or 0)) for e in entries if e)
    ship, ret, war, cou, bun = get("shipping"), get("returns"), get("warranty"), get("coupon"), get("bundle")
    return ProductFacts(
        title=header["title"], category=header["category"], price=_f(price["price"]),
        discount_pct=int(price["pct"] or 0), sale_price=sale,
        coupon=(_f(cou["a"]), _f(cou["b"])) if cou else None,
        bundle=(int(bun["a"]), int(bun["b"])) if bun else None,
        material=m["a"].lower() if (m := get("material")) else None, stock=stock,
        shipping_days=int(ship["a"]) if ship else None,
        free_shipping_over=_f(ship["b"]) if ship and ship["b"] else None,
        return_days=int(ret["a"]) if ret else None, warranty_months=int(war["a"]) if war else None,
        care=m["a"].lower() if (m := get("care")) else None, origin=m["a"].lower() if (m := get("origin")) else None,
        text=doc.text.lower())


@lru_cache(maxsize=4096)
def _parse_all(docs: tuple[ProductDoc, ...]) -> tuple[ProductFacts, ...] | None:
    parsed = tuple(parse_facts(d) for d in docs)
    return None if not parsed or any(p is None for p in parsed) else parsed  # type: ignore[return-value]


def task_facts(task: Task) -> tuple[ProductFacts, ...] | None:
    """The facts of every doc on screen, in the task's order; None unless all are LiveShop docs."""
    return _parse_all(tuple(task.product_docs))
