"""The scripted teacher: an embedded STAND-IN for a large, verbose reasoning model (DeepSeek-R1 in production).

It is not a model. It exists so the whole pipeline (rejection sampling, SFT, length RL, serving) runs on a CPU
in minutes with a teacher that behaves like the real one where it matters:

- **Verbose traces.** It restates the question, walks through irrelevant lines of the docs, looks at the other
  products on screen, re-checks its arithmetic ("wait, let me double-check"), second-guesses itself, then
  writes a short reply: ``"<answer>. <one helpful fact>"`` (the ``format_completion`` layout). Every one of
  these sentences is sampled, the habitual ones (restating the question, the goal, quoting the chat, the
  lead-ins) 90% of the time at temperature 1: like a real LLM's, no filler is certain.
- **Real, regular reasoning.** The useful lines (``Product: …``, ``Unit price: 83.90, 20% off, now 67.12.``,
  ``Subtotal: 67.12 × 2 = 134.24.``, ``Coupon: 134.24 < 150.00, not applied.``, ``Answer: $134.24.``,
  ``Helpful: …``) are computed from the parsed docs (``plans.py``) in one fixed format, so a small student can
  learn them; its sums are the ones ``livethink.calculator`` evaluates at decoding time. ``minimal_trace(task)``
  is exactly these lines: the shortest correct trace.
- **Mistakes to reject.** Per sample, independently: an *answer fault* with probability ``error_rate`` (wrong
  arithmetic, a skipped discount, a misapplied coupon, a misread line or product), a *hallucinated figure* in
  the reply with probability ``error_rate / 5``, and a *missing helpful fact* with probability
  ``error_rate``. Under the rubric judge the default (0.15) gives C ≈ 0.85 × 0.97 ≈ 82 % and H ≈ 70 %.
- **Temperature** scales verbosity (how many detours) and randomness: at 0 every sample of a task is the
  same; above 0 each sample index draws its own detours, wording and faults. ``top_p`` is ignored.
  A completion longer than ``max_tokens`` (whitespace words here) is cut inside the trace, like a real engine,
  and reported as the backends report it: a failed sample with ``error="truncated: ..."``.

Shortcut, stated plainly: the teacher knows the task's question kind and, for docs not in the LiveShop format
(user data), reads the answer from ``task.reference`` (``plans.generic_plan``). For LiveShop docs it computes
the answer and checks it against the reference (prices within a cent), falling back to the reference-based trace if they disagree.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence

from livethink.data.liveshop.questions import describe_answer
from livethink.data.prompt import format_completion
from livethink.data.schema import HelpfulFact, Task
from livethink.rewards.text import number_mentions
from livethink.rft_distill.teachers.base import Sample, SamplingConfig, check_k
from livethink.rft_distill.teachers.liveshop_docs import Doc, parse_docs
from livethink.rft_distill.teachers.plans import PLANNERS, Plan, PlanError, generic_plan, n2

OPENERS = (
    'Okay, so the viewer is asking: "{q}" Let me work out exactly what they want before I answer.',
    'Alright, the question is "{q}" I have to answer from the product docs only, so let me be careful.',
    'Let me think about this. The viewer wrote "{q}" and I should only use what the docs say.',
)
GOALS = {
    "price": "They want to know what they would actually pay, so I need the price after every deal that applies.",
    "attribute": "They are asking about one specific detail, so I need to find the right line in the docs.",
    "availability": "They want to know about the stock for one colour and size, so I need that exact stock entry.",
    "comparison": "They want me to compare two products on one thing, so I need that value for both of them.",
    "dialogue_ref": "They refer to something from earlier in the chat, so first I need to work out which product "
                    "they mean.",
    "unanswerable": "I need to check whether the docs actually say anything about this.",
}
HISTORY = 'Looking back at the chat: the viewer said "{viewer}" and the host replied "{host}"'
WALK_INTRO = (
    "Let me go through the docs for the {title} line by line first.",
    "Before answering, let me read everything the docs say about the {title}.",
)
WALK_REMARKS = (
    "{line} That's not what they asked about.",
    "{line} Not relevant for this question, but noted.",
    "{line} Good to know, though it doesn't change the answer.",
    "{line} I'll keep that in mind, but it's not the point here.",
)
OTHER_PRODUCT = (
    "There's also the {title} on screen. It is {price} and ships in {days} days, but the question is not about "
    "it, so I'll set it aside.",
    "The docs also cover the {title} ({price}), which the viewer didn't ask about. I'll ignore it.",
)
DOUBLE_CHECK = (
    "Wait, let me double-check that: {check}. Yes, that's right.",
    "Hmm, let me recompute to be safe. {check}. Same result.",
    "Let me verify once more: {check}. Okay, it matches.",
)
RE_READ = (
    "Wait, let me re-read that to make sure I didn't mix up fields. {check} Yes, that's the one.",
    "Hmm, did I read the right product? {check} Yes, this is about the {title}.",
)
ANSWER_LEAD = ("So the answer is clear.", "Putting it together:", "Okay, that settles it.")
HELPFUL_THINK = (
    "What else would help the viewer? Something from the docs they might not have thought of.",
    "The viewer would probably also like one useful extra fact from the docs.",
    "I should add one helpful detail beyond the bare answer.",
)
CLOSERS = (
    "So: answer first, then the useful fact, and keep it short for the livestream.",
    "Okay, I'm confident now. Short reply: the answer, then the extra fact.",
    "Let me keep the reply to one or two short sentences.",
)
# How often a habitual sentence (opener, goal, answer lead, helpful lead) appears: 0.9 at temperature 1.
HABIT_BASE, HABIT_SLOPE = 0.85, 0.05
NO_FACT_ENDINGS = ("", " Hope that helps!", " Great choice!")
INVENTED = ("Shipping is ${x}.", "It was ${x} cheaper yesterday.", "Gift wrapping costs ${x}.")


def _prob(base: float, slope: float, temperature: float, verbosity: float) -> float:
    return min(1.0, max(0.0, (base + slope * temperature) * verbosity))


def _plan(task: Task, docs: list[Doc] | None, rng: random.Random, fault: bool) -> tuple[Plan, bool]:
    """(plan, used the generic fallback). A correct plan must reach the reference answer."""
    planner = PLANNERS.get(task.kind)
    if docs is not None and planner is not None:
        try:
            plan = planner(task, docs, rng, fault)
            if fault or _agrees(plan.answer, task):
                return plan, False
        except PlanError:
            pass
    return generic_plan(task, fault), True


def _agrees(answer: str, task: Task) -> bool:
    """The computed answer is the reference (numbers within a cent: the data rounds floats, traces round half up)."""
    ref = task.reference
    if ref.kind != "number":
        return answer == describe_answer(ref)
    mentions = number_mentions(answer)
    return bool(mentions) and abs(mentions[0].value - float(ref.value)) <= 0.01 + 1e-9


def _fact_sentence(fact: HelpfulFact) -> str:
    """The helpful fact as a sentence, written the same in the trace's ``Helpful:`` line and in the reply: the
    reply then copies the line token for token ("black is …" and "Black is …" are different BPE tokens)."""
    text = fact.fact.strip()
    return text[:1].upper() + text[1:]


def _core(plan: Plan, fact: HelpfulFact | None) -> list[str]:
    lines = [*plan.lines, f"Answer: {plan.answer}."]
    return lines + ([f"Helpful: {_fact_sentence(fact)}"] if fact else [])


def minimal_trace(task: Task) -> str:
    """The shortest correct trace: only the useful lines, with the first helpful fact."""
    plan, _ = _plan(task, parse_docs(task.product_docs), random.Random(0), fault=False)
    return "\n".join(_core(plan, task.helpful_facts[0] if task.helpful_facts else None))


def minimal_completion(task: Task) -> str:
    """``minimal_trace`` with its reply, in the completion layout."""
    plan, _ = _plan(task, parse_docs(task.product_docs), random.Random(0), fault=False)
    fact = task.helpful_facts[0] if task.helpful_facts else None
    reply = plan.answer_sentence() + (f" {_fact_sentence(fact)}" if fact else "")
    return format_completion(minimal_trace(task), reply)


def _invented(task: Task, rng: random.Random) -> str:
    sources = task.docs_text + task.question
    for _ in range(50):
        x = f"{rng.randint(2, 19)}.{rng.choice(('49', '95', '99', '75'))}"
        if x not in sources:
            return rng.choice(INVENTED).format(x=x)
    return "Shipping is $3.21."


class ScriptedTeacher:
    """See the module docstring. ``generate`` is deterministic for a given ``SamplingConfig.seed``."""

    def __init__(self, error_rate: float = 0.15, verbosity: float = 1.0, name: str = "scripted",
                 opener_rate: float | None = None):
        """``opener_rate``: how often a trace restates the question (default: as often as the other habits)."""
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
        if verbosity < 0:
            raise ValueError(f"verbosity must be >= 0, got {verbosity}")
        if opener_rate is not None and not 0.0 <= opener_rate <= 1.0:
            raise ValueError(f"opener_rate must be in [0, 1], got {opener_rate}")
        self.error_rate = error_rate
        self.verbosity = verbosity
        self.opener_rate = opener_rate
        self.name = name

    def generate(self, tasks: Sequence[Task], k: int, sampling: SamplingConfig | None = None) -> Iterator[list[Sample]]:
        check_k(k)
        sampling = sampling or SamplingConfig()
        for task in tasks:
            yield [self.sample(task, i, sampling) for i in range(k)]

    def sample(self, task: Task, index: int, sampling: SamplingConfig) -> Sample:
        start = time.perf_counter()
        t = sampling.temperature
        rng = random.Random(f"scripted:{sampling.seed}:{task.id}:{index if t > 0 else 0}")
        answer_fault = rng.random() < self.error_rate
        hallucinate = rng.random() < self.error_rate / 5
        drop_fact = rng.random() < self.error_rate or not task.helpful_facts
        docs = parse_docs(task.product_docs)
        plan, fallback = _plan(task, docs, rng, answer_fault)
        fact = None
        if not drop_fact:
            fact = task.helpful_facts[0] if (t == 0 or rng.random() < 0.7) else rng.choice(task.helpful_facts)
        reasoning = self._trace(task, docs, plan, fact, rng, t)
        reply = plan.answer_sentence() + (f" {_fact_sentence(fact)}" if fact else rng.choice(NO_FACT_ENDINGS))
        if hallucinate:
            reply += " " + _invented(task, rng)
        completion = format_completion(reasoning, reply)
        faults = [f for f, on in ((plan.fault or "answer", answer_fault), ("hallucination", hallucinate),
                                  ("missing_fact", fact is None)) if on]
        meta = {"faults": faults, "fallback": fallback}
        n_words = len(completion.split())
        if n_words > sampling.max_tokens:  # cut inside the trace, as an engine would: no reply, a failed sample
            failed = Sample.failed(task_id=task.id, sample_index=index, teacher=self.name,
                                   error=f"truncated: max_tokens={sampling.max_tokens} reached before any reply "
                                         f"({n_words} words needed)", latency_s=time.perf_counter() - start)
            failed.meta.update(meta, raw_finish_reason="length")
            return failed
        return Sample.from_completion(task_id=task.id, sample_index=index, completion=completion, teacher=self.name,
                                      latency_s=time.perf_counter() - start, meta=meta)

    def _trace(self, task: Task, docs: list[Doc] | None, plan: Plan, fact: HelpfulFact | None,
               rng: random.Random, t: float) -> str:
        v = self.verbosity
        out = []

        def habit() -> bool:
            return rng.random() < _prob(HABIT_BASE, HABIT_SLOPE, t, v)

        # Even the habitual sentences (restating the question, the goal, the lead-ins) are left out now and then,
        # as in a sampled LLM: stage-2 RL can only reinforce the shorter traces the student ever samples.
        # The opener is drawn as at the default rate and then kept at ``opener_rate``: a rate up to the default
        # one changes nothing else in a trace, so a student trained on them differs only in the opener.
        habit_p = _prob(HABIT_BASE, HABIT_SLOPE, t, v)
        keep_p = habit_p if self.opener_rate is None else self.opener_rate
        draw = rng.random()
        opener = rng.choice(OPENERS) if draw < max(habit_p, keep_p) else None
        if opener is not None and draw < keep_p:
            out.append(opener.format(q=task.question))
        if habit():
            out.append(GOALS.get(task.kind, GOALS["attribute"]))
        viewer = [turn.content for turn in task.history if turn.role == "viewer"]
        host = [turn.content for turn in task.history if turn.role == "host"]
        if viewer and host and habit():  # quoting the chat is a habit too: the History line carries the lookup
            out.append(HISTORY.format(viewer=viewer[-1], host=host[-1]))
        lines = list(plan.lines)
        out.append(lines.pop(0))  # Product / History / Compare line
        if task.kind == "dialogue_ref" and lines:
            out.append(lines.pop(0))
        p = plan.focus
        if p is not None and rng.random() < _prob(0.25, 0.25, t, v):
            irrelevant = [line for name, line in p.lines.items() if name not in plan.used]
            keep = [line for line in irrelevant if rng.random() < _prob(0.1, 0.2, t, v)]
            if keep:
                out.append(rng.choice(WALK_INTRO).format(title=p.title))
                out.extend(rng.choice(WALK_REMARKS).format(line=line) for line in keep)
        for other in docs or []:
            if other is not p and task.kind != "comparison" and rng.random() < _prob(0.05, 0.2, t, v):
                out.append(rng.choice(OTHER_PRODUCT).format(title=other.title, price=f"${n2(other.sale_price)}",
                                                            days=other.shipping_days))
        for line in lines:
            out.append(line)
            if rng.random() < _prob(0.15, 0.2, t, v):
                out.append(self._recheck(plan, rng, out))
        if plan.doubts and rng.random() < _prob(0.25, 0.3, t, v):
            out.append(rng.choice(plan.doubts))
        if rng.random() < _prob(0.3, 0.3, t, v):
            out.append(self._recheck(plan, rng, out))
        if habit():
            out.append(rng.choice(ANSWER_LEAD))
        out.append(f"Answer: {plan.answer}.")
        if fact is not None:
            if habit():
                out.append(rng.choice(HELPFUL_THINK))
            out.append(f"Helpful: {_fact_sentence(fact)}")
        if rng.random() < _prob(0.3, 0.3, t, v):
            out.append(rng.choice(CLOSERS))
        return "\n".join(out)

    def _recheck(self, plan: Plan, rng: random.Random, written: list[str]) -> str:
        """Re-check a sum or line the trace has already written (a student cannot re-check what comes later)."""
        checks = [c for c in plan.checks if any(c.rstrip(".") in line for line in written)]
        if not checks:
            return "Wait, let me double-check the docs once more. Yes, that's what they say."
        check = rng.choice(checks)
        if "=" in check and not check.endswith("."):
            return rng.choice(DOUBLE_CHECK).format(check=check)
        title = plan.focus.title if plan.focus else "product"
        return rng.choice(RE_READ).format(check=check, title=title)
