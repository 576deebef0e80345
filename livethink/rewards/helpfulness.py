"""Helpfulness H ∈ {0, 1} (rubric judge): the reply is correct AND states at least one of the task's helpful facts
as a true claim about the right product, outside the answer itself.

For LiveShop docs the fact's sentence is read with the claim checker's frames (``claim_check.helpful_match``):
"Coupon: $10 off orders of $150 or more." must be stated as that coupon claim about the task's product, so a bag
of the fact's keywords ("coupon $10 off") or the fact of another product on screen does not count. For other docs
a fact counts when any of its ``match`` phrases appears (case-insensitive, word boundaries) once the asserted
number answer ("7 days") is blanked, so a bare "7 days." does not count as a "free returns within 7 days" fact.

This is LiveThinking's "correct and proactively adds relevant information from the docs", made checkable: each
task lists the doc facts a helpful reply would add (a deal not yet used, a stock alternative, shipping, returns).
"""

from __future__ import annotations

from dataclasses import dataclass

from livethink.data.schema import HelpfulFact, Task
from livethink.rewards.claim_check import helpful_match
from livethink.rewards.correctness import CorrectnessResult, check_reply
from livethink.rewards.doc_facts import task_facts
from livethink.rewards.parse import Completion, parse_completion
from livethink.rewards.text import has_phrase


@dataclass(frozen=True)
class HelpfulnessResult:
    helpful: bool
    correctness: CorrectnessResult
    matched: str | None  # the reply's words that state a helpful fact (other docs: the fact's phrase found)
    reason: str

    @property
    def correct(self) -> bool:
        return self.correctness.correct


def matched_fact(facts: tuple[HelpfulFact, ...], reply: str) -> tuple[HelpfulFact, str] | None:
    """The first helpful fact (and phrase) the reply mentions, or None."""
    for fact in facts:
        for phrase in fact.match:
            if has_phrase(reply, phrase):
                return fact, phrase
    return None


def check_reply_helpfulness(task: Task, reply: str) -> HelpfulnessResult:
    """Correctness and helpfulness of a reply, with reasons."""
    correct = check_reply(task, reply)
    phrase = None
    if task_facts(task) is not None and correct.claim_report is not None:  # LiveShop docs: a true claim
        stated = ((fact, helpful_match(task, correct.claim_report, fact, correct.answer_span)) for fact in task.helpful_facts)
        phrase = next((claim.text.strip() for _, claim in stated if claim is not None), None)
    else:  # other docs: a phrase of the fact, outside the answer
        rest = reply
        if correct.answer_span is not None:
            start, end = correct.answer_span
            rest = reply[:start] + " " * (end - start) + reply[end:]
        hit = matched_fact(task.helpful_facts, rest)
        phrase = hit[1] if hit else None
    if not correct.correct:
        reason = f"not correct: {correct.reason}"
    elif phrase is None:
        reason = "correct but adds no helpful fact" if task.helpful_facts else "task lists no helpful facts"
    else:
        reason = f"correct and states {phrase!r}"
    return HelpfulnessResult(correct.correct and phrase is not None, correct, phrase, reason)


def check_helpfulness(task: Task, completion: Completion) -> HelpfulnessResult:
    return check_reply_helpfulness(task, parse_completion(completion).reply)


def helpfulness(task: Task, completion: Completion) -> float:
    """H ∈ {0.0, 1.0}."""
    return float(check_helpfulness(task, completion).helpful)
