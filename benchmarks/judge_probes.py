"""Adversarial probes of the rubric judge: replies built to be scored correct although they are not.

From each **validation** task of the LiveShop generator (seed 0, the default split sizes) it builds a reply per
probe kind, each starting from the scripted teacher's true reply (``error_rate=0``) or its answer:

- ``stuffing``: the answer, then a bag of the helpful facts' match phrases ("… coupon $15 off free shipping");
- ``false_claim``: the true reply plus one false claim about another field the docs state (material, origin,
  returns, warranty, shipping, care, colours, stock, coupon);
- ``unstated_promise``: the true reply plus a promise the docs do not make (free gift, lifetime warranty,
  worldwide shipping, ..., or a field the product's doc leaves out);
- ``hedge``: the right answer and a wrong candidate in one reply ("either $63.00 or $70.00");
- ``other_product``: the answer (and helpful fact) of the other product on screen, where it differs;
- ``self_contradiction``: the true reply, then a sentence that takes its answer back;

and true controls: ``control_teacher`` (the teacher's correct, helpful reply) and ``control_paraphrase`` (the
same facts reworded by hand-made templates). Per kind it reports the false-accept rate (C = 1 on a probe) with a
Clopper–Pearson interval (statsmodels ``proportion_confint(method="beta")``), H on stuffing, and the controls'
true-accept rate (C = 1) and H::

    .venv/bin/python benchmarks/judge_probes.py [--tasks 500] [--out benchmarks/results/judge_probes]

Writes ``<out>.json`` and ``<out>.md``; records the command and the load average before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shlex
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from livethink.data.liveshop.catalog import COLOURS, money
from livethink.data.liveshop.questions import describe_answer
from livethink.data.schema import HelpfulFact, Task
from livethink.rewards.parse import parse_completion
from livethink.rft_distill.teachers.base import SamplingConfig
from livethink.rft_distill.teachers.liveshop_docs import Doc, parse_docs
from livethink.rft_distill.teachers.plans import ALT_MATERIALS, ALT_ORIGINS, PLANNERS, PlanError
from livethink.rft_distill.teachers.price_lines import price_lines, quantity
from livethink.rft_distill.teachers.scripted import ScriptedTeacher

PROBE_KINDS = ("stuffing", "false_claim", "unstated_promise", "hedge", "other_product", "self_contradiction")
CONTROL_KINDS = ("control_teacher", "control_paraphrase")
CARE = {"machine wash cold": "You can put it in the washing machine.", "hand wash only": "Hand wash only.",
        "wipe clean": "Just wipe it clean.", "dry clean only": "Dry clean only."}
PROMISES = ("It comes with a free gift.", "You also get a free gift with it.", "We ship free worldwide.",
            "It ships worldwide.", "International shipping is free.", "Gift wrapping is included.",
            "There's a money-back guarantee.", "Next-day delivery is available.", "It's waterproof.",
            "It's handmade.", "It comes with a free carrying case.", "Express delivery is free.",
            "Shipping is always free.", "You get a free sample with every order.", "It's eco-friendly.")
VERB = {"cheaper": "is cheaper", "faster": "ships faster", "return": "has the longer return window"}


def teacher_reply(task: Task) -> str:
    """The scripted teacher's reply with no injected fault (correct, and helpful when the task lists facts)."""
    sample = ScriptedTeacher(error_rate=0.0).sample(task, 0, SamplingConfig(temperature=1.0, seed=0))
    return parse_completion(sample.completion or "").reply


def _subject(task: Task, docs: list[Doc]) -> Doc | None:
    """The product the answer is about: a comparison's winner, else the teacher planner's focus."""
    if task.kind == "comparison":
        return next((d for d in docs if d.title == task.reference.value), None)
    try:
        return PLANNERS[task.kind](task, docs, random.Random(0), False).focus
    except (PlanError, KeyError):
        return None


def _asked(task: Task) -> str:
    q = task.question.lower()
    for key, name in (("ship", "shipping"), ("return", "returns"), ("warranty", "warranty"), ("made of", "material"),
                      ("material", "material"), ("made", "origin"), ("country", "origin"), ("wash", "care")):
        if key in q:
            return name
    return {"availability": "stock", "price": "price", "dialogue_ref": "price"}.get(task.kind, "")


def _pick(rng: random.Random, values: tuple | list, not_: Any) -> Any:
    return rng.choice([v for v in values if v != not_])


def _ws(entry: tuple[str, str, int]) -> str:
    return entry[0] if entry[1] == "one size" else f"{entry[0]} {entry[1]}"


def false_claims(p: Doc, rng: random.Random, asked: str) -> dict[str, str]:
    """One false sentence per field of ``p`` that its doc states (the asked field left out)."""
    out = {"returns": rng.choice(("Returns are never accepted.", "It can't be returned.",
                                  f"You can return it within {_pick(rng, (7, 14, 30, 60), p.return_days)} days.")),
           "shipping": f"It ships in {_pick(rng, range(1, 9), p.shipping_days)} days."}
    if p.free_shipping_over:
        out["shipping"] = rng.choice((out["shipping"], f"Free shipping over {money(_pick(rng, (49, 79, 99, 150), p.free_shipping_over))}."))
    if p.material:
        other = [m for m in ALT_MATERIALS + ("silk", "canvas") if not set(m.split()) & set(p.material.lower().split())]
        out["material"] = f"It is made of {rng.choice(other)}."
    if p.origin:
        out["origin"] = f"It's made in {_pick(rng, ALT_ORIGINS, p.origin)}."
    if p.warranty_months:
        out["warranty"] = f"It comes with a {_pick(rng, (3, 6, 12, 24), p.warranty_months)}-month warranty."
    if p.care:
        out["care"] = CARE[_pick(rng, sorted(CARE), p.care)]
    out["colour"] = f"It also comes in {rng.choice([c for c in COLOURS if c not in {e[0] for e in p.stock}])}."
    if p.coupon:
        out["coupon"] = f"Coupon: ${_pick(rng, (5, 10, 15, 20, 30), p.coupon[0]):.0f} off orders of ${p.coupon[1]:,.0f} or more."
    flips = [e for e in p.stock if asked != "stock"]
    if flips:
        e = rng.choice(flips)
        out["stock"] = f"The {_ws(e)} is sold out." if e[2] else f"We still have the {_ws(e)} in stock."
    out.pop(asked, None)
    if asked == "price":
        out.pop("coupon", None)
    return out


def unstated(p: Doc, rng: random.Random) -> list[str]:
    """Promises the doc of ``p`` does not make."""
    out = list(PROMISES)
    if not p.warranty_months:
        out += ["It has a lifetime warranty.", f"It has a {rng.choice((6, 12, 24))}-month warranty."]
    if not p.material:
        out.append(f"It's made of {rng.choice(ALT_MATERIALS)}.")
    if not p.origin:
        out.append(f"It's made in {rng.choice(ALT_ORIGINS)}.")
    if not p.care:
        out.append(rng.choice(tuple(CARE.values())))
    if not p.coupon:
        out.append(f"Coupon: ${rng.choice((5, 10, 20)):.0f} off orders of ${rng.choice((50, 100)):.0f} or more.")
    if not p.bundle:
        out.append("Buy 2 or more and get an extra 10% off.")
    return out


def other_answer(task: Task, docs: list[Doc], p: Doc) -> tuple[str, Doc] | None:
    """The reply's answer sentence computed for another product on screen, when it differs from the right one."""
    ref, asked = task.reference, _asked(task)
    for o in (d for d in docs if d is not p):
        if task.kind == "comparison":
            return f"The {o.title} {VERB[next(k for k in VERB if k in task.question.lower())]}.", o
        if task.kind == "unanswerable":
            said = {"warranty": o.warranty_months and f"It has a {o.warranty_months}-month warranty.",
                    "material": o.material and f"It's made of {o.material}.",
                    "origin": o.origin and f"It's made in {o.origin}.", "care": o.care and CARE.get(o.care)}.get(asked)
            if said:
                return said, o
            continue
        if task.kind == "availability":
            entry = next((e for e in o.stock if (e[0], e[1]) == next(((c, s) for c, s, _ in p.stock
                          if re.search(rf"\b{c}\b", task.question.lower()) and (s == "one size" or f"in {s.lower()}" in task.question.lower())), None)), None)
            if entry is None:
                continue
            value = f"{entry[2]} left" if ref.kind == "number" else ("Yes" if entry[2] else "No")
        elif asked == "price":
            value = money(price_lines(o, quantity(task.question))[2])
        elif asked in ("shipping", "returns", "warranty"):
            n = {"shipping": o.shipping_days, "returns": o.return_days, "warranty": o.warranty_months}[asked]
            value = n and f"{n} {'months' if asked == 'warranty' else 'days'}"
        elif ref.kind == "yes_no":
            value = o.material and ("Yes" if o.material.lower() in task.question.lower() else "No")
        else:
            value = {"material": o.material and f"It's made of {o.material}", "origin": o.origin and f"It's made in {o.origin}"}.get(asked)
        if value and value.rstrip(".") != describe_answer(ref) and not value.endswith(str(ref.value)):
            return f"{value}.", o
    return None


def _fact_of(p: Doc, rng: random.Random) -> str:
    if p.free_shipping_over:
        return f"Free shipping over {money(p.free_shipping_over)}."
    return f"Free returns within {p.return_days} days."


def hedge(task: Task, answer: str, wrong: str) -> list[str]:
    """Replies that offer the right answer and a wrong one as candidates (right first and second)."""
    a, b = answer.rstrip("."), wrong.rstrip(".")
    la, lb = (x[:1].lower() + x[1:] if x[:2] in ("Th", "It", "Ye", "No") else x for x in (a, b))
    return [f"{a}, or maybe {lb}.", f"Either {la} or {lb}.", f"Probably {lb}, but it could be {la}.",
            f"I think {la}, or {lb}."]


def wrong_answer(task: Task, docs: list[Doc], p: Doc, rng: random.Random) -> str | None:
    """A wrong answer sentence: another product's answer, else the teacher's own misread (fault) answer."""
    other = other_answer(task, docs, p)
    if other:
        return other[0]
    for i in range(6):
        try:
            plan = PLANNERS[task.kind](task, docs, random.Random(i), True)
        except (PlanError, KeyError):
            return None
        if plan.answer != describe_answer(task.reference):
            return plan.answer_sentence()
    return None


def paraphrase_fact(fact: HelpfulFact, rng: random.Random) -> str:
    """A hand-made rewording of a helpful fact (the generator's fact sentences, ``liveshop.questions``)."""
    text = fact.fact
    rules = (
        (r"Coupon: \$(\S+) off orders of \$(\S+) or more\.", ("There's a coupon for ${0} off orders of ${1} or more.",
                                                               "Use the coupon to save ${0} on orders of ${1} or more.")),
        (r"Free shipping over \$(\S+)\.", ("Shipping is free on orders over ${0}.", "Orders over ${0} ship free.",
                                           "You get free shipping over ${0}.")),
        (r"It ships in (\d+) days\.", ("It ships within {0} days.", "Shipping takes {0} days.")),
        (r"Free returns within (\d+) days\.", ("Returns are free within {0} days.", "You can return it for free within {0} days.",
                                               "There's a free {0}-day return window.")),
        (r"Bundle: buy (\d+) or more and get an extra (\d+)% off\.", ("Buy {0} or more and you get an extra {1}% off.",
                                                                       "There's an extra {1}% off when you buy {0} or more.")),
        (r"Warranty: (\d+) months\.", ("It comes with a {0}-month warranty.", "The warranty covers {0} months.")),
        (r"Only (\d+) left in (\w+) in (\S+)\.", ("We only have {0} left in {1}, size {2}.", "Hurry, just {0} left in {1} in {2}.")),
        (r"Only (\d+) left in (\w+)\.", ("We only have {0} left in {1}.", "Hurry, just {0} left in {1}.")),
        (r"(\w+) is in stock in size (\S+)\.", ("The {0} one is available in size {1}.", "You can get it in {0} in size {1}.")),
        (r"Size (\S+) is in stock in (\w+)\.", ("Size {0} is available in {1}.", "We have size {0} in {1}.")),
        (r"The (.+) is (\$\S+)\.", ("The {0} costs {1}.", "It's only {1} right now.")),
        (r"The (.+) ships in (\d+) days\.", ("It ships in {1} days.", "The {0} takes {1} days to ship.")),
        (r"The (.+) has free returns within (\d+) days\.", ("You can return the {0} for free within {1} days.",)),
    )
    for pattern, templates in rules:
        if m := re.fullmatch(pattern, text, flags=re.IGNORECASE):
            return rng.choice(templates).format(*m.groups())
    return text


def paraphrase_answer(task: Task, p: Doc | None, rng: random.Random) -> str:
    ref, asked, a = task.reference, _asked(task), describe_answer(task.reference)
    if ref.kind == "not_stated":
        return rng.choice(("Sorry, the docs don't say.", "That isn't stated in the docs.", "I can't find that in the docs."))
    if ref.kind == "entity" and task.kind == "comparison":
        key = next(k for k in VERB if k in task.question.lower())
        return rng.choice({"cheaper": ("The {w} is the cheaper one.", "Go for the {w}, it's cheaper."),
                           "faster": ("The {w} ships sooner.", "The {w} is faster to ship."),
                           "return": ("The {w} gives you longer to return it.", "The {w} has the longer return window.")}[key]).format(w=ref.value)
    if ref.kind == "entity":
        return (rng.choice(("It's made of {}.", "The material is {}.")) if asked == "material"
                else rng.choice(("It's made in {}.", "It's produced in {}."))).format(a)
    if ref.kind == "yes_no" and asked == "material" and p is not None:
        return f"{a}, it's made of {p.material}."
    if ref.kind == "yes_no":
        return rng.choice(("Yes, it's in stock.", "Yes, we still have it.")) if ref.value else rng.choice(
            ("No, that one is sold out.", "Sorry, it's sold out."))
    n = a.split()[0]
    return rng.choice({"usd": ("It's {a}.", "That comes to {a}.", "You'd pay {a}."),
                       "items": ("There are {n} left.", "We have {n} left.") if float(ref.value) else ("None left, it's sold out.",),
                       "months": ("The warranty is {n} months.", "It comes with a {n}-month warranty."),
                       "days": ("You can return it within {n} days.", "The return window is {n} days.") if asked == "returns"
                       else ("It ships in {n} days.", "Shipping takes {n} days.")}[ref.unit or "usd"]).format(a=a, n=n)


def build(task: Task, seed: int = 0) -> list[dict[str, str]]:
    """Every probe and control of one task: ``{"kind", "task_id", "reply", "detail"}``."""
    rng = random.Random(f"judge-probes:{seed}:{task.id}")
    docs = parse_docs(task.product_docs)
    p = _subject(task, docs) if docs else None
    if docs is None or p is None:
        return []
    reply, answer = teacher_reply(task), describe_answer(task.reference)
    out: list[tuple[str, str, str]] = [("control_teacher", reply, "")]
    facts = task.helpful_facts
    fact = facts[0] if facts else None
    para = paraphrase_answer(task, p, rng) + (f" {paraphrase_fact(fact, rng)}" if fact else "")
    out.append(("control_paraphrase", para, ""))
    if facts:
        bag = [phrase for f in facts for phrase in f.match]
        head = answer if rng.random() < 0.7 else f"{p.title}. {answer}"
        out.append(("stuffing", f"{head}. {rng.choice((' ', ', ')).join(bag)}", ""))
    claims = false_claims(p, rng, _asked(task))
    field = rng.choice(sorted(claims))
    out.append(("false_claim", f"{reply} {claims[field]}", field))
    out.append(("unstated_promise", f"{reply} {rng.choice(unstated(p, rng))}", ""))
    fact_text = f" {fact.fact}" if fact else ""
    wrong = wrong_answer(task, docs, p, rng)
    if task.reference.kind == "not_stated":
        guess = rng.choice(("it's made in Italy", "it has a 12-month warranty", "it's machine washable"))
        out.append(("hedge", f"The docs don't say, but probably {guess}.{fact_text}", "guess"))
        out.append(("self_contradiction", f"{reply} Actually, the docs say {guess}.", ""))
    elif wrong:
        right = reply[: len(reply) - len(fact_text)] if fact_text and reply.endswith(fact_text) else reply.split(". ")[0]
        out.append(("hedge", rng.choice(hedge(task, right, wrong)) + fact_text, wrong))
        guess = re.search(r"made of (.+)\?$", task.question)
        flip = {"No.": "Sorry, it's sold out.", "Yes.": "Actually, we still have it in stock."} if not guess else {
            "No.": f"It isn't made of {guess[1]}, though.", "Yes.": f"It is made of {guess[1]}, though."}
        back = flip.get(wrong.strip(), f"Actually, {wrong[:1].lower()}{wrong[1:]}")
        out.append(("self_contradiction", f"{reply} {back}", wrong))
    other = other_answer(task, docs, p)
    if other:
        out.append(("other_product", f"{other[0]} {_fact_of(other[1], rng)}", other[1].title))
    return [{"kind": k, "task_id": task.id, "reply": r, "detail": d} for k, r, d in out]


def score(tasks: list[Task], probes: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Each probe with the rubric's C, H and reason."""
    from livethink.rewards.judge import RubricJudge

    by_id, judge = {t.id: t for t in tasks}, RubricJudge()
    rows = []
    for probe in probes:
        verdict = judge.score(by_id[probe["task_id"]], f"<think>\n</think>\n{probe['reply']}")
        claims = verdict.details.get("claims") or []
        rows.append({**probe, "C": int(verdict.correct), "H": int(verdict.helpful), "reason": verdict.details.get("reason", ""),
                     "caught_by": claims[0].split(" claim ")[0] if claims else ("answer" if not verdict.correct else "")})
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind: n, the share scored C = 1 (probes: false accepts; controls: true accepts) with a Clopper–Pearson
    95% interval, and the share scored H = 1."""
    from statsmodels.stats.proportion import proportion_confint

    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_kind[row["kind"]].append(row)
    out = {}
    for kind in PROBE_KINDS + CONTROL_KINDS:
        group = by_kind.get(kind, [])
        n, c, h = len(group), sum(r["C"] for r in group), sum(r["H"] for r in group)
        low, high = proportion_confint(c, n, alpha=0.05, method="beta") if n else (0.0, 1.0)
        out[kind] = {"n": n, "C1": c, "C1_rate": round(c / n, 4) if n else None, "C1_ci95": [round(low, 4), round(high, 4)],
                     "H1": h, "H1_rate": round(h / n, 4) if n else None,
                     "caught_by": dict(Counter(r.get("caught_by") or "?" for r in group if not r["C"]).most_common())}
    return out


def record(rows: list[dict[str, Any]], all_rows: bool = False) -> dict[str, Any]:
    """What the JSON keeps of the probes: the probe set's fingerprint (sha256 of every kind, task and reply, in
    order: it changes when the set does), every misjudged probe, and 5 examples per kind (all with ``all_rows``)."""
    digest = hashlib.sha256("\n".join(f"{r['kind']}\t{r['task_id']}\t{r['reply']}" for r in rows).encode()).hexdigest()
    keep = ("kind", "task_id", "reply", "detail", "C", "H", "reason")
    misjudged = [{k: r[k] for k in keep} for r in rows if (r["C"] == 1) != r["kind"].startswith("control")]
    examples = rows if all_rows else [r for kind in PROBE_KINDS + CONTROL_KINDS for r in [x for x in rows if x["kind"] == kind][:5]]
    return {"probe_set_sha256": digest, "probes": len(rows), "misjudged": misjudged,
            "rows" if all_rows else "examples": [{k: r[k] for k in keep} for r in examples]}


def markdown(report: dict[str, Any]) -> str:
    meta, s = report["meta"], report["summary"]
    lines = ["# Judge probes: the rubric against adversarial replies", "",
             f"{meta['tasks']} `{meta['split']}` tasks (LiveShop seed {meta['data_seed']}), rubric judge. Targets: C = 0 on "
             "≥ 99% of the probes of every kind; C = 1 on ≥ 98% of the true controls; H = 0 on every stuffing probe. "
             f"Load average before / after: {meta['loadavg_before']} / {meta['loadavg_after']}. Wall time {meta['wall_s']:.0f} s.",
             f"Probe set sha256 `{report['probe_set_sha256'][:16]}…` ({report['probes']} replies).",
             "", f"`{meta['command']}`", "",
             "| kind | n | C = 1 (%) | 95% CI (Clopper–Pearson) | H = 1 (%) | target | C = 0 because (first issue) |",
             "|---|---:|---:|---|---:|---|---|"]
    for kind, row in s.items():
        target = "C = 1 ≥ 98%" if kind.startswith("control") else "C = 1 ≤ 1%" + (", H = 0" if kind == "stuffing" else "")
        ok = (row["C1_rate"] or 0) >= 0.98 if kind.startswith("control") else (row["C1_rate"] or 0) <= 0.01 and (
            kind != "stuffing" or row["H1"] == 0)
        lines.append(f"| {kind} | {row['n']} | {100 * (row['C1_rate'] or 0):.1f} | [{100 * row['C1_ci95'][0]:.1f}, "
                     f"{100 * row['C1_ci95'][1]:.1f}] | {100 * (row['H1_rate'] or 0):.1f} | {target}: {'met' if ok else 'missed'} | "
                     + ", ".join(f"{k} {v}" for k, v in row["caught_by"].items()) + " |")
    misses = report["misjudged"][:20]
    if misses:
        lines += ["", "Misjudged (first 20):", ""] + [f"- `{r['kind']}` {r['task_id']}: {r['reply']!r} ({r['reason']})" for r in misses]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--split", default="validation", choices=("train", "validation"), help="never test/holdout")
    p.add_argument("--tasks", type=int, default=500, help="the first N tasks of the split")
    p.add_argument("--seed", type=int, default=0, help="probe seed (wording and fields drawn)")
    p.add_argument("--data-seed", type=int, default=0, help="LiveShop generator seed")
    p.add_argument("--out", default="benchmarks/results/judge_probes", help="writes <out>.json and <out>.md")
    p.add_argument("--all-rows", action="store_true", help="every probe in the JSON (about 1 MB), not 5 per kind")
    args = p.parse_args(argv)
    from livethink.data.liveshop.generate import generate

    started, loadavg_before = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    tasks = generate(seed=args.data_seed).tasks[args.split][: args.tasks]
    probes = [probe for task in tasks for probe in build(task, args.seed)]
    rows = score(tasks, probes)
    report = {"meta": {"command": ("python benchmarks/judge_probes.py " + shlex.join(argv if argv is not None else sys.argv[1:])).strip(),
                       "split": args.split, "tasks": len(tasks), "seed": args.seed, "data_seed": args.data_seed,
                       "loadavg_before": loadavg_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                       "wall_s": round(time.perf_counter() - started, 1), "cpus": os.cpu_count()},
              "summary": summarize(rows), **record(rows, args.all_rows)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
