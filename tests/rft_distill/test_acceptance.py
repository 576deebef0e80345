"""Rejection sampling: C AND H acceptance, selection policies, per-kind report."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from livethink.data.schema import ProductDoc, Reference, Task
from livethink.rewards.answer_point import answer_point, answer_tokens
from livethink.rft_distill.acceptance import JudgedSample, accept_and_select, judge_samples, select


def _s(task_id: str, i: int, text: str, c: bool, h: bool, error: str | None = None) -> JudgedSample:
    return JudgedSample(task_id, i, text, c, h, error)


def test_only_correct_and_helpful_is_accepted():
    assert _s("t", 0, "x", True, True).accepted
    assert not _s("t", 0, "x", True, False).accepted
    assert not _s("t", 0, "x", False, True).accepted
    assert not _s("t", 0, "x", True, True, error="timeout").accepted


def test_selection_policies():
    accepted = [_s("t", 0, "long answer", True, True), _s("t", 1, "short", True, True), _s("t", 2, "mid size", True, True)]
    assert select(accepted, "all", random.Random(0)) == accepted
    assert select(accepted, "shortest", random.Random(0)) == [accepted[1]]
    picked = select(accepted, "random", random.Random(0))
    assert len(picked) == 1 and picked[0] in accepted
    assert select([], "random", random.Random(0)) == []
    with pytest.raises(ValueError, match="selection"):
        select(accepted, "best", random.Random(0))


def test_accept_and_select_report(liveshop_small):
    tasks = {t.id: t for t in liveshop_small.tasks["train"][:3]}
    a, b, c = list(tasks)
    judged = [
        _s(a, 0, "a0", True, True), _s(a, 1, "a1", True, False), _s(a, 2, "a2", True, True),
        _s(b, 0, "b0", False, False), _s(b, 1, "", False, False, error="HTTP 500"),
        _s(c, 0, "c0", True, True),
    ]
    selected, report = accept_and_select(judged, tasks, policy="shortest")
    assert sorted(s.completion for s in selected) == ["a0", "c0"]
    d = report.as_dict()
    assert (d["samples"], d["accepted"], d["failed_samples"], d["selected"]) == (6, 3, 1, 2)
    assert d["acceptance_rate"] == 0.5 and d["correct_rate"] == round(4 / 6, 4)
    assert d["unaccepted_prompts"] == [b]
    assert sum(k["samples"] for k in d["by_kind"].values()) == 6
    _, all_report = accept_and_select(judged, tasks, policy="all")
    assert all_report.selected == 3


@dataclass
class _FixedVerdict:
    correct: bool
    helpful: bool


class _LengthJudge:
    """Accepts completions longer than 3 characters (stands in for a rubric)."""

    def __init__(self):
        self.batches: list[int] = []

    def score(self, task, completion):
        return _FixedVerdict(len(completion) > 3, len(completion) > 3)

    def score_many(self, items):
        self.batches.append(len(items))
        return [self.score(task, completion) for task, completion in items]


def test_judge_samples_records_errors_without_calling_judge(liveshop_small):
    task = liveshop_small.tasks["train"][0]
    records = [
        {"task_id": task.id, "sample_index": 0, "completion": "long enough", "error": None},
        {"task_id": task.id, "sample_index": 1, "completion": None, "error": "timeout"},
        {"task_id": "nope", "sample_index": 0, "completion": "long enough"},
    ]
    judge = _LengthJudge()
    judged = list(judge_samples(records, {task.id: task}, judge))
    assert [j.accepted for j in judged] == [True, False, False]
    assert judged[1].error == "timeout" and "unknown task_id" in judged[2].error
    assert judge.batches == [1]  # only the valid record reached the judge


def test_judge_samples_scores_in_batches_in_order(liveshop_small):
    task = liveshop_small.tasks["train"][0]
    records = [{"task_id": task.id, "sample_index": i, "completion": "x" * i} for i in range(7)]
    judge = _LengthJudge()
    judged = list(judge_samples(records, {task.id: task}, judge, batch_size=3))
    assert judge.batches == [3, 3, 1]
    assert [j.sample_index for j in judged] == list(range(7))
    assert [j.accepted for j in judged] == [False] * 4 + [True] * 3


def _task(reference: Reference) -> Task:
    doc = ProductDoc(product_id="p1", title="Lumen Coastal Hoodie", text="Unit price: 83.00, 10% off.")
    return Task(id="t", split="train", product_docs=(doc,), question="How much for two?", reference=reference,
                kind="price", difficulty=1)


PRICE = _task(Reference(kind="number", value=149.40, unit="usd"))


def test_answer_point_counts_thinking_words_before_the_reference():
    early = "<think>\nSubtotal: 74.70 × 2 = 149.40. Now the coupon.\n</think>\n\n$149.40."
    # "Subtotal:" "74.70" "×" "2" "=" come first: 5 words; the reply's own $149.40 is not thinking
    assert answer_point(PRICE, early) == 5
    # 149.39 is a cent off: accepted as the answer (usd rounding); 149.38 is not, so the thinking's end counts
    assert answer_point(PRICE, "<think>\nso 149.39 then\n</think>\n\nx") == 1
    assert answer_point(PRICE, "<think>\nso 149.38 then\n</think>\n\n$149.40") == 3
    entity = _task(Reference(kind="entity", value="Pebble Trail", aliases=("PT-2",)))
    assert answer_point(entity, "<think>\nThe pebble-trail is lighter. PT-2 too.\n</think>\n\nx") == 1
    assert answer_point(entity, "<think>\nThe PT-2, i.e. Pebble Trail\n</think>\n\nx") == 1
    assert answer_point(entity, "<think>\nPebble Trailblazer\n</think>\n\nx") == 2  # word boundaries
    yes = _task(Reference(kind="yes_no", value=True))
    assert answer_point(yes, "<think>\nStock: 12 left. So yes.\n</think>\n\nYes.") == 5  # no mention: the end


def test_answer_tokens_counts_the_thinking_before_the_reference_with_the_given_counter():
    # counted in characters here: "Subtotal: 74.70 × 2 = " is 22 of them; no mention: the whole thinking
    assert answer_tokens(PRICE, "Subtotal: 74.70 × 2 = 149.40.", len) == 22
    assert answer_tokens(PRICE, "Let me see.", len) == 11
    assert answer_tokens(PRICE, "149.40 it is", len) == 0


def test_earliest_answer_keeps_the_trace_that_states_the_answer_first():
    late = _s("t", 0, "<think>\nLet me look. Unit price 74.70. Subtotal 149.40.\n</think>\n\n$149.40.", True, True)
    early = _s("t", 1, "<think>\nSubtotal 149.40. Let me double-check all of it again, slowly.\n</think>\n\n$149.40.",
               True, True)
    tie = _s("t", 2, "<think>\nSubtotal 149.40. Sure.\n</think>\n\n$149.40.", True, True)
    assert select([late, early], "earliest_answer", random.Random(0), PRICE) == [early]  # although longer
    assert select([late, early, tie], "earliest_answer", random.Random(0), PRICE) == [tie]  # then the shorter
    with pytest.raises(ValueError, match="needs the task"):
        select([late], "earliest_answer", random.Random(0))
    tasks = {"t": PRICE}
    selected, _ = accept_and_select([late, early], tasks, policy="earliest_answer")
    assert selected == [early]
