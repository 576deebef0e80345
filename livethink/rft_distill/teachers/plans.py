"""What the scripted teacher works out for a task: the useful lines of its trace and the answer they lead to.

One planner per question kind reads the parsed docs (``liveshop_docs``) and writes short, regular lines that a
small student can learn to imitate::

    Product: Quartz Studio Face Serum. Quantity: 2.
    Unit price: 42.00, 25% off, now 31.50.
    Subtotal: 31.50 × 2 = 63.00.
    Bundle: needs 3, 2 < 3, not applied.
    Coupon: 63.00 < 150.00, not applied.

The discounted unit price is copied from the doc; every other sum is written ``A op B = C`` (``×`` a quantity,
``− 10%`` a bundle's extra discount, ``− 15.00`` a coupon) and computed, not copied, in decimal with the till's
half-up rounding (as ``catalog.price_quote``): exactly what ``livethink.calculator`` returns for the same sum, so
a student decoding with the calculator gets the teacher's numbers. With ``fault=True`` the
planner injects one realistic mistake (a wrong arithmetic step, a skipped discount, a misapplied coupon, a
misread line or product) and carries it through to a wrong answer.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from livethink.data.liveshop.questions import describe_answer
from livethink.data.schema import Reference, Task
from livethink.rft_distill.teachers.liveshop_docs import Doc, mentioned
from livethink.rft_distill.teachers.price_lines import discounted, n2, price_lines, quantity

ALT_MATERIALS = ("cotton", "polyester", "leather", "nylon", "wool blend", "mesh")
ALT_ORIGINS = ("China", "Portugal", "Vietnam", "Italy", "Turkey", "Japan")


class PlanError(ValueError):
    """The question or docs are not in a shape this planner knows (the teacher falls back to a generic trace)."""


@dataclass
class Plan:
    lines: list[str]  # the useful lines, in order (the minimal trace without Answer/Helpful)
    answer: str  # the reply's answer, as ``describe_answer`` words it ("$63.00", "Yes", "3 days", ...)
    focus: Doc | None = None  # the product asked about
    used: set[str] = field(default_factory=set)  # doc fields the plan reads (the others are "irrelevant")
    checks: list[str] = field(default_factory=list)  # computations / lines a double-check may repeat
    doubts: list[str] = field(default_factory=list)  # kind-specific second-guessing sentences
    fault: str | None = None  # the mistake injected, if any
    reply_lead: str | None = None  # the reply's first sentence when not just "{answer}." (see ``answer_sentence``)

    def answer_sentence(self) -> str:
        """The reply's first sentence: the answer, worded so its words are the trace's words.

        A bare name or word would open the reply ("Sable Signature Backpack."), and BPE spells a word that
        opens a text differently from the same word after a space: the student would have to learn a second
        spelling of every brand and material instead of copying the ``Answer:`` line.
        """
        return self.reply_lead or f"{self.answer}."


def say(value: float, unit: str) -> str:
    return describe_answer(Reference(kind="number", value=float(value), unit=unit))


def _focus(docs: list[Doc], text: str) -> Doc:
    hits = mentioned(docs, text)
    if not hits:
        raise PlanError("no product of the docs is named")
    return hits[0]


# ---------------------------------------------------------------- price


def plan_price(task: Task, docs: list[Doc], rng: random.Random, fault: bool) -> Plan:
    p, q = _focus(docs, task.question), quantity(task.question)
    lines, checks, total, n_steps = price_lines(p, q)
    doubts = [f"Does shipping change the price? {p.lines['shipping']} They asked about the price, so shipping "
              f"stays out of the total."]
    if p.coupon:
        doubts.append(f"Hmm, should the coupon apply? {p.lines['coupon']} I compared the amount with the threshold "
                      f"above, so that's settled.")
    if p.bundle and q < p.bundle[0]:
        doubts.append(f"Could the bundle help? {p.lines['bundle']} They want {q}, so it doesn't apply.")
    plan = Plan(lines, say(total, "usd"), p, {"price", "coupon", "bundle"}, checks, doubts)
    if not fault:
        return plan
    options = (["slip"] if n_steps else ["misread"]) + (["no_discount"] if p.discount_pct else []) + (
        ["coupon"] if p.coupon else [])
    for _ in range(8):
        kind = rng.choice(options)
        if kind == "slip":
            args = dict(slip=(rng.randrange(n_steps), rng.choice((1.0, -1.0, 0.1, -0.1, 10.0))))
        elif kind == "no_discount":
            args = dict(skip_discount=True)
        elif kind == "coupon":
            args = dict(flip_coupon=True)
        else:  # misread the price line: one digit off
            args = dict()
            wrong = Doc(**{**p.__dict__, "price": round(p.price + rng.choice((1.0, 10.0)), 2), "now_price": None})
            bad_lines, bad_checks, bad_total, _ = price_lines(wrong, q)
            if bad_total != total:
                return Plan(bad_lines, say(bad_total, "usd"), p, plan.used, bad_checks, doubts, "misread")
            continue
        bad_lines, bad_checks, bad_total, _ = price_lines(p, q, **args)
        if bad_total != total and bad_total > 0:
            return Plan(bad_lines, say(bad_total, "usd"), p, plan.used, bad_checks, doubts, f"arithmetic:{kind}")
    return plan


# ---------------------------------------------------------------- attribute


def _line(p: Doc, name: str) -> str:
    return {
        "shipping": f"Shipping: ships in {p.shipping_days} days.",
        "returns": f"Returns: free returns within {p.return_days} days.",
        "warranty": f"Warranty: {p.warranty_months} months.",
        "material": f"Material: {p.material}.",
        "origin": f"Made in {p.origin}.",
    }[name]


def _other_value(docs: list[Doc], p: Doc, name: str, truth: str, alternatives: tuple[str, ...], rng: random.Random) -> str:
    others = [getattr(d, name) for d in docs if d is not p and getattr(d, name) and getattr(d, name) != truth]
    return others[0] if others else rng.choice([a for a in alternatives if a != truth])


def plan_attribute(task: Task, docs: list[Doc], rng: random.Random, fault: bool) -> Plan:
    p, q = _focus(docs, task.question), task.question.lower()
    yes_no = re.match(r"^is the .+ made of (?P<guess>.+)\?$", task.question, re.IGNORECASE)
    if yes_no and p.material:
        guess = yes_no.group("guess")
        read = guess if fault and p.material != guess else (
            _other_value(docs, p, "material", guess, ALT_MATERIALS, rng) if fault else p.material)
        sign = "=" if read == guess else "≠"
        lines = [f"Product: {p.title}.", f"Material: {read}. Asked: {guess}. {read} {sign} {guess}."]
        return Plan(lines, "Yes" if read == guess else "No", p, {"material"}, [lines[1]], [],
                    "misread" if fault else None)
    field_ = ("shipping" if "ship" in q else "returns" if "return" in q else "warranty" if "warranty" in q
              else "material" if ("made of" in q or "material" in q) else "origin" if ("made" in q or "country" in q)
              else None)
    if field_ is None or (field_ == "warranty" and not p.warranty_months) or (
            field_ in ("material", "origin") and not getattr(p, field_)):
        raise PlanError(f"attribute question not understood: {task.question!r}")
    unit = {"shipping": "days", "returns": "days", "warranty": "months"}.get(field_)
    value = {"shipping": p.shipping_days, "returns": p.return_days, "warranty": p.warranty_months}.get(field_)
    line = _line(p, field_)
    answer = say(value, unit) if unit else str(getattr(p, field_))
    doubts = [f"Let me make sure I have the right line and not a similar one. {line} Yes."]
    lead = {"material": "It's made of {}.", "origin": "It's made in {}."}.get(field_, "{}.")
    plan = Plan([f"Product: {p.title}.", line], answer, p, {field_}, [line], doubts, reply_lead=lead.format(answer))
    if not fault:
        return plan
    if unit:  # read the neighbouring line (shipping <-> returns, warranty -> returns), else a digit off
        wrong_field = {"shipping": "returns", "returns": "shipping", "warranty": "returns"}[field_]
        wrong_value = {"shipping": p.shipping_days, "returns": p.return_days}[wrong_field]
        wrong_line = _line(p, wrong_field)
        if wrong_value == value and unit == "days":
            wrong_value = value + 1
            wrong_line = line.replace(f" {value} ", f" {wrong_value} ")
        return Plan([plan.lines[0], wrong_line], say(wrong_value, unit), p, {wrong_field}, [wrong_line], doubts, "misread")
    alternatives = ALT_MATERIALS if field_ == "material" else ALT_ORIGINS
    wrong = _other_value(docs, p, field_, str(getattr(p, field_)), alternatives, rng)
    wrong_line = f"Material: {wrong}." if field_ == "material" else f"Made in {wrong}."
    return Plan([plan.lines[0], wrong_line], wrong, p, {field_}, [wrong_line], doubts, "misread",
                reply_lead=lead.format(wrong))


# ---------------------------------------------------------------- availability


def _stock_line(entry: tuple[str, str, int]) -> str:
    colour, size, left = entry
    return f"Stock: {colour} {size}: {left} left." if left else f"Stock: {colour} {size}: sold out."


def asked_entry(p: Doc, question: str) -> tuple[str, str, int]:
    q = question.lower()
    hits = [e for e in p.stock if re.search(rf"\b{re.escape(e[0])}\b", q)
            and (e[1] == "one size" or re.search(rf"\bin {re.escape(e[1].lower())}\b", q))]
    if len(hits) != 1:
        raise PlanError(f"cannot tell which stock entry {question!r} asks about")
    return hits[0]


def plan_availability(task: Task, docs: list[Doc], rng: random.Random, fault: bool) -> Plan:
    p = _focus(docs, task.question)
    entry = asked_entry(p, task.question)
    count = task.question.lower().startswith("how many")
    colour, size, left = entry
    doubts = [f"Let me make sure I look at the right colour and size: {colour} {size}. The stock line lists "
              f"{len(p.stock)} entries, and I need exactly this one."]
    read = entry
    if fault:
        if count:
            differs = [e for e in p.stock if e[2] != left]
        else:
            differs = [e for e in p.stock if (e[2] > 0) != (left > 0)]
        read = rng.choice(differs) if differs else (colour, size, left + 1 if count or left == 0 else 0)
    line = _stock_line(read)
    answer = say(read[2], "items") if count else ("Yes" if read[2] > 0 else "No")
    lines = [f"Product: {p.title}. Asked: {colour} {size}.", line]
    return Plan(lines, answer, p, {"stock"}, [line], doubts, "misread" if fault else None)


# ---------------------------------------------------------------- comparison


def plan_comparison(task: Task, docs: list[Doc], rng: random.Random, fault: bool) -> Plan:
    pair = mentioned(docs, task.question)
    if len(pair) < 2:
        raise PlanError("comparison needs two products named in the question")
    a, b = pair[:2]
    q = task.question.lower()
    if "cheaper" in q:
        what, values = "price now", {a.title: a.sale_price, b.title: b.sale_price}
        lines = [f"Compare: {what}."] + [
            f"{x.title}: {discounted(x, x.sale_price)}." if x.discount_pct
            else f"{x.title}: {n2(x.price)}, no discount." for x in (a, b)]
        better, verb, fmt = min, "is cheaper", n2
    elif "faster" in q:
        what, values = "shipping days", {a.title: a.shipping_days, b.title: b.shipping_days}
        lines = [f"Compare: {what}."] + [f"{x.title}: ships in {x.shipping_days} days." for x in (a, b)]
        better, verb, fmt = min, "ships faster", str
    elif "return" in q:
        what, values = "return window", {a.title: a.return_days, b.title: b.return_days}
        lines = [f"Compare: {what}."] + [f"{x.title}: free returns within {x.return_days} days." for x in (a, b)]
        better, verb, fmt = max, "has the longer return window", str
    else:
        raise PlanError(f"comparison not understood: {task.question!r}")
    if values[a.title] == values[b.title]:
        raise PlanError("the two products tie")
    if fault:  # misread: the two values swapped between the products
        va, vb = values[a.title], values[b.title]
        values = {a.title: vb, b.title: va}
        lines = [lines[0], lines[1].replace(fmt(va), fmt(vb)) if fmt(va) in lines[1] else lines[1],
                 lines[2].replace(fmt(vb), fmt(va)) if fmt(vb) in lines[2] else lines[2]]
    winner = better(values, key=values.get)
    loser = a.title if winner == b.title else b.title
    sign = "<" if better is min else ">"
    lines.append(f"{fmt(values[winner])} {sign} {fmt(values[loser])}, so the {winner} {verb}.")
    doubts = [f"Wait, am I comparing the right thing? They asked which one {verb}, so I compare the {what}"
              + (", not the list price." if what == "price now" else ".")]
    used = {"price"} if what == "price now" else {"shipping"} if what == "shipping days" else {"returns"}
    # focus (what a detour reads about) is the product named first: a detour comes before the comparison, so
    # it must not depend on the winner, which a student imitating the trace cannot know yet
    return Plan(lines, winner, a, used, [lines[-1]], doubts, "misread" if fault else None,
                reply_lead=f"The {winner} {verb}.")


# ---------------------------------------------------------------- dialogue reference


def plan_dialogue(task: Task, docs: list[Doc], rng: random.Random, fault: bool) -> Plan:
    m = re.search(r"the (\w+) one", task.question.lower())
    host = " ".join(t.content for t in task.history if t.role == "host")
    named = mentioned(docs, host)
    if not m or not named:
        raise PlanError("cannot resolve the dialogue reference")
    colour = m.group(1)
    fits = [d for d in named if any(e[0] == colour for e in d.stock)] or named
    p = fits[0]
    others = [d for d in named if d is not p]
    doubts = [f'"The {colour} one" can only mean the {p.title}: the host named it for {colour}.']
    q = task.question.lower()
    asks_price = "price" in q or "how much" in q
    if not asks_price and "ship" not in q:
        raise PlanError(f"dialogue question not understood: {task.question!r}")
    value = (lambda d: price_lines(d, 1)[2]) if asks_price else (lambda d: d.shipping_days)
    if fault:  # misread the reference: the other product, when that changes the answer
        others = [d for d in others if value(d) != value(p)]
        if others:
            p = others[0]
    misread_digit = fault and not others  # nothing to confuse it with: misread a digit
    lines = [f"History: the host said the {p.title} comes in {colour}.", f"Product: {p.title}."]
    if asks_price:  # what one would cost: the livestream discount, then any deal that applies (as for price)
        body, checks, total, _ = price_lines(p, 1, slip=(0, 1.0) if misread_digit else None)
        lines += body[1:]
        answer, used = say(total, "usd"), {"price", "coupon", "bundle"}
    else:
        days = p.shipping_days + (1 if misread_digit else 0)
        checks = [f"Shipping: ships in {days} days."]
        lines += checks
        answer, used = say(days, "days"), {"shipping"}
    return Plan(lines, answer, p, used, checks, doubts, "misread" if fault else None)


# ---------------------------------------------------------------- unanswerable


ASKED = (("warranty", "warranty", "warranty_months"), ("made of", "material", "material"),
         ("washing machine", "care instructions", "care"), ("where", "origin", "origin"), ("gift box", "gift box", None))


def plan_unanswerable(task: Task, docs: list[Doc], rng: random.Random, fault: bool) -> Plan:
    p, q = _focus(docs, task.question), task.question.lower()
    asked = next(((label, attr) for key, label, attr in ASKED if key in q), None)
    if asked is None:
        raise PlanError(f"unanswerable question not understood: {task.question!r}")
    label, attr = asked
    if attr is not None and getattr(p, attr):
        raise PlanError(f"the docs do state the {label}")
    lines = [f"Product: {p.title}. Asked: {label}.", f"Docs: nothing about {label}."]
    present = ", ".join(k for k in p.lines)
    doubts = [f"Let me scan the docs once more in case I missed it: {present}. No, nothing about {label}."]
    plan = Plan(lines, "The docs don't say", p, set(), [lines[1]], doubts)
    if not fault:
        return plan
    if attr == "warranty_months":
        months = next((d.warranty_months for d in docs if d.warranty_months), 12)
        wrong_line, answer = f"Warranty: {months} months.", say(months, "months")
    elif attr == "material":
        wrong = _other_value(docs, p, "material", "", ALT_MATERIALS, rng)
        wrong_line, answer = f"Material: {wrong}.", wrong
    elif attr == "origin":
        wrong = _other_value(docs, p, "origin", "", ALT_ORIGINS, rng)
        wrong_line, answer = f"Made in {wrong}.", wrong
    else:  # care, gift box: assume yes
        wrong_line, answer = f"Docs: {label} probably fine.", "Yes"
    return Plan([lines[0], wrong_line], answer, p, set(), [wrong_line], doubts, "misread")


PLANNERS = {
    "price": plan_price,
    "attribute": plan_attribute,
    "availability": plan_availability,
    "comparison": plan_comparison,
    "dialogue_ref": plan_dialogue,
    "unanswerable": plan_unanswerable,
}


def generic_plan(task: Task, fault: bool) -> Plan:
    """For docs in another format: a lookup trace that states the reference answer (the stand-in's shortcut)."""
    ref = task.reference
    answer = describe_answer(ref)
    if fault:
        if ref.kind == "number":
            answer = say(float(ref.value) + 1, ref.unit or "")
        elif ref.kind == "yes_no":
            answer = "No" if ref.value else "Yes"
        elif ref.kind == "not_stated":
            answer = "Yes"
        else:
            answer = "not sure which one"
    lines = [f"Question: {task.question}", "Docs: the relevant line found."]
    return Plan(lines, answer, None, set(), [], [], "misread" if fault else None)
