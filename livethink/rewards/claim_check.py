"""The claim checker: every claim a reply makes must agree with the docs (pure functions).

``check_claims(task, reply, answer_span)`` reads the reply's claims (``claims.py``) and holds each against the
facts of the product it is about (``doc_facts.py``). A claim is

- **contradicted** when the docs state the field otherwise ("ships in 5 days", docs: 3; "returns are never
  accepted", docs: free returns within 14 days; "the Y is cheaper" when it is not);
- **unsupported** when the docs do not state the field ("lifetime warranty" with no warranty line, "made in
  Italy" with no origin line, any ``promise``: free gifts, worldwide or next-day shipping, ...);
- **incomplete** when it states a conditional deal without its condition ("$15 off", "free shipping": the docs
  give them only over a threshold) or names a deal without saying what it is ("coupon", "bundle").

Three more things make a reply's claims unusable, whatever the docs say:

- **hedge**: "maybe", "probably", "either ... or", or two different candidates of one kind joined by "or"
  ("$63.00 or $70.00", "the X or the Y", "cotton or polyester", "yes or no");
- **self-correction**: "actually,", "no wait", "I mean", ... or a second yes/no that disagrees with the first;
- **stray words**: a figure or a field keyword (coupon, bundle, warranty, returns, shipping, free, ...) that no
  claim, answer or product name accounts for: a bag of keywords is not a claim.

Any issue makes C = 0 (``correctness.check_reply``). Helpfulness (``helpfulness.py``) needs a helpful fact of the
task stated as a true claim about the right product: ``helpful_match``. For docs that are not LiveShop docs (user
data) only promises are checked, against the raw doc text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from livethink.data.schema import HelpfulFact, Task
from livethink.rewards.claims import Claim, extract_claims, not_stated_scopes, product_mentions
from livethink.rewards.doc_facts import ALL_COLOURS, COUNTRIES, DOC_CARE, MATERIALS, ProductFacts, task_facts
from livethink.rewards.text import lower_same_length, number_mentions

_HEDGE = re.compile(r"\b(?:maybe|perhaps|probably|possibly|presumably|i (?:think|believe|guess|suppose)|i'm guessing"
                    r"|could be|might be|if i recall|roughly|approximately|somewhere (?:around|between)"
                    r"|either\b[^.!?]*\bor|or (?:maybe|possibly|perhaps|so)|give or take|ballpark|-ish|more or less)\b")
_SELF_CORRECTION = re.compile(r"\bactually,|\bno,? wait\b|\bwait,|\bcorrection\b|\bi mean\b|\bscratch that\b"
                              r"|\bon second thought\b|\bi meant\b|\bmy mistake\b|\boops\b")
_KEYWORDS = re.compile(r"\b(?:coupons?|vouchers?|promo|codes?|bundles?|warranty|warranties|guarantee\w*|returns?|returnable"
                       r"|refunds?|shipping|ships?|shipped|delivery|free|sizes?)\b")
_YES_NO = re.compile(r"(?:^|[.!?]\s+)(?:(?:actually|sorry|oh|wait|well)[, ]+)?(?P<w>yes|yeah|yep|no|nope|nah)\b")
_VALUE_WORDS = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in (*MATERIALS, *COUNTRIES, "yes", "no")) + r")\b")


@dataclass(frozen=True)
class ClaimIssue:
    """One reason the reply's claims fail: ``status`` is contradicted | unsupported | incomplete | hedge |
    self-correction | stray | no claim; ``claim`` is the reply's words."""

    status: str
    claim: str
    reason: str
    field: str = ""

    def __str__(self) -> str:
        return f"{self.status} claim {self.claim!r}: {self.reason}"


@dataclass(frozen=True)
class ClaimReport:
    claims: tuple[Claim, ...]
    issues: tuple[ClaimIssue, ...]
    subjects: tuple[int | None, ...]  # the resolved subject of each claim
    true: tuple[bool, ...]  # whether each claim agrees with the docs

    @property
    def ok(self) -> bool:
        return not self.issues


def default_subject(task: Task, facts: tuple[ProductFacts, ...]) -> int | None:
    """The product a claim that names none is about: a comparison's reference product, else the first product
    the question names, else the one the chat named in the colour asked ("the green one"), else the only one."""
    text = lower_same_length(task.question)
    ref = str(task.reference.value).lower() if task.reference.kind == "entity" else None
    for i, f in enumerate(facts):
        if ref and f.title.lower() == ref:
            return i
    named = product_mentions(text, facts)
    if named:
        return named[0][2]
    host = lower_same_length(" ".join(t.content for t in task.history if t.role == "host"))
    colours = {c for c in ALL_COLOURS if re.search(rf"\b{c}\b", text)}
    in_chat = [i for _, _, i in product_mentions(host, facts)]
    fits = [i for i in in_chat if colours & set(facts[i].colours)] or in_chat
    return fits[0] if fits else (0 if len(facts) == 1 else None)


def _near(a: float, b: float | None) -> bool:
    return b is not None and abs(a - b) <= 0.01 + 1e-9


def _words(text: str) -> set[str]:
    return set(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def _question_entry(task: Task, p: ProductFacts) -> tuple[set[str], set[str]]:
    q = task.question
    colours = {c for c in p.colours if re.search(rf"\b{c}\b", q.lower())}
    sizes = {s for s in p.sizes if re.search(rf"(?:\bin |\bsize ){re.escape(s)}(?![\w'])", q, re.IGNORECASE if not s.isalpha() else 0)}
    return colours, sizes


def _coupon_applies(task: Task, p: ProductFacts) -> bool:
    """Whether the price the question asks for already meets ``p``'s coupon threshold ("with the $10 off coupon"
    needs no condition when the quoted order qualifies)."""
    if p.coupon is None or task.reference.kind != "number" or task.reference.unit != "usd":
        return False
    m = re.search(r"(?<![\w.])(\d+)(?![\w.])", task.question)
    quantity = int(m.group(1)) if m else 1
    subtotal = p.sale_price * quantity
    if p.bundle and quantity >= p.bundle[0]:
        subtotal *= (100 - p.bundle[1]) / 100
    return subtotal + 1e-9 >= p.coupon[1]


def resolve_stock(claim: Claim, p: ProductFacts, task: Task) -> Claim:
    """A stock claim with the colour or size it leaves out taken from the question ("you can get it in 40" after
    "do you have it in navy in 42?" is about navy 40)."""
    if claim.field != "stock":
        return claim
    colours, sizes, status = claim.value
    asked_colours, asked_sizes = _question_entry(task, p)
    value = (colours or frozenset(asked_colours), sizes or frozenset(asked_sizes), status)
    return Claim(claim.field, value, claim.start, claim.end, claim.text, claim.negated, claim.subject)


def verify(claim: Claim, p: ProductFacts, facts: tuple[ProductFacts, ...], task: Task) -> tuple[str, str] | None:
    """None if ``claim`` agrees with the facts of ``p`` (its subject), else (status, reason)."""
    field, v, t = claim.field, claim.value, p.title
    if field == "comparison":
        dim, direction = v
        value = {"price": lambda f: f.sale_price, "shipping": lambda f: f.shipping_days, "returns": lambda f: f.return_days}[dim]
        others = [f for f in facts if f is not p]
        if not others or value(p) is None or any(value(f) is None for f in others):
            return "unsupported", f"nothing on screen to compare the {t} with on {dim}"
        holds = all((value(p) - value(f)) * direction > 0 for f in others) != claim.negated
        return None if holds else ("contradicted", f"the {t} is not {claim.text.strip()} ({dim}: {value(p)} vs "
                                   + ", ".join(str(value(f)) for f in others) + ")")
    if field in ("returns", "warranty", "shipping"):
        stated = {"returns": p.return_days, "warranty": p.warranty_months, "shipping": p.shipping_days}[field]
        unit = "months" if field == "warranty" else "days"
        if stated is None:
            return "unsupported", f"the docs state no {field} for the {t}"
        if v in ("forever", "lifetime", "none"):
            return "contradicted", f"docs: {field} {stated} {unit}"
        if v in ("free", "some"):
            return None
        return None if v == stated else ("contradicted", f"docs: {field} {stated} {unit}, not {v:g}")
    if field == "coupon":
        amount, threshold = v
        markdown = round(p.price - p.sale_price, 2)
        if amount is not None and threshold is None and p.discount_pct and _near(amount, markdown):
            return None  # "$16.78 off": the livestream discount in dollars
        if p.coupon is None:
            return "unsupported", f"the docs state no coupon for the {t}"
        if amount is None:
            return "incomplete", "names a coupon without saying what it takes off"
        if not _near(amount, p.coupon[0]):
            return "contradicted", f"docs: coupon ${p.coupon[0]:,.0f} off, not ${amount:,.2f}"
        if threshold is None and not _coupon_applies(task, p):
            return "incomplete", f"leaves out the coupon's condition (orders of ${p.coupon[1]:,.0f} or more)"
        if threshold is None:
            return None
        return None if _near(threshold, p.coupon[1]) else ("contradicted", f"docs: coupon on orders of ${p.coupon[1]:,.0f} or more")
    if field == "free_shipping":
        if claim.negated:
            return None if p.free_shipping_over is None else ("contradicted", f"docs: free shipping over ${p.free_shipping_over:,.2f}")
        if p.free_shipping_over is None:
            return "unsupported", f"the docs state no free shipping for the {t}"
        if v is None:
            return "incomplete", f"leaves out free shipping's condition (over ${p.free_shipping_over:,.2f})"
        return None if _near(v, p.free_shipping_over) else ("contradicted", f"docs: free shipping over ${p.free_shipping_over:,.2f}")
    if field == "bundle":
        if p.bundle is None:
            return "unsupported", f"the docs state no bundle deal for the {t}"
        if v[0] is None or v[1] is None:
            return "incomplete", "names a bundle deal without its terms"
        return None if (v[0], v[1]) == p.bundle else ("contradicted", f"docs: buy {p.bundle[0]} or more, extra {p.bundle[1]}% off")
    if field == "discount":
        allowed = {p.discount_pct} - {0} | ({p.bundle[1]} if p.bundle else set())
        if not allowed:
            return "unsupported", f"the docs state no percentage off for the {t}"
        return None if v in allowed else ("contradicted", f"docs: {', '.join(f'{x}%' for x in sorted(allowed))} off")
    if field == "promise":
        return None if v in p.text else ("unsupported", f"the docs promise no {v!r}")
    if field == "price":
        role, amount = v
        allowed = {p.price} if role == "list" else {p.price, p.sale_price, *(p.quote(q) for q in range(1, 6))}
        if task.reference.kind == "number" and task.reference.unit == "usd":
            allowed.add(float(task.reference.value))
        return None if any(_near(amount, a) for a in allowed) else ("contradicted", f"no price of the {t} is ${amount:,.2f}")
    if field == "stock":
        colours, sizes, status = v
        if not p.stock:
            return "unsupported", f"the docs state no stock for the {t}"
        if colours - set(p.colours):
            return "contradicted", f"the {t} comes in {', '.join(p.colours)} only"
        if sizes - set(p.sizes):
            return "contradicted", f"the {t} comes in sizes {', '.join(p.sizes)} only"
        entries = [n for c, s, n in p.stock if (not colours or c in colours) and (not sizes or s in sizes)]
        if status == 0:  # "sold out": every entry it names (the whole product when it names none)
            ok = bool(entries) and all(n == 0 for n in entries)
        else:
            ok = {"offered": bool(entries), "in": any(n > 0 for n in entries)}.get(status) if isinstance(status, str) else (
                any(n == status for n in entries))
        return None if ok else ("contradicted", f"docs: {' / '.join(f'{c} {s}: {n} left' for c, s, n in p.stock if n in entries)}")
    if field in ("material", "origin", "care"):
        stated = getattr(p, field)
        if stated is None:
            return "unsupported", f"the docs state no {field} for the {t}"
        if field == "care":
            same = v == DOC_CARE.get(stated)
        elif field == "material":
            same = _words(v) <= _words(stated) or _words(stated) <= _words(v)
        else:
            same = v == stated or v in {"the " + stated}
        return None if same != claim.negated else ("contradicted", f"docs: {field} {stated}")
    return None


def _hedges(text: str, facts: tuple[ProductFacts, ...]) -> list[ClaimIssue]:
    issues = [ClaimIssue("hedge", m[0], "hedges instead of stating the answer") for m in _HEDGE.finditer(text)]
    for m in re.finditer(r"\bor\b(?! (?:more|above|over|less)\b)", text):
        left, right = text[max(0, m.start() - 40) : m.start()], text[m.end() : m.end() + 40]
        for kind, find in (("number", lambda s: [(x.unit, x.value) for x in number_mentions(s)]),
                           ("product", lambda s: [i for _, _, i in product_mentions(s, facts)]),
                           ("word", lambda s: _VALUE_WORDS.findall(s))):
            a, b = find(left), find(right)
            if a and b and a[-1] != b[0] and (kind != "number" or a[-1][0] == b[0][0]):
                issues.append(ClaimIssue("hedge", text[max(0, m.start() - 20) : m.end() + 20].strip(), "offers two candidates"))
                break
    return issues


def _self_corrections(text: str) -> list[ClaimIssue]:
    issues = [ClaimIssue("self-correction", m[0], "takes its own words back") for m in _SELF_CORRECTION.finditer(text)]
    said = {m["w"] in ("yes", "yeah", "yep") for m in _YES_NO.finditer(text)}
    if len(said) > 1:
        issues.append(ClaimIssue("self-correction", "yes ... no", "answers both yes and no"))
    return issues


def _strays(reply: str, text: str, spans: list[tuple[int, int]]) -> list[ClaimIssue]:
    def covered(a: int, b: int) -> bool:
        return any(s <= a and b <= e for s, e in spans)

    issues = [ClaimIssue("stray", m.text, "a figure no claim accounts for") for m in number_mentions(reply)
              if not covered(m.start, max(m.end, m.unit_end)) and not (m.unit is None and m.value == 1)]
    issues += [ClaimIssue("stray", m[0], "a keyword outside any claim") for m in _KEYWORDS.finditer(text)
               if not covered(m.start(), m.end())]
    return issues


def check_claims(task: Task, reply: str, answer_span: tuple[int, int] | None = None) -> ClaimReport:
    """Every claim of ``reply`` checked against ``task``'s docs (see the module docstring)."""
    facts = task_facts(task)
    text = lower_same_length(reply)
    if facts is None:  # not LiveShop docs: promises only, against the raw text
        claims = tuple(c for c in extract_claims(reply) if c.field == "promise")
        docs = task.docs_text.lower()
        issues = tuple(ClaimIssue("unsupported", c.text, f"the docs promise no {c.value!r}", c.field)
                       for c in claims if c.value not in docs)
        return ClaimReport(claims, issues, tuple(None for _ in claims), tuple(c.value in docs for c in claims))
    claims = tuple(extract_claims(reply, facts))
    default = default_subject(task, facts)
    subjects, true, issues = [], [], []
    resolved = []
    for c in claims:
        s = c.subject if c.subject is not None else default
        candidates = [facts[s]] if s is not None else list(facts)
        c = resolve_stock(c, candidates[0], task)
        resolved.append(c)
        results = [verify(c, p, facts, task) for p in candidates]
        ok = any(r is None for r in results)
        subjects.append(s)
        true.append(ok)
        if not ok:
            status, reason = results[0]
            issues.append(ClaimIssue(status, c.text.strip(), reason, c.field))
    spans = [(c.start, c.end) for c in claims] + [(a, b) for a, b, _ in product_mentions(text, facts)]
    spans += not_stated_scopes(text) + ([answer_span] if answer_span else [])
    issues += _hedges(text, facts) + _self_corrections(text) + _strays(reply, text, spans)
    return ClaimReport(tuple(resolved), tuple(issues), tuple(subjects), tuple(true))


def _same(fact: Claim, claim: Claim) -> bool:
    if fact.field != claim.field or fact.negated != claim.negated:
        return False
    if fact.field == "stock":
        return fact.value[0] <= claim.value[0] and fact.value[1] <= claim.value[1] and fact.value[2] == claim.value[2]
    if fact.field == "price":
        return _near(fact.value[1], claim.value[1])
    return fact.value == claim.value


def helpful_match(task: Task, report: ClaimReport, fact: HelpfulFact,
                  answer_span: tuple[int, int] | None = None) -> Claim | None:
    """The reply's true claim (outside the answer) that states ``fact`` about the same product, or None."""
    facts = task_facts(task)
    if facts is None:
        return None
    default = default_subject(task, facts)
    wanted = []
    for c in extract_claims(fact.fact, facts):
        s = c.subject if c.subject is not None else default
        wanted.append((resolve_stock(c, facts[s], task) if s is not None else c, s))
    for claim, subject, ok in zip(report.claims, report.subjects, report.true, strict=True):
        if not ok or (answer_span and claim.start < answer_span[1] and answer_span[0] < claim.end):
            continue
        if any(_same(f, claim) and s == subject for f, s in wanted):
            return claim
    return None
