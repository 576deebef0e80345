"""A synthetic livestream shop: products with prices, discounts, coupons, stock, shipping and policies.

Everything is drawn from a seeded ``random.Random`` so a catalog is reproducible from its seed. Some fields
are left out of some products (``None``): those are what "unanswerable" questions ask about.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from livethink.data.schema import ProductDoc

CATEGORIES: dict[str, dict] = {
    "jacket": {"sizes": ("S", "M", "L", "XL"), "materials": ("recycled nylon", "wool blend", "cotton canvas", "leather"), "price": (59, 249)},
    "hoodie": {"sizes": ("S", "M", "L", "XL"), "materials": ("organic cotton", "fleece", "cotton blend"), "price": (29, 89)},
    "sneakers": {"sizes": ("38", "39", "40", "41", "42", "43", "44"), "materials": ("mesh", "suede", "canvas", "leather"), "price": (49, 179)},
    "dress": {"sizes": ("XS", "S", "M", "L"), "materials": ("silk", "linen", "viscose", "cotton"), "price": (39, 199)},
    "backpack": {"sizes": ("one size",), "materials": ("polyester", "canvas", "nylon"), "price": (29, 129)},
    "earbuds": {"sizes": ("one size",), "materials": ("plastic", "aluminium"), "price": (19, 159)},
    "blender": {"sizes": ("one size",), "materials": ("stainless steel", "glass", "plastic"), "price": (39, 189)},
    "face serum": {"sizes": ("30 ml", "50 ml"), "materials": ("vitamin C", "hyaluronic acid", "niacinamide"), "price": (15, 69)},
}
BRANDS = ("Aurora", "Nimbus", "Kestrel", "Lumen", "Sable", "Tidal", "Orchid", "Vertex", "Juniper", "Cobalt",
          "Maple", "Zephyr", "Halo", "Quartz", "Ember", "Willow", "Atlas", "Solstice", "Pebble", "Nova")
STYLES = ("Classic", "Urban", "Trail", "Cloud", "Everyday", "Studio", "Pro", "Lite", "Signature", "Coastal")
COLOURS = ("black", "white", "navy", "red", "green", "beige", "grey", "pink", "blue", "brown")

# Attributes some products lack; questions about a missing one have the answer "not stated".
OPTIONAL_FIELDS = ("warranty_months", "material", "care", "origin")


@dataclass(frozen=True)
class Coupon:
    threshold: float
    amount_off: float

    def describe(self) -> str:
        return f"${self.amount_off:,.0f} off orders of ${self.threshold:,.0f} or more"


@dataclass(frozen=True)
class Bundle:
    min_quantity: int
    extra_pct: int

    def describe(self) -> str:
        return f"buy {self.min_quantity} or more and get an extra {self.extra_pct}% off"


@dataclass(frozen=True)
class Product:
    id: str
    brand: str
    style: str
    category: str
    price: float
    discount_pct: int
    coupon: Coupon | None
    bundle: Bundle | None
    stock: dict[tuple[str, str], int]  # (colour, size) -> units left
    shipping_days: int
    free_shipping_over: float | None
    return_days: int
    warranty_months: int | None
    material: str | None
    care: str | None
    origin: str | None
    extras: tuple[str, ...] = field(default=())

    @property
    def title(self) -> str:
        return f"{self.brand} {self.style} {self.category.title()}"

    @property
    def colours(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(colour for colour, _ in self.stock))

    @property
    def sizes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(size for _, size in self.stock))

    @property
    def sale_price(self) -> float:
        return percent_off(self.price, self.discount_pct)

    def doc(self) -> ProductDoc:
        return ProductDoc(product_id=self.id, title=self.title, text=render_doc(self))


def cents(amount: Decimal | float) -> float:
    """Round to cents the way a till does (half up), in decimal so 177.555 becomes 177.56."""
    return float(Decimal(str(amount)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def percent_off(amount: Decimal | float, pct: int) -> float:
    """``amount`` less ``pct``%, rounded to cents like ``cents`` (the livestream discount, a bundle's extra %)."""
    return cents(Decimal(str(amount)) * (100 - pct) / 100)


def money(amount: float) -> str:
    """Format a price the way the docs and replies do: ``$1,299.00``."""
    return f"${amount:,.2f}"


def render_doc(p: Product) -> str:
    """The product doc text the avatar reads (one line per field)."""
    lines = [f"[{p.id}] {p.title} ({p.category})"]
    price = f"Price: {money(p.price)}"
    if p.discount_pct:
        price += f", livestream discount {p.discount_pct}% off (now {money(p.sale_price)})"
    lines.append(price + ".")
    if p.coupon:
        lines.append(f"Coupon: {p.coupon.describe()}.")
    if p.bundle:
        lines.append(f"Bundle: {p.bundle.describe()}.")
    if p.material:
        lines.append(f"Material: {p.material}.")
    stock = "; ".join(
        f"{colour} {size}: {n} left" if n else f"{colour} {size}: sold out" for (colour, size), n in p.stock.items()
    )
    lines.append(f"Stock: {stock}.")
    ship = f"Shipping: ships in {p.shipping_days} days"
    ship += f", free shipping over {money(p.free_shipping_over)}." if p.free_shipping_over else "."
    lines.append(ship)
    lines.append(f"Returns: free returns within {p.return_days} days.")
    if p.warranty_months:
        lines.append(f"Warranty: {p.warranty_months} months.")
    if p.care:
        lines.append(f"Care: {p.care}.")
    if p.origin:
        lines.append(f"Made in {p.origin}.")
    return "\n".join(lines)


def make_product(rng: random.Random, product_id: str) -> Product:
    """Draw one product."""
    category = rng.choice(sorted(CATEGORIES))
    spec = CATEGORIES[category]
    low, high = spec["price"]
    price = rng.randint(low, high) + rng.choice((0.0, 0.5, 0.9, 0.99))
    colours = rng.sample(COLOURS, k=rng.randint(1, 2))
    sizes = spec["sizes"] if len(spec["sizes"]) <= 3 else tuple(sorted(rng.sample(spec["sizes"], k=3)))
    stock = {(c, s): (0 if rng.random() < 0.25 else rng.randint(1, 40)) for c in colours for s in sizes}
    coupon = None
    if rng.random() < 0.6:
        threshold = float(rng.choice((50, 80, 100, 150, 200, 300)))
        coupon = Coupon(threshold=threshold, amount_off=float(rng.choice((5, 10, 15, 20, 30))))
    bundle = Bundle(rng.choice((2, 3)), rng.choice((5, 10, 15))) if rng.random() < 0.4 else None
    return Product(
        id=product_id,
        brand=rng.choice(BRANDS),
        style=rng.choice(STYLES),
        category=category,
        price=round(price, 2),
        discount_pct=rng.choice((0, 10, 15, 20, 25, 30)),
        coupon=coupon,
        bundle=bundle,
        stock=stock,
        shipping_days=rng.randint(2, 7),
        free_shipping_over=float(rng.choice((49, 79, 99))) if rng.random() < 0.7 else None,
        return_days=rng.choice((7, 14, 30)),
        warranty_months=rng.choice((6, 12, 24)) if rng.random() < 0.6 else None,
        material=rng.choice(spec["materials"]) if rng.random() < 0.8 else None,
        care=rng.choice(("machine wash cold", "hand wash only", "wipe clean", "dry clean only")) if rng.random() < 0.5 else None,
        origin=rng.choice(("Portugal", "Vietnam", "Italy", "China", "Turkey", "Japan")) if rng.random() < 0.5 else None,
    )


def price_quote(p: Product, quantity: int) -> float:
    """Total to pay for ``quantity`` units: livestream discount, then bundle, then coupon (never below 0)."""
    subtotal = Decimal(str(p.sale_price)) * quantity
    if p.bundle and quantity >= p.bundle.min_quantity:
        subtotal = Decimal(str(percent_off(subtotal, p.bundle.extra_pct)))
    if p.coupon and subtotal >= Decimal(str(p.coupon.threshold)):
        subtotal = max(Decimal(0), subtotal - Decimal(str(p.coupon.amount_off)))
    return cents(subtotal)
