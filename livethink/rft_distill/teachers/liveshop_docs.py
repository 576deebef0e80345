"""Read the rendered LiveShop product docs back into numbers (what a reasoner reads off the page).

The scripted teacher computes its traces from these values, so its arithmetic is real. The format is the one
``livethink.data.liveshop.catalog.render_doc`` writes; a doc in another format parses to ``None`` and the
teacher falls back to a generic trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from livethink.data.liveshop.catalog import percent_off
from livethink.data.schema import ProductDoc

_HEADER = re.compile(r"^\[(?P<id>[^\]]+)\] (?P<title>.+) \((?P<category>[^)]+)\)$")
_PRICE = re.compile(r"^Price: \$(?P<price>[\d,]+\.\d\d)(?:, livestream discount (?P<pct>\d+)% off \(now \$(?P<now>[\d,]+\.\d\d)\))?\.$")
_COUPON = re.compile(r"^Coupon: \$(?P<amount>[\d,]+) off orders of \$(?P<threshold>[\d,]+) or more\.$")
_BUNDLE = re.compile(r"^Bundle: buy (?P<min>\d+) or more and get an extra (?P<pct>\d+)% off\.$")
_SHIPPING = re.compile(r"^Shipping: ships in (?P<days>\d+) days(?:, free shipping over \$(?P<free>[\d,]+\.\d\d))?\.$")
_RETURNS = re.compile(r"^Returns: free returns within (?P<days>\d+) days\.$")
_WARRANTY = re.compile(r"^Warranty: (?P<months>\d+) months\.$")
_STOCK_ENTRY = re.compile(r"^(?P<colour>\S+) (?P<size>.+): (?:(?P<n>\d+) left|sold out)$")


def _f(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass
class Doc:
    """One product's doc, parsed."""

    product_id: str
    title: str
    category: str
    price: float
    discount_pct: int = 0
    now_price: float | None = None  # the "(now $X)" the doc states, when discounted
    coupon: tuple[float, float] | None = None  # (amount off, threshold)
    bundle: tuple[int, int] | None = None  # (min quantity, extra %)
    material: str | None = None
    stock: list[tuple[str, str, int]] = field(default_factory=list)  # (colour, size, units left)
    shipping_days: int = 0
    free_shipping_over: float | None = None
    return_days: int = 0
    warranty_months: int | None = None
    care: str | None = None
    origin: str | None = None
    lines: dict[str, str] = field(default_factory=dict)  # field name -> doc line

    @property
    def sale_price(self) -> float:
        """The price now: the doc's "(now $X)" when it states one, else the list price less the discount."""
        if self.now_price is not None:
            return self.now_price
        return percent_off(self.price, self.discount_pct)

    @property
    def short_name(self) -> str:
        return " ".join(self.title.split()[:2])

    def stock_entry(self, colour: str, size: str) -> tuple[str, str, int] | None:
        return next((e for e in self.stock if e[0] == colour and e[1] == size), None)


def parse_doc(doc: ProductDoc) -> Doc | None:
    """Parse one rendered doc; None if it is not in the LiveShop format."""
    lines = doc.text.splitlines()
    header = _HEADER.match(lines[0]) if lines else None
    price = _PRICE.match(lines[1]) if len(lines) > 1 else None
    if not header or not price:
        return None
    out = Doc(product_id=header["id"], title=header["title"], category=header["category"], price=_f(price["price"]),
              discount_pct=int(price["pct"] or 0), now_price=_f(price["now"]) if price["now"] else None)
    out.lines["price"] = lines[1]
    for line in lines[2:]:
        if m := _COUPON.match(line):
            out.coupon, out.lines["coupon"] = (_f(m["amount"]), _f(m["threshold"])), line
        elif m := _BUNDLE.match(line):
            out.bundle, out.lines["bundle"] = (int(m["min"]), int(m["pct"])), line
        elif line.startswith("Material: "):
            out.material, out.lines["material"] = line[len("Material: ") : -1], line
        elif line.startswith("Stock: "):
            out.lines["stock"] = line
            for entry in line[len("Stock: ") : -1].split("; "):
                if m := _STOCK_ENTRY.match(entry):
                    out.stock.append((m["colour"], m["size"], int(m["n"] or 0)))
        elif m := _SHIPPING.match(line):
            out.shipping_days, out.lines["shipping"] = int(m["days"]), line
            out.free_shipping_over = _f(m["free"]) if m["free"] else None
        elif m := _RETURNS.match(line):
            out.return_days, out.lines["returns"] = int(m["days"]), line
        elif m := _WARRANTY.match(line):
            out.warranty_months, out.lines["warranty"] = int(m["months"]), line
        elif line.startswith("Care: "):
            out.care, out.lines["care"] = line[len("Care: ") : -1], line
        elif line.startswith("Made in "):
            out.origin, out.lines["origin"] = line[len("Made in ") : -1], line
    if "shipping" not in out.lines or "returns" not in out.lines:
        return None
    return out


def parse_docs(docs: tuple[ProductDoc, ...]) -> list[Doc] | None:
    """All docs of a task, or None if any is not in the LiveShop format."""
    parsed = [parse_doc(d) for d in docs]
    return None if any(p is None for p in parsed) else parsed  # type: ignore[return-value]


def mentioned(docs: list[Doc], text: str) -> list[Doc]:
    """Docs whose title appears in ``text``, in order of first appearance."""
    lowered = text.lower()
    hits = [(lowered.find(d.title.lower()), i, d) for i, d in enumerate(docs)]
    return [d for pos, _, d in sorted(hits) if pos >= 0]
