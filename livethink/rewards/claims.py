"""Claims a reply makes about product fields, read with fixed frames (pure functions, no model).

A *claim* is a span of the reply that states something about one field of one product: ``"ships in 3 days"``
(``shipping``, 3), ``"Coupon: $10 off orders of $50 or more"`` (``coupon``, (10, 50)), ``"only 2 left in red"``
(``stock``), ``"made of cotton"`` (``material``), ``"a lifetime warranty"`` (``warranty``, ``"lifetime"``),
``"a free gift"`` (``promise``), ``"the X is cheaper"`` (``comparison``). ``claim_check.py`` holds each against
the docs; this module only reads them.

Frames, in the order they take the reply's words (a word one frame took is not read again):

1. ``comparison``: cheaper / more expensive, ships faster / slower, longer / shorter return window;
2. ``returns`` (days, or bare "free returns", or a refusal such as "returns are never accepted"), ``warranty``
   (months; years × 12; "lifetime"; "comes with a warranty"; "no warranty"), ``shipping`` (days; weeks × 7);
3. deals, per sentence: a coupon ("coupon", "$X off", "save $X") and free shipping, each with the threshold
   nearest to it ("orders of $Y or more", "over $Y"); a bundle ("buy N or more ... extra P% off"); a percentage off;
4. ``promise``: what LiveShop docs never state unless their text says so (free gifts, worldwide or next-day
   shipping, money-back guarantees, waterproof, ...), and any "free <thing>" but returns, shipping and delivery;
5. ``price`` (a dollar amount left over; ``list`` after "was / down from", ``unit`` before "each"), ``stock``
   (a status — "N left", "sold out", "in stock", "comes in" — with the colours and sizes of its clause),
   ``care``, ``material``, ``origin`` (vocabulary words, "not X" negated), ``size``, ``quantity``.

A claim's *subject* is the product the reply named last before it ("than the Y" does not count), or the one
the task is about (``subject=None``). Claims inside a clause that says the docs do not state something ("the
docs don't say whether it's machine washable") are not claims. Spans index the reply itself (the reply is
lower-cased character for character).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from livethink.rewards.doc_facts import ALL_COLOURS, CARE_WORDS, COUNTRIES, MATERIALS, ProductFacts
from livethink.rewards.text import NOT_STATED, lower_same_length

_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10, "eleven": 11, "twelve": 12, "fourteen": 14, "twenty": 20, "thirty": 30}
N = r"(\d+|" + "|".join(_WORDS) + r")"
USD = r"\$\s?(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
THRESHOLD = re.compile(
    r"(?:(?:on |for |with )?(?:any |all |your |an? )?(?:orders?|purchases?|baskets?|carts?|subtotals?|spend(?:ing)?)"
    r"\s+(?:of\s+|over\s+|above\s+|from\s+|at least\s+|worth\s+)?|(?:when|if) you (?:spend|buy|order)\s+"
    r"(?:over\s+|at least\s+)?|over\s+|above\s+|at least\s+)" + USD + r"(?:\s+or (?:more|above|over))?")
_UNIT = {"day": 1, "days": 1, "week": 7, "weeks": 7, "month": 1, "months": 1, "year": 12, "years": 12}
_NEG_BEFORE = re.compile(r"(?:\bnot|n't|\bno|\bnever|\binstead of|\brather than|\bnor)\b[^.;,!?]{0,14}$")
_CLAUSE = re.compile(r"[.;!?](?:\s|$)|\bbut\b|\bhowever\b|\bwhile\b|\bthough\b|\balthough\b|\bwhereas\b")
_SCOPE = re.compile(_CLAUSE.pattern + r"|,|\band\b")


@dataclass(frozen=True)
class Claim:
    """What a span of the reply states: ``field`` and ``value`` (see the module docstring), ``negated`` for
    "not X", and ``subject``: the index of the product named before it, None for the task's own product."""

    field: str
    value: Any
    start: int
    end: int
    text: str
    negated: bool = False
    subject: int | None = None


def number(text: str) -> float:
    return float(_WORDS.get(text) or text.replace(",", ""))


def _free(taken: list[bool], start: int, end: int) -> bool:
    return not any(taken[start:end])


def _take(taken: list[bool], start: int, end: int) -> None:
    taken[start:end] = [True] * (end - start)


# ---------------------------------------------------------------- frames with fixed words

_COMPARISON = re.compile(
    r"(?P<neg>\bnot |n't )?(?:\bthe )?(?P<c>cheaper|cheapest|less expensive|more affordable|lower[- ]priced|costs? less"
    r"|more expensive|pricier|costs? more|ships? (?:out )?(?:faster|sooner|quicker|first)|(?:faster|quicker|sooner) to ship"
    r"|faster (?:shipping|delivery)|arrives? (?:sooner|faster|first)|ships? (?:slower|later)|slower to ship"
    r"|longer (?:free )?return(?:s| window| period| policy)?|longer to return|more time to return"
    r"|shorter (?:free )?return(?:s| window| period| policy)?)(?: one| option)?\b")
_DIMENSION = (("price", -1, r"cheap|less exp|afford|lower|costs? less"), ("price", 1, r"expensive|pricier|costs? more"),
              ("shipping", -1, r"faster|sooner|quicker|first"), ("shipping", 1, r"slower|later"),
              ("returns", 1, r"longer|more time"), ("returns", -1, r"shorter"))
_FIXED: tuple[tuple[str, re.Pattern[str], Any], ...] = tuple((f, re.compile(p), v) for f, p, v in (
    ("returns", r"(?:lifetime|unlimited) returns?|return (?:it |them )?(?:any ?time|forever)", "forever"),
    ("returns", r"no returns?\b|(?:can ?not|can't|cannot|won't) be returned|returns? (?:are|is) (?:not|never) "
                r"(?:accepted|allowed|possible|free)|(?:not|non)[- ]?returnable|final sale|no refunds?|(?:can't|cannot|"
                r"can not) return|returns? costs?|restocking fee|paid returns?|return shipping (?:is|costs)|(?:never|don't|"
                r"do not) accept returns", "none"),
    ("returns", r"(?:free\s+)?(?:returns?|send (?:it|them) back|bring (?:it|them) back|refunds?)\b[^.;!?$]{0,50}?"
                r"(?:(?:with)?in|for|up to)\s+" + N + r"\s*(days?|weeks?|months?)", "n"),
    ("returns", r"(?:free\s+)?" + N + r"[- ](days?|weeks?|months?)\s+(?:free\s+)?(?:returns?|return window|return policy"
                r"|return period)", "n"),
    ("returns", r"return (?:window|period|policy) (?:is|of)\s+" + N + r"\s*(days?|weeks?)", "n"),
    ("returns", N + r"\s+(days?|weeks?) to (?:return|send back)(?: it| them)?(?: back)?(?:\s+(?:for\s+)?free)?", "n"),
    ("returns", r"free returns?|returns? (?:are|is) free|return (?:it|them) for free", "free"),
    ("warranty", r"(?:lifetime|lifelong|forever|unlimited) (?:warranty|guarantee)|(?:warranty|guaranteed?) for life",
     "lifetime"),
    ("warranty", r"no warranty|without (?:a |any )?warranty|(?:doesn't|does not|don't|do not) (?:come with|have|include|"
                 r"offer) (?:a |any )?warranty|warranty (?:is )?(?:void|not included)", "none"),
    ("warranty", N + r"[- ](months?|years?)(?:'s?)?\s+(?:\w+\s+)?(?:warranty|guarantee)", "n"),
    ("warranty", r"(?:warranty|guarantee)\b[^.;!?$]{0,25}?(?:of|is|for|covers?|lasts?|:)\s+(?:\w+\s+)?" + N
     + r"\s*(months?|years?)", "n"),
    ("warranty", N + r"\s+(months?|years?)\s+(?:of\s+)?(?:warranty|guarantee|cover(?:age)?)", "n"),
    ("warranty", r"(?:comes? with|has|have|includes?|with|covered by|under) (?:a |the )?(?:\w+ )?warranty", "some"),
    ("shipping", r"(?:ships?|shipping|shipped|dispatch\w*|delivery|delivered|arrives?|arrival|get it|takes?)\b"
                 r"[^.;!?$]{0,20}?(?:with)?in\s+" + N + r"\s*(?:business |working )?(days?|weeks?)", "n"),
    ("shipping", r"(?:shipping|delivery) takes\s+" + N + r"\s*(?:business |working )?(days?|weeks?)", "n"),
    ("shipping", N + r"[- ](days?|weeks?)\s+(?:to ship|shipping|delivery|to arrive|for shipping)", "n"),
    ("shipping", r"takes\s+" + N + r"\s+(days?|weeks?) to (?:ship|arrive)", "n"),
))


def _fixed_claims(text: str, taken: list[bool]) -> Iterator[Claim]:
    for m in _COMPARISON.finditer(text):
        if _free(taken, m.start("c"), m.end()):
            _take(taken, m.start(), m.end())
            dim, direction = next((d, s) for d, s, p in _DIMENSION if re.search(p, m["c"]))
            yield Claim("comparison", (dim, direction), m.start(), m.end(), m[0], bool(m["neg"]))
    for field, pattern, kind in _FIXED:
        for m in pattern.finditer(text):
            if not _free(taken, m.start(), m.end()):
                continue
            _take(taken, m.start(), m.end())
            value: Any = kind
            if kind == "n":
                value = number(m[1]) * _UNIT[m[2]]
            yield Claim(field, value, m.start(), m.end(), m[0])


# ---------------------------------------------------------------- deals, one sentence at a time

_AMOUNT = re.compile(USD + r"\s*-?\s*(?:off|discount|coupon|voucher)\b|\bsave\s+" + USD)
_COUPON_WORD = re.compile(r"\b(?:coupon|voucher|promo(?: code)?|discount code)s?\b")
_FREE_SHIPPING = re.compile(
    r"(?P<neg>\bno |\bnot |n't )?(?:free (?:shipping|delivery)|ships? (?:for )?free|shipping (?:is )?free|delivery is free"
    r"|shipped (?:for )?free|free to ship|(?:shipping|delivery) (?:is |costs )?nothing|(?:shipping|delivery)(?:'s| is) on "
    r"(?:us|the house))")
_BUNDLE = re.compile(r"(?:buy|order|get|purchase|grab|take|pick up)\s+" + N + r"\s+or more\b|" + N + r"\s+or more (?:items|units|of them)")
_PCT = re.compile(r"(?:extra\s+)?(\d+)\s?(?:%|percent)(?:\s+(?:\w+\s+)?(?:off|discount))?")


def _sentences(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each sentence: a stop followed by a space or the end ("$49.00." ends once)."""
    start = 0
    for m in re.finditer(r"[.!?](?=\s|$)|\n", text):
        yield start, m.end()
        start = m.end()
    if start < len(text):
        yield start, len(text)


def _deal_claims(text: str, taken: list[bool]) -> Iterator[Claim]:
    for s0, s1 in _sentences(text):
        part = text[s0:s1]
        anchors = []  # (kind, start, end, value, negated)
        for m in _AMOUNT.finditer(part):
            anchors.append(("coupon", m.start(), m.end(), number(m[1] or m[2]), False))
        for m in _COUPON_WORD.finditer(part):
            if not any(a[1] <= m.start() < a[2] for a in anchors):
                anchors.append(("coupon_word", m.start(), m.end(), None, False))
        for m in _FREE_SHIPPING.finditer(part):
            anchors.append(("free_shipping", m.start(), m.end(), None, bool(m["neg"])))
        bundle = [m for m in _BUNDLE.finditer(part)]
        thresholds = [m for m in THRESHOLD.finditer(part)]
        anchors = [a for a in anchors if _free(taken, s0 + a[1], s0 + a[2])]
        claims: dict[int, list[Any]] = {}  # anchor index -> [kind, start, end, amount, threshold, negated]
        for i, (kind, a, b, value, neg) in enumerate(anchors):
            claims[i] = [kind, a, b, value, None, neg]
        words = [i for i, c in claims.items() if c[0] == "coupon_word"]
        for i in words:  # a coupon word joins the nearest amount of its sentence
            amounts = [j for j, c in claims.items() if c[0] == "coupon"]
            if amounts:
                j = min(amounts, key=lambda j: abs(claims[j][1] - claims[i][1]))
                claims[j][1], claims[j][2] = min(claims[j][1], claims[i][1]), max(claims[j][2], claims[i][2])
                del claims[i]
        for t in thresholds:
            if not _free(taken, s0 + t.start(), s0 + t.end()):
                continue
            open_ = [i for i, c in claims.items() if c[4] is None and c[0] != "coupon_word"]
            if not open_:
                continue
            i = min(open_, key=lambda i: min(abs(claims[i][1] - t.end()), abs(claims[i][2] - t.start())))
            claims[i][4] = number(t[1])
            claims[i][1], claims[i][2] = min(claims[i][1], t.start()), max(claims[i][2], t.end())
        for kind, a, b, amount, threshold, neg in claims.values():
            _take(taken, s0 + a, s0 + b)
            field = "coupon" if kind.startswith("coupon") else kind
            value = (amount, threshold) if field == "coupon" else threshold
            yield Claim(field, value, s0 + a, s0 + b, text[s0 + a : s0 + b], neg)
        bundles = []
        for m in bundle:
            pct = next((p for p in _PCT.finditer(part) if abs(p.start() - m.end()) < 40 or abs(m.start() - p.end()) < 40), None)
            a, b = (min(m.start(), pct.start()), max(m.end(), pct.end())) if pct else (m.start(), m.end())
            if _free(taken, s0 + a, s0 + b):
                _take(taken, s0 + a, s0 + b)
                bundles.append([a, b, (number(m[1] or m[2]), int(pct[1]) if pct else None)])
        for m in re.finditer(r"\bbundles?\b:?", part):
            if _free(taken, s0 + m.start(), s0 + m.end()):
                _take(taken, s0 + m.start(), s0 + m.end())
                if bundles:  # "Bundle: buy 3 or more ..." is one claim
                    bundles[0][0], bundles[0][1] = min(bundles[0][0], m.start()), max(bundles[0][1], m.end())
                else:
                    bundles.append([m.start(), m.end(), (None, None)])
        for a, b, value in bundles:
            yield Claim("bundle", value, s0 + a, s0 + b, part[a:b])
        for m in _PCT.finditer(part):
            if _free(taken, s0 + m.start(), s0 + m.end()):
                _take(taken, s0 + m.start(), s0 + m.end())
                yield Claim("discount", int(m[1]), s0 + m.start(), s0 + m.end(), m[0])


# ---------------------------------------------------------------- promises no LiveShop doc line makes

PROMISES = re.compile(
    r"\bfree (?!(?:returns?|shipping|delivery|within|on|over|to|if|when|for|of|in|and|or|with|from|at|after|ships?|"
    r"the|your|any|\d)\b)[a-z][\w-]*(?: (?:bag|case|box|kit|pouch|set|gift|sample|item|bottle)s?\b)?"
    r"|\b(?:gift(?:[- ]wrap\w*| box(?:es)?| bag| card| set)?|bonus|freebies?|free of charge|complimentary \w+)\b"
    r"|\b(?:worldwide|internationally|international\w* (?:shipping|delivery|orders?)|overseas|anywhere(?: in the world)?"
    r"|all countries|any country|every country|all over the world|global(?:ly| shipping))\b"
    r"|\b(?:next[- ]day|same[- ]day|overnight|express|expedited|priority) (?:shipping|delivery|dispatch)?"
    r"|\bships? (?:today|tomorrow|immediately|right away)|\b(?:with)?in 24 hours\b"
    r"|\b(?:money[- ]back|satisfaction guarantee\w*|price match\w*|best price|lowest price|price guarantee)"
    r"|\b(?:waterproof|water[- ]resistant|hypoallergenic|hand[- ]?made|eco[- ]friendly|sustainabl[ey]|vegan|organic(?! cotton)"
    r"|cruelty[- ]free|dermatologist\w*|clinically \w+|certified|award[- ]winning|best[- ]?sell\w*|limited edition"
    r"|authentic|genuine|non[- ]toxic|fragrance[- ]free|bpa[- ]free|\w+-free|breathable|noise[- ]cancel\w*"
    r"|wireless|rechargeable|dishwasher[- ]safe|\w+-?proof|\w+[- ](?:resistant|repellent))\b"
    r"|\b(?:installments?|pay later|cash on delivery|financing|interest[- ]free)\b"
    r"|\b(?:restock\w*|back in stock|pre-?orders?|more coming|sells? out (?:fast|quickly|within|in)|selling (?:fast|out)"
    r"|(?:most )?popular|trending|in high demand)\b"
    r"|\b(?:comes? with|throw(?:n|s)? in|included|bundled with) (?!(?:a |an |the )?(?:#|\d|warranty|discount|coupon|"
    r"livestream|free returns|free shipping|\w+-(?:month|year|day)))(?:a |an |some |two |free )?[a-z]+(?: [a-z]+)?"
    r"|\b(?:bogo|buy one,? get one|two for one|2 for 1)\b"
    r"|\b(?:ends? (?:today|tonight|soon|at midnight)|today only|only today|last chance|flash sale|while (?:stocks?|supplies) last)")


def _promise_claims(text: str, taken: list[bool]) -> Iterator[Claim]:
    masked = "".join("#" if t else ch for ch, t in zip(text, taken, strict=True))  # words a frame took are gone
    for m in PROMISES.finditer(masked):
        if _free(taken, m.start(), m.end()):
            _take(taken, m.start(), m.end())
            yield Claim("promise", m[0].strip(), m.start(), m.end(), m[0].strip())


# ---------------------------------------------------------------- vocabulary fields, prices, stock

_STATUS = re.compile(
    r"(?P<inneg>\b(?:not|isn't|is not|aren't|are not|never|no longer) (?:sold out|out of stock))"
    r"|(?P<out>\bsold out|\bout of stock|\bnone left|\b(?:all )?gone\b|\bnone (?:available|in stock)|\bno (?:\w+ ){0,2}left|\bnot (?:in stock|available)|\bunavailable"
    r"|(?:don't|do not) have (?:it|them|any|that|this|one)|(?<![\w.])(?:0|zero) left)"
    r"|(?P<count>(?:\bonly |\bjust )?(?<![\w.$,])(?<!size )(\d+)\s+(?:(?!(?:is|are|ml)\b)[a-z]+\s+){0,2}?(?:left|remaining|in stock|available|units?|"
    r"pieces?|pairs?|items?)\b|\b(?:only|just)\s+(\d+)\b(?!\s*(?:days?|months?|%|or more|\.\d)))"
    r"|(?P<offered>\bcomes? in|\balso in|\boffered in)"
    r"|(?P<in>\bin stock|\bavailable|\b(?:get|have|buy|order) (?:it|them|one) in|\bstill ha(?:ve|s)|\bwe have|\bhave (?:it|them)|\bleft)\b")
_LETTER_SIZES = re.compile(r"(?<![\w'’])(XXS|XS|S|M|L|XL|XXL)(?![\w'’])")


def _clause(text: str, start: int, end: int, bounds: re.Pattern[str] = _CLAUSE) -> tuple[int, int]:
    """The clause around ``text[start:end]``: from the last bound before it to the first after it."""
    a = max((m.end() for m in bounds.finditer(text, 0, start)), default=0)
    b = next((m.start() for m in bounds.finditer(text, end)), len(text))
    return a, b


def _sizes_in(raw: str, text: str, a: int, b: int, sizes: set[str]) -> set[str]:
    found = {m[1] for m in _LETTER_SIZES.finditer(raw, a, b) if m[1] in sizes}
    for size in sizes - found:
        if not size.isalpha() or " " in size:  # 42, "30 ml", "one size"
            colours = "|".join(ALL_COLOURS)
            pattern = rf"(?:size |in |\b(?:{colours}) )" + re.escape(size.lower()) if size.isdigit() else re.escape(size.lower())
            if re.search(rf"{pattern}(?!\w)", text[a:b]):
                found.add(size)
    return found


def _stock_claims(raw: str, text: str, taken: list[bool], sizes: set[str]) -> Iterator[Claim]:
    for m in _STATUS.finditer(text):
        if not _free(taken, m.start(), m.end()):
            continue
        a, b = _clause(text, m.start(), m.end())
        hits = [h for c in ALL_COLOURS for h in re.finditer(rf"\b{c}\b", text[a:b])]
        colours = {h[0] for h in hits}
        found = _sizes_in(raw, text, a, b, sizes)
        size_hits = [h for s in found for h in re.finditer(rf"(?:\bsizes? )?(?<![\w'])({re.escape(s.lower())})(?![\w'])", text[a:b])]
        ends = [m.start(), m.end()] + [a + h.start() for h in hits + size_hits] + [a + h.end() for h in hits + size_hits]
        kind = m.lastgroup if m.lastgroup != "inneg" else "in"
        if kind == "count":
            status: Any = number(m.group(4) or m.group(5))
        else:
            status = {"out": 0, "in": "in", "offered": "offered"}[kind]
        if kind == "in" and m[0].strip() == "left" and not colours:
            continue  # "left" alone is not a stock claim ("what's left to say")
        _take(taken, m.start(), m.end())
        yield Claim("stock", (frozenset(colours), frozenset(found), status), min(ends), max(ends), text[min(ends) : max(ends)])


_MADE_OF = re.compile(r"\bmade (?:of|from|out of|with) (?P<v>[a-z][a-z -]{1,30}?)(?=[.,;!?]|$| and | but | so | which )")
_MADE_IN = re.compile(r"\b(?:made|produced|manufactured|crafted|assembled|sewn) in (?:the )?(?P<v>[a-z][a-z ]{1,20}?)"
                      r"(?=[.,;!?]|$| and | but | so | which )")


def _vocab_claims(text: str, taken: list[bool], names: list[bool]) -> Iterator[Claim]:
    for field, pattern in (("material", _MADE_OF), ("origin", _MADE_IN)):  # "made of soft nubuck": any value
        for m in pattern.finditer(text):
            if _free(taken, m.start("v"), m.end("v")) and _free(names, m.start("v"), m.end("v")):
                _take(taken, m.start(), m.end())
                yield Claim(field, m["v"].strip(), m.start(), m.end(), m[0], bool(_NEG_BEFORE.search(text[: m.start()])))
    for field, words in (("material", MATERIALS), ("origin", COUNTRIES)):
        pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b")
        for m in pattern.finditer(text):
            if _free(taken, m.start(), m.end()) and _free(names, m.start(), m.end()):
                _take(taken, m.start(), m.end())
                yield Claim(field, m[0], m.start(), m.end(), m[0], bool(_NEG_BEFORE.search(text[: m.start()])))
    for pattern, value in CARE_WORDS:
        for m in re.finditer(pattern, text):
            if _free(taken, m.start(), m.end()):
                _take(taken, m.start(), m.end())
                yield Claim("care", value, m.start(), m.end(), m[0], bool(_NEG_BEFORE.search(text[: m.start()])))


_LIST = re.compile(r"(?:\bwas|\boriginally|\bregular(?:ly)?|\blist(?: price)?|\busual(?:ly)?|\binstead of|\bdown from|\bfrom"
                   r"|\bfull price|\bnormally|\bbefore)\s*(?:price\s*)?(?:of\s*|is\s*|:\s*)?$")
_UNIT_AFTER = re.compile(r"^\s*(?:each|per (?:item|unit|piece)|apiece|a piece|a unit|for one\b|for 1\b)")
_UNIT_BEFORE = re.compile(r"(?:\bone|\beach|\bunit price|\bper unit|\ba single one)\s*(?:costs?|is|:)?\s*$")
_QUANTITY = re.compile(r"(?:\bfor|\bbuy(?:ing)?|\border(?:ing)?|\bget(?:ting)?|\bof|\bx)\s+" + N + r"\b(?!\s*(?:%|days?|"
                       r"months?|left|\$|or more))|\b" + N + r"\s+(?:of (?:them|these|those|the \w+)|x\b|together|(?:would |will )?"
                       r"(?:cost|costs|come to|comes to)\b)")


def _price_claims(text: str, taken: list[bool]) -> Iterator[Claim]:
    for m in re.finditer(USD + r"(?:\s*(?:each|per (?:item|unit|piece)|apiece))?", text):
        if not _free(taken, m.start(), m.end()):
            continue
        _take(taken, m.start(), m.end())
        before, after = text[max(0, m.start() - 24) : m.start()], text[m.start(1) + len(m[1]) :]
        role = "list" if _LIST.search(before) else "unit" if (_UNIT_AFTER.match(after) or _UNIT_BEFORE.search(before)) else "price"
        yield Claim("price", (role, number(m[1])), m.start(), m.end(), m[0])
    for m in _QUANTITY.finditer(text):
        if _free(taken, m.start(), m.end()):
            _take(taken, m.start(), m.end())
            yield Claim("quantity", number(m[1] or m[2]), m.start(), m.end(), m[0])


# ---------------------------------------------------------------- subjects and the whole reply


def product_mentions(text: str, facts: tuple[ProductFacts, ...]) -> list[tuple[int, int, int]]:
    """(start, end, product index) of each product named in ``text`` (full title or unique short name)."""
    shorts = [f.short_name for f in facts]
    out = []
    for i, f in enumerate(facts):
        names = [f.title] + ([shorts[i]] if shorts[i] and shorts.count(shorts[i]) == 1 else [])
        for name in names:
            pattern = r"[^0-9a-z]+".join(re.escape(w) for w in re.sub(r"[^0-9a-z]+", " ", name.lower()).split())
            out += [(m.start(), m.end(), i) for m in re.finditer(rf"(?<![0-9a-z]){pattern}s?(?![0-9a-z])", text)]
    out.sort(key=lambda m: (m[0], -m[1]))
    return [m for k, m in enumerate(out) if not any(o[0] <= m[0] < o[1] for o in out[:k])]


def not_stated_scopes(text: str) -> list[tuple[int, int]]:
    """The clauses that say the docs do not state something: what they name is not claimed."""
    return [_clause(text, m.start(), m.end(), _SCOPE) for m in NOT_STATED.finditer(text)]


def extract_claims(reply: str, facts: tuple[ProductFacts, ...] = ()) -> list[Claim]:
    """Every claim of ``reply`` about the products ``facts`` (subjects resolved), in reply order."""
    text = lower_same_length(reply)
    taken = [False] * len(text)
    mentions = product_mentions(text, facts)
    names = [False] * len(text)
    for a, b, _ in mentions:  # product names are not claims ("Atlas Classic Dress" names no material)
        _take(names, a, b)
    for a, b in not_stated_scopes(text):
        _take(taken, a, b)
    sizes = {s for f in facts for s in f.sizes}
    claims = [*_fixed_claims(text, taken), *_deal_claims(text, taken), *_promise_claims(text, taken),
              *_stock_claims(reply, text, taken, sizes), *_vocab_claims(text, taken, names), *_price_claims(text, taken)]
    subjects = [(a, i) for a, _, i in mentions if not re.search(r"(?:\bthan|\bunlike|\bvs\.?|\bversus|\bcompared to|"
                                                                 r"\bover)(?: the)?\s*$", text[max(0, a - 16) : a])]
    out = []
    for c in sorted(claims, key=lambda c: c.start):
        subject = max(((a, i) for a, i in subjects if a < c.start), default=(None, None))[1]
        if c.field == "comparison" and re.match(r"(?: one| option)?\s+(?:is|would be)\s", text[c.end : c.end + 16]):
            subject = next((i for a, i in subjects if a >= c.end), subject)  # "the cheaper one is the X"
        out.append(Claim(c.field, c.value, c.start, c.end, reply[c.start : c.end], c.negated, subject))
    return out
