"""Correctness C ∈ {0, 1} of a reply, judged from the task's reference and docs (the rubric judge).

C = 1 iff the reply (1) answers the question with the reference answer, (2) asserts no unsupported number and
(3) makes no claim about a product field that the docs contradict or do not state, and no hedge, self-correction
or stray keyword (the claim checker, ``claim_check.py``; its issues are ``CorrectnessResult.claims``).

(1) Answer rules, by reference kind. The system prompt tells the model to give the exact answer first, so where
a reply names several candidates the *first* one is the asserted answer:

- ``number``: the first number mention whose unit fits the reference unit (``usd`` needs ``$``/``dollars``;
  ``days``/``months`` need the unit word, weeks/years are converted; ``items`` takes an explicit count such as
  ``5 left`` first, else "sold out" / "none left" as 0, else a bare number).
  Amounts qualified as not-the-answer (``$10 off``, ``over $49``, ``orders of $150``, ``was $83.90``,
  ``$67.12 each``) are skipped when another candidate exists. Tolerance: one cent for usd (rounding), exact otherwise.
- ``entity``: if the reference is one of the products on screen (comparisons), the asserted answer is the
  product the reply names *first* (full title, alias, or a unique "brand style" short name); otherwise the
  reply must contain the reference or an alias (normalised, word boundaries) and no rival value of the same
  doc field (a reply "suede or mesh" hedges when another product's doc says "Material: mesh.").
- ``yes_no``: a leading yes-word (yes, yeah, sure, ...) or no-word (no, nope, nah). For availability questions
  the first availability claim of the reply ("sold out", "not sold out", "in stock", "5 left", ...) up to a
  contrast word (but, however, ...) must agree with it; with no leading word that claim alone decides. So for
  "is the navy one still available?" the reply "No, it's not sold out" is *contradictory* and scores 0.
- ``not_stated``: the reply says the docs do not state it ("the docs don't say", "not stated", "no
  information", ...). A reply that says so for any other kind is wrong: the docs do state the answer.

(2) Support: every number the reply asserts must appear in the docs, question or history with a compatible unit
(same unit, or either side unit-less), or be the reference value itself. A bare ``1`` is exempt. A right
answer plus a hallucinated price is C = 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from livethink.data.schema import Task
from livethink.rewards.claim_check import ClaimReport, check_claims
from livethink.rewards.parse import Completion, parse_completion
from livethink.rewards.text import (
    NOT_STATED,
    Mention,
    clean,
    find_entity,
    normalize_entity,
    number_mentions,
    sentences,
)

USD_TOLERANCE = 0.01 + 1e-9  # one cent: rounding differences (half-up vs float rounding)
SUPPORT_TOLERANCE = 0.005 + 1e-9  # numbers copied from the docs: same cent

_NOT_STATED = NOT_STATED
_YES = re.compile(r"^(?:yes|yeah|yep|yup|sure|absolutely|definitely|of course|indeed|good news)\b")
_NO = re.compile(r"^(?:no|nope|nah)\b")
_AVAILABILITY = re.compile(
    r"(?P<pos_neg>\b(?:not|isn't|is not|aren't|are not|never|no longer) (?:sold out|out of stock)\b)"
    r"|(?P<neg>\bsold out\b|\bout of stock\b|\bnone left\b|\bno (?:\w+ ){0,3}left\b|\bnot (?:in stock|available)\b"
    r"|\bunavailable\b|\bno longer available\b|\b(?:isn't|is not|aren't|are not) (?:in stock|available)\b"
    r"|\b(?:don't|do not) have (?:it|them|any|that|this)\b|(?<![\w.])(?:0|zero) left\b)"
    r"|(?P<pos>\bin stock\b|\bavailable\b|\bleft\b|\bstill have\b|\bwe have\b|\bhave (?:it|them)\b)"
)
_CONTRAST = re.compile(r"\bbut\b|\bhowever\b|\binstead\b|\balthough\b|\bthough\b|\bwhile\b|;")
_AVAILABILITY_QUESTION = re.compile(r"\bavailable\b|\bin stock\b|\bleft\b|\bhave\b|\bsold out\b|\bout of stock\b")
_SOLD_OUT_QUESTION = re.compile(r"\bsold out\b|\bout of stock\b")
_NOT_ANSWER_BEFORE = re.compile(
    r"(?:\bover|\babove|\borders? of|\bpurchases? of|\bspend(?:ing)?|\bfrom|\bwas|\boriginally|\bregular(?:ly)?"
    r"|\binstead of|\bsave|\bsaving|\bbefore)\s*$"
)
_NOT_ANSWER_AFTER = re.compile(r"^\s*(?:off\b|each\b|per\b|apiece\b|a piece\b|or more\b)")


@dataclass(frozen=True)
class CorrectnessResult:
    correct: bool
    answer_ok: bool
    reason: str
    asserted: str | None = None  # how the reply's answer was read
    unsupported: tuple[str, ...] = field(default=())  # numbers in the reply with no support
    answer_span: tuple[int, int] | None = None  # where the asserted number answer sits in the reply
    claims: tuple[str, ...] = field(default=())  # claims that fail the docs (``claim_check``), with the reason
    claim_report: ClaimReport | None = field(default=None, compare=False, repr=False)


def claims_not_stated(reply: str) -> bool:
    """Whether the reply says the docs do not state the answer."""
    return _NOT_STATED.search(clean(reply)) is not None


# ---------------------------------------------------------------- support of numbers


@lru_cache(maxsize=8192)
def _source_mentions(source: str) -> tuple[Mention, ...]:
    return tuple(number_mentions(source))


def _sources(task: Task) -> str:
    turns = "\n".join(turn.content for turn in task.history)
    return f"{task.docs_text}\n{task.question}\n{turns}"


def _compatible(a: str | None, b: str | None) -> bool:
    return a is None or b is None or a == b


def unsupported_numbers(task: Task, reply: str) -> list[Mention]:
    """Number mentions of the reply that appear nowhere in the docs/question/history and are not the reference."""
    sources = _source_mentions(_sources(task))
    ref = task.reference
    bad = []
    for m in number_mentions(reply):
        if m.unit is None and m.value == 1:
            continue
        if ref.kind == "number" and _compatible(m.unit, ref.unit) and abs(m.value - float(ref.value)) <= USD_TOLERANCE:
            continue
        if any(abs(m.value - s.value) <= SUPPORT_TOLERANCE and _compatible(m.unit, s.unit) for s in sources):
            continue
        bad.append(m)
    return bad


# ---------------------------------------------------------------- answers by kind


def _number_answer(task: Task, reply: str) -> tuple[bool, str, str | None, tuple[int, int] | None]:
    ref = task.reference
    target, unit = float(ref.value), ref.unit
    mentions = number_mentions(reply)
    if unit == "items":  # an explicit count ("5 left"), else "sold out" (= 0), else a bare number
        fits = [m for m in mentions if m.unit == "items"]
        if not fits and _availability_claim(reply) is False:
            ok = target == 0
            return ok, "sold out = 0 left" if ok else f"says sold out, expected {target:g} left", "sold out", None
        fits = fits or [m for m in mentions if m.unit is None]
    elif unit is None:
        fits = mentions
    else:
        fits = [m for m in mentions if m.unit == unit]
    lowered = reply.lower()
    answers = [
        m for m in fits
        if not _NOT_ANSWER_BEFORE.search(lowered[max(0, m.start - 16) : m.start].replace("$", ""))
        and not _NOT_ANSWER_AFTER.match(lowered[m.end : m.end + 12])
    ] or fits
    if not answers:
        same_value = [m for m in mentions if abs(m.value - target) <= USD_TOLERANCE]
        if same_value:
            wrong = same_value[0]
            return False, f"right number in the wrong unit ({wrong.text!r}, expected {unit})", wrong.text, None
        return False, f"no {unit or 'number'} answer in the reply", None, None
    first = answers[0]
    span = (first.start, first.unit_end)
    tolerance = USD_TOLERANCE if unit == "usd" else 1e-6
    if abs(first.value - target) <= tolerance + 1e-9:
        return True, "number matches", first.text, span
    return False, f"number {first.text!r} != {target:g} {unit or ''}".rstrip(), first.text, span


def _short_name(title: str) -> str | None:
    words = title.split()
    return " ".join(words[:2]) if len(words) >= 3 else None


def _entity_answer(task: Task, reply: str) -> tuple[bool, str, str | None]:
    ref = task.reference
    target = normalize_entity(str(ref.value))
    titles = [doc.title for doc in task.product_docs]
    if target in {normalize_entity(t) for t in titles}:
        shorts = [_short_name(t) for t in titles]
        names: list[tuple[str, str]] = []  # (name, title it stands for)
        for title, short in zip(titles, shorts, strict=True):
            names.append((title, title))
            if short and shorts.count(short) == 1:
                names.append((short, title))
            if normalize_entity(title) == target:
                names.extend((alias, title) for alias in ref.aliases)
        hits = [(pos, title) for name, title in names if (pos := find_entity(reply, name)) >= 0]
        if not hits:
            return False, "names no product", None
        first = min(hits)[1]
        ok = normalize_entity(first) == target
        return ok, ("first product named is the reference" if ok else f"first product named is {first!r}"), first
    names = (str(ref.value), *ref.aliases)
    found = next((name for name in names if find_entity(reply, name) >= 0), None)
    if found is None:
        return False, f"reference entity {ref.value!r} not in the reply", None
    rest = normalize_entity(reply)
    for name in sorted(names, key=len, reverse=True):
        rest = re.sub(rf"(?<!\w){re.escape(normalize_entity(name))}(?!\w)", " ", rest) if normalize_entity(name) else rest
    rivals = [v for v in _field_values(task, str(ref.value)) if find_entity(rest, v) >= 0]
    if rivals:
        return False, f"hedges: also names {rivals[0]!r}", found
    return True, "entity found", found


def _field_values(task: Task, value: str) -> set[str]:
    """Other values of the doc field that holds ``value`` ("Material: suede." -> every "Material: ..." value)."""
    lines = task.docs_text.splitlines()
    target = normalize_entity(value)
    prefixes = {line[:pos] for line in lines if (pos := line.lower().find(value.lower())) > 0
                and not line.startswith("[") and find_entity(line, value) >= 0}
    values = set()
    for prefix in prefixes:
        for line in lines:
            if line.startswith(prefix) and len(line) > len(prefix):
                other = line[len(prefix) :].strip().rstrip(".")
                if normalize_entity(other) and normalize_entity(other) != target:
                    values.add(other)
    return values


def _availability_claim(text: str) -> bool | None:
    """In stock (True), not in stock (False) or no claim (None): the first availability phrase of the first
    clause that has one (a clause ends at a sentence end or a contrast word)."""
    for sentence in sentences(clean(text)):
        for clause in _CONTRAST.split(sentence):
            match = _AVAILABILITY.search(clause)
            if match:
                return match.lastgroup != "neg"
    return None


def yes_no_polarity(task: Task, reply: str) -> tuple[bool | None, str]:
    """The reply's yes/no answer (None: no answer or a contradiction) and why."""
    text = re.sub(r"^[^\w]+", "", clean(reply))
    leading = True if _YES.match(text) else False if _NO.match(text) else None
    claim = None
    question = clean(task.question)
    if task.kind == "availability" or _AVAILABILITY_QUESTION.search(question):
        first_sentence = (sentences(text) or [""])[0]
        if leading is not None:
            first_sentence = re.sub(r"^\w+(?: course| news)?\W*", "", first_sentence)
        in_stock = _availability_claim(first_sentence if leading is not None else text)
        if in_stock is not None:
            claim = (not in_stock) if _SOLD_OUT_QUESTION.search(question) else in_stock
    if leading is not None and claim is not None and leading != claim:
        return None, "contradiction: leading yes/no disagrees with the availability claim"
    if leading is not None:
        return leading, "leading yes/no"
    if claim is not None:
        return claim, "availability claim"
    return None, "no yes/no answer"


def _yes_no_answer(task: Task, reply: str) -> tuple[bool, str, str | None]:
    polarity, why = yes_no_polarity(task, reply)
    if polarity is None:
        return False, why, None
    ok = polarity == task.reference.value
    return ok, why, "yes" if polarity else "no"


# ---------------------------------------------------------------- public


def check_reply(task: Task, reply: str) -> CorrectnessResult:
    """Correctness of a reply (the text after ``</think>``) with the reason."""
    if not reply.strip():
        return CorrectnessResult(False, False, "empty reply")
    kind = task.reference.kind
    said_not_stated = claims_not_stated(reply)
    span = None
    if kind == "not_stated":
        answer_ok, why, asserted = said_not_stated, "says not stated" if said_not_stated else "does not say the docs don't state it", None
    elif said_not_stated:
        answer_ok, why, asserted = False, "claims not stated, but the docs state it", "not stated"
    elif kind == "number":
        answer_ok, why, asserted, span = _number_answer(task, reply)
    elif kind == "entity":
        answer_ok, why, asserted = _entity_answer(task, reply)
    else:
        answer_ok, why, asserted = _yes_no_answer(task, reply)
    unsupported = tuple(m.text for m in unsupported_numbers(task, reply))
    report = check_claims(task, reply, span)
    issues = tuple(str(issue) for issue in report.issues)
    if answer_ok and unsupported:
        why = f"unsupported number(s) {', '.join(unsupported)}"
    elif answer_ok and issues:
        why = issues[0]
    correct = answer_ok and not unsupported and not issues
    return CorrectnessResult(correct, answer_ok, why, asserted, unsupported, span, issues, report)


def check_correctness(task: Task, completion: Completion) -> CorrectnessResult:
    """Correctness of a whole completion (reasoning is ignored; an unclosed think block has no reply)."""
    return check_reply(task, parse_completion(completion).reply)


def correctness(task: Task, completion: Completion) -> float:
    """C ∈ {0.0, 1.0}."""
    return float(check_correctness(task, completion).correct)
