"""Calculator annotations: the result of a written-out sum, worked out exactly instead of sampled.

The student writes its price arithmetic as ``67.20 × 3 = 201.60``. A from-scratch model this small copies
numbers well but does not learn decimal arithmetic in a few minutes of CPU training: it writes
``198.90 − 15.00 = 198.90``. As in Cobbe et al. (2021, "Training Verifiers to Solve Math Word Problems", the
GSM8K calculator), decoding hands the digits after ``=`` to a calculator: the model still decides *what* to
compute (which price, which quantity, whether the coupon applies); the calculator only does the sum.

Pure functions over text; the decoding plumbing is in ``livethink.calculator.processors``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from livethink.data.liveshop.catalog import cents

# A number as the traces write it: 1,299.00 / 74.70 / 0.85 / 3
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# "A op B = " followed by the part of the result already written (digits, commas, a point), at the very end.
# B may be a percentage: "272.04 − 10% = " is 10% off 272.04.
_PENDING = re.compile(rf"(?<![\d.,])({_NUMBER}) ([×x*−\-+]) ((?:{_NUMBER})%?) = ([\d,.]*)$")
MAX_TAIL_CHARS = 64  # the longest "A op B = result" a trace writes, with room to spare
RESULT_CHARS = frozenset("0123456789,.")
MAX_RESULT = Decimal(10) ** 12  # above any price sum (and exact in the float cents() returns)


def _decimal(text: str) -> Decimal:
    return Decimal(text.replace(",", ""))


def evaluate(left: str, op: str, right: str) -> str | None:
    """``left op right`` rounded half up to cents and written like a price (``1,299.00``); None if undefined.
    ``right`` may be a percentage of ``left`` (``"272.04", "−", "10%"`` is 10% off).

    >>> evaluate("74.70", "×", "2"), evaluate("198.90", "−", "15.00"), evaluate("272.04", "−", "10%")
    ('149.40', '183.90', '244.84')
    """
    try:
        a = _decimal(left)
        b = a * _decimal(right[:-1]) / 100 if right.endswith("%") else _decimal(right)
    except InvalidOperation:
        return None
    if op in "×x*":
        value = a * b
    elif op in "−-":
        value = a - b
    else:
        value = a + b
    if value < 0 or value >= MAX_RESULT:  # no price sum; a sampled run of digits must not stop decoding
        return None
    return f"{cents(value):,.2f}"  # the till's half-up rounding, as the teacher and the references round


def next_result_char(text: str) -> str | None:
    """The next character of a pending calculator result at the end of ``text``, or None if nothing is pending.

    ``text`` ends with ``A op B = `` and, possibly, the first characters of the result already written:
    ``"… 67.20 × 3 = 20"`` -> ``"1"`` (201.60). None when the written part is complete or is not a prefix of the
    result (the caller never forces a sum it did not start).
    """
    match = _PENDING.search(text[-MAX_TAIL_CHARS:])
    if match is None:
        return None
    result = evaluate(match.group(1), match.group(2), match.group(3))
    written = match.group(4)
    if result is None or len(written) >= len(result) or not result.startswith(written):
        return None
    return result[len(written)]
