"""The till's sums as the scripted teacher writes them: the price lines of a trace (``price_lines``).

Every sum is written ``A op B = C`` and computed in decimal with the till's half-up rounding (as
``catalog.price_quote``), exactly what ``livethink.calculator`` returns for the same sum; the discounted unit price
is copied from the doc. ``plans`` builds the traces from these lines.
"""

from __future__ import annotations

import re
from decimal import Decimal

from livethink.data.liveshop.catalog import cents, percent_off
from livethink.rft_distill.teachers.liveshop_docs import Doc


def _d(x: float) -> Decimal:
    return Decimal(str(x))


def n2(x: float) -> str:
    return f"{x:,.2f}"


def discounted(p: Doc, now: float) -> str:
    """The discounted price as the doc states it, in the doc's order: ``234.00, 15% off, now 198.90``.

    Copied, not computed: the student copies numbers well, and the doc already did this sum."""
    return f"{n2(p.price)}, {p.discount_pct}% off, now {n2(now)}"


def quantity(question: str) -> int:
    m = re.search(r"(?<![\w.])(\d+)(?![\w.])", question)
    return int(m.group(1)) if m else 1


def price_lines(
    p: Doc, q: int, slip: tuple[int, float] | None = None, skip_discount: bool = False, flip_coupon: bool = False
) -> tuple[list[str], list[str], float, int]:
    """(lines, arithmetic checks, total, number of arithmetic steps) for ``q`` units of ``p``.
    ``slip=(i, delta)`` adds ``delta`` to the result of arithmetic step ``i``."""
    steps = 0

    def step(value: float) -> float:
        nonlocal steps
        if slip is not None and steps == slip[0]:
            value = cents(_d(value) + _d(slip[1]))
        steps += 1
        return value

    lines, checks = [f"Product: {p.title}. Quantity: {q}."], []
    if p.discount_pct and not skip_discount:
        unit = step(p.sale_price)
        lines.append(f"Unit price: {discounted(p, unit)}.")
    else:
        unit = p.price
        lines.append(f"Unit price: {n2(p.price)}." if p.discount_pct else f"Unit price: {n2(p.price)}, no discount.")
    total = unit
    if q > 1:
        total = step(cents(_d(unit) * q))
        checks.append(f"{n2(unit)} × {q} = {n2(total)}")
        lines.append(f"Subtotal: {checks[-1]}.")
    if p.bundle:
        min_q, pct = p.bundle
        if q >= min_q:
            new = step(percent_off(total, pct))
            checks.append(f"{n2(total)} − {pct}% = {n2(new)}")
            lines.append(f"Bundle: {q} ≥ {min_q}, {checks[-1]}.")
            total = new
        else:
            lines.append(f"Bundle: needs {min_q}, {q} < {min_q}, not applied.")
    if p.coupon:
        amount, threshold = p.coupon
        if (total >= threshold) != flip_coupon:
            new = step(max(0.0, cents(_d(total) - _d(amount))))
            checks.append(f"{n2(total)} − {n2(amount)} = {n2(new)}")
            lines.append(f"Coupon: {n2(total)} ≥ {n2(threshold)}, {checks[-1]}.")
            total = new
        else:
            lines.append(f"Coupon: {n2(total)} < {n2(threshold)}, not applied.")
    return lines, checks, total, steps
