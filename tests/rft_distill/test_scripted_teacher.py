"""The scripted teacher: interface, real arithmetic, verbosity, and faults that the rubric judge rejects."""

from __future__ import annotations

import collections
import re
import statistics

import pytest

from livethink.calculator import arithmetic as calculator
from livethink.data.schema import HelpfulFact, ProductDoc, Reference, Task, Turn
from livethink.rewards import RubricJudge
from livethink.rewards.correctness import unsupported_numbers
from livethink.rft_distill.teachers import (
    Sample,
    SamplingConfig,
    ScriptedTeacher,
    Teacher,
    minimal_completion,
    minimal_trace,
)
from tests.rewards.test_fixtures import PRICE_TWO

JUDGE = RubricJudge()


@pytest.fixture(scope="module")
def tasks(liveshop_small):
    return liveshop_small.tasks["train"] + liveshop_small.tasks["test"]


def words(text: str) -> int:
    return len(text.split())


def test_interface_streams_k_samples_per_task(tasks):
    teacher = ScriptedTeacher()
    assert isinstance(teacher, Teacher)
    batches = list(teacher.generate(tasks[:5], k=3, sampling=SamplingConfig(seed=1)))
    assert [[s.task_id for s in b] for b in batches] == [[t.id] * 3 for t in tasks[:5]]
    assert all([s.sample_index for s in b] == [0, 1, 2] for b in batches)
    sample = batches[0][0]
    assert sample.teacher == "scripted" and sample.finish_reason == "stop" and sample.error is None
    assert sample.completion.startswith("<think>\n") and sample.reply and sample.reasoning
    assert Sample.model_validate_json(sample.model_dump_json()) == sample
    with pytest.raises(ValueError):
        next(teacher.generate(tasks[:1], k=0, sampling=SamplingConfig()))


def test_deterministic_and_temperature(tasks):
    teacher, few = ScriptedTeacher(), tasks[:20]
    run = lambda **kw: [s.completion for b in teacher.generate(few, 2, SamplingConfig(**kw)) for s in b]  # noqa: E731
    assert run(seed=3) == run(seed=3)
    assert run(seed=3) != run(seed=4)
    greedy = run(temperature=0.0)
    assert greedy[0::2] == greedy[1::2]  # at temperature 0 the k samples of a task are identical


def test_minimal_trace_pinned():
    assert minimal_trace(PRICE_TWO).splitlines() == [
        "Product: Pebble Trail Sneakers. Quantity: 2.",
        "Unit price: 96.00, 20% off, now 76.80.",
        "Subtotal: 76.80 × 2 = 153.60.",
        "Bundle: needs 3, 2 < 3, not applied.",
        "Coupon: 153.60 ≥ 150.00, 153.60 − 10.00 = 143.60.",
        "Answer: $143.60.",
        "Helpful: Coupon: $10 off orders of $150 or more.",
    ]
    assert minimal_completion(PRICE_TWO).endswith("</think>\n\n$143.60. Coupon: $10 off orders of $150 or more.")


def test_minimal_completions_are_correct_and_helpful(tasks):
    for task in tasks:
        verdict = JUDGE.score(task, minimal_completion(task))
        assert verdict.accepted, (task.question, minimal_completion(task), verdict.details)


def test_arithmetic_in_traces_is_real_and_is_what_the_calculator_computes(tasks):
    # the student decodes with the calculator: every sum the teacher writes must be the calculator's result
    samples = [s for b in ScriptedTeacher(error_rate=0.0).generate(tasks, 2, SamplingConfig()) for s in b]
    ops = collections.Counter()
    for s in samples:
        for a, op, b, c in re.findall(r"([\d,]+\.\d\d) ([×−]) ([\d,.]+%?) = ([\d,]+\.\d\d)", s.reasoning):
            assert calculator.evaluate(a, op, b) == c, (s.task_id, a, op, b, c)
            ops[op + ("%" if b.endswith("%") else "")] += 1
    assert ops["×"] > 100 and ops["−"] > 40 and ops["−%"] > 20, ops


def test_traces_are_verbose(tasks):
    samples = [s for b in ScriptedTeacher().generate(tasks, 1, SamplingConfig()) for s in b]
    by_id = {t.id: t for t in tasks}
    mean_trace = statistics.mean(words(s.reasoning) for s in samples)
    mean_minimal = statistics.mean(words(minimal_trace(by_id[s.task_id])) for s in samples)
    assert mean_trace >= 3 * mean_minimal
    assert sum("double-check" in s.reasoning or "recompute" in s.reasoning or "verify" in s.reasoning
               or "re-read" in s.reasoning for s in samples) > len(samples) // 4
    cold = [s for b in ScriptedTeacher().generate(tasks, 1, SamplingConfig(temperature=0.0)) for s in b]
    hot = [s for b in ScriptedTeacher().generate(tasks, 1, SamplingConfig(temperature=1.5)) for s in b]
    assert statistics.mean(words(s.reasoning) for s in cold) < statistics.mean(words(s.reasoning) for s in hot)


def test_fault_free_samples_are_accepted_and_cite_only_known_numbers(tasks):
    for batch in ScriptedTeacher(error_rate=0.0).generate(tasks, 2, SamplingConfig()):
        for s in batch:
            task = next(t for t in tasks if t.id == s.task_id)
            assert JUDGE.score(task, s.completion).accepted, (s.reply, task.reference)
            assert not unsupported_numbers(task, s.reply)


def test_every_injected_fault_is_caught(tasks):
    by_id = {t.id: t for t in tasks}
    kinds = set()
    for batch in ScriptedTeacher(error_rate=0.6).generate(tasks, 2, SamplingConfig(seed=5)):
        for s in batch:
            verdict = JUDGE.score(by_id[s.task_id], s.completion)
            faults = set(s.meta["faults"])
            kinds |= faults
            assert verdict.correct == (not faults - {"missing_fact"}), (s.meta, s.reply, verdict.details)
            assert verdict.helpful == (not faults), (s.meta, s.reply, verdict.details)
    assert {"hallucination", "missing_fact", "misread"} <= kinds and any(k.startswith("arithmetic") for k in kinds)


def test_default_rates_in_band(tasks):
    samples = [s for b in ScriptedTeacher().generate(tasks, 4, SamplingConfig()) for s in b]
    by_id = {t.id: t for t in tasks}
    verdicts = [JUDGE.score(by_id[s.task_id], s.completion) for s in samples]
    c = sum(v.correct for v in verdicts) / len(verdicts)
    h = sum(v.helpful for v in verdicts) / len(verdicts)
    assert 0.78 <= c <= 0.88 and 0.63 <= h <= 0.77, (c, h)


def test_max_tokens_gives_a_truncated_failed_sample(tasks):
    sample = next(ScriptedTeacher().generate(tasks[:1], 1, SamplingConfig(max_tokens=20)))[0]
    assert sample.error.startswith("truncated:") and sample.finish_reason == "error" and sample.reply == ""
    assert sample.meta["raw_finish_reason"] == "length"
    assert not JUDGE.score(tasks[0], sample.completion).correct


def test_unknown_doc_format_falls_back_to_the_reference():
    task = Task(
        id="user-1", split="train",
        product_docs=(ProductDoc(product_id="X1", title="Acme Kettle", text="Acme Kettle. Boils 1.7 litres. Costs $39.00."),),
        question="How much is the Acme Kettle?", reference=Reference(kind="number", value=39.0, unit="usd"),
        helpful_facts=(HelpfulFact(fact="It boils 1.7 litres.", match=("1.7 litres",)),), kind="price", difficulty=1,
    )
    sample = next(ScriptedTeacher(error_rate=0.0).generate([task], 1, SamplingConfig()))[0]
    assert sample.meta["fallback"] is True and JUDGE.score(task, sample.completion).accepted


DRESS = ProductDoc(
    product_id="D1", title="Cobalt Signature Dress",
    text="[D1] Cobalt Signature Dress (dress)\nPrice: $120.90, livestream discount 25% off (now $90.68).\n"
         "Coupon: $5 off orders of $50 or more.\nBundle: buy 2 or more and get an extra 10% off.\n"
         "Stock: navy M: 4 left; black S: sold out.\nShipping: ships in 4 days.\nReturns: free returns within 30 days.",
)


def test_prices_start_from_the_stated_discounted_price_and_round_half_up():
    # 120.90 x 0.75 = 90.675: the doc (and the till) say 90.68; float rounding gave 90.67 and a wrong total
    task = Task(id="half-cent", split="train", product_docs=(DRESS,), question="How much for 3 Cobalt Signature Dress?",
                reference=Reference(kind="number", value=239.84, unit="usd"), kind="price", difficulty=3)
    assert minimal_trace(task).splitlines()[1:5] == [
        "Unit price: 120.90, 25% off, now 90.68.",
        "Subtotal: 90.68 × 3 = 272.04.",
        "Bundle: 3 ≥ 2, 272.04 − 10% = 244.84.",
        "Coupon: 244.84 ≥ 50.00, 244.84 − 5.00 = 239.84.",
    ]
    sample = ScriptedTeacher(error_rate=0.0).sample(task, 0, SamplingConfig())
    assert sample.meta["fallback"] is False and JUDGE.score(task, sample.completion).correct


def test_dialogue_price_applies_the_deals_like_a_price_question():
    task = Task(id="dialogue-coupon", split="train", product_docs=(DRESS,), question="How much is the navy one?",
                history=(Turn(role="viewer", content="Anything in navy?"),
                         Turn(role="host", content="Yes! The Cobalt Signature Dress comes in navy.")),
                reference=Reference(kind="number", value=85.68, unit="usd"), kind="dialogue_ref", difficulty=2)
    trace = minimal_trace(task)
    assert "Coupon: 90.68 ≥ 50.00, 90.68 − 5.00 = 85.68." in trace and "Answer: $85.68." in trace
    assert ScriptedTeacher(error_rate=0.0).sample(task, 0, SamplingConfig()).meta["fallback"] is False


def test_every_liveshop_task_gets_a_computed_trace(tasks):
    """No LiveShop task falls back to the reference-answer shortcut: a fallback trace teaches the student nothing."""
    teacher = ScriptedTeacher(error_rate=0.0)
    fallbacks = [t.id for t in tasks if teacher.sample(t, 0, SamplingConfig()).meta["fallback"]]
    assert fallbacks == []


def test_named_answers_are_spelled_in_the_reply_as_in_the_trace(tasks):
    """A product, material or country answer follows a word in the reply, as it does after "Answer:" in the
    trace, so BPE gives it the same tokens in both places and the student can copy it."""
    teacher, checked = ScriptedTeacher(error_rate=0.0), 0
    for task in tasks:
        if task.reference.kind != "entity":
            continue
        sample = teacher.sample(task, 0, SamplingConfig())
        answer = re.search(r"\nAnswer: (.+)\.\n", sample.reasoning).group(1)
        assert not sample.reply.startswith(answer) and f" {answer}" in sample.reply.split(".")[0], sample.reply
        checked += 1
    assert checked >= 10
    compare = next(t for t in tasks if t.kind == "comparison")
    assert re.fullmatch(r"The .+ (is cheaper|ships faster|has the longer return window)\.",
                        minimal_completion(compare).split("</think>\n\n")[1].split(". ")[0] + ".")


def test_helpful_facts_are_spelled_in_the_reply_as_in_the_trace(tasks):
    # "Helpful: black is in stock in size M." then a reply "Black is in stock in size M.": the capital is a
    # different token, and the student wrote the other fact template instead of copying the line
    teacher, lowercase = ScriptedTeacher(error_rate=0.0), 0
    for task in tasks:
        sample = teacher.sample(task, 0, SamplingConfig())
        m = re.search(r"\nHelpful: (.+)$", sample.reasoning)
        if m is None:
            continue
        assert sample.reply.endswith(" " + m.group(1)), (m.group(1), sample.reply)
        lowercase += task.helpful_facts[0].fact[0].islower()
    assert lowercase >= 5  # facts that start lower-case are covered


def test_rechecks_only_repeat_sums_already_written(tasks):
    # "Wait, let me double-check that: 149.40 − 10.00 = 139.40" right after the unit price asks the student to
    # know the coupon sum before it has worked out the subtotal: it cannot learn that
    samples = [s for b in ScriptedTeacher(error_rate=0.0).generate(tasks, 4, SamplingConfig(temperature=1.0)) for s in b]
    rechecked = 0
    for s in samples:
        lines = s.reasoning.splitlines()
        for i, line in enumerate(lines):
            m = re.search(r"(?:double-check that|verify once more|recompute to be safe)\W+(.+? = [\d,.]+\d)", line)
            if m:
                assert any(m.group(1) in earlier for earlier in lines[:i]), (s.task_id, line)
                rechecked += 1
    assert rechecked > 20


def test_habitual_sentences_are_sampled_not_certain(tasks):
    # GRPO can only reinforce what the student samples: a filler sentence in every teacher trace would be in every
    # student rollout, and no length reward could ever remove it
    from livethink.rft_distill.teachers.scripted import ANSWER_LEAD, GOALS, HISTORY, OPENERS

    samples = [s for b in ScriptedTeacher(error_rate=0.0).generate(tasks, 4, SamplingConfig(temperature=1.0)) for s in b]
    stems = {"opener": [o.split("{q}")[0] for o in OPENERS], "goal": list(GOALS.values()), "lead": list(ANSWER_LEAD)}
    for name, options in stems.items():
        present = sum(any(o in s.reasoning for o in options) for s in samples) / len(samples)
        assert 0.8 <= present <= 0.97, (name, present)
    # the chat quote (dialogue questions only) too; the History line that does the lookup is always there
    by_id = {t.id: t for t in tasks}
    dialogue = [s for s in samples if by_id[s.task_id].kind == "dialogue_ref"]
    quoted = sum(HISTORY.split("{viewer}")[0] in s.reasoning for s in dialogue) / len(dialogue)
    assert len(dialogue) >= 40 and 0.75 <= quoted <= 0.98, (len(dialogue), quoted)
    assert all("History: " in s.reasoning for s in dialogue)


def test_opener_rate_sets_how_often_the_question_is_restated_and_changes_nothing_else(tasks):
    from livethink.rft_distill.teachers.scripted import OPENERS

    stems = [o.split("{q}")[0] for o in OPENERS]
    sampling = SamplingConfig(temperature=1.0, seed=2)

    def reasonings(**options) -> list[str]:
        return [s.reasoning for b in ScriptedTeacher(**options).generate(tasks, 4, sampling) for s in b]

    def without_opener(text: str) -> str:
        first, _, rest = text.partition("\n")
        return rest if any(first.startswith(stem) for stem in stems) else text

    default, half, never = reasonings(), reasonings(opener_rate=0.5), reasonings(opener_rate=0.0)
    share = lambda texts: sum(t != without_opener(t) for t in texts) / len(texts)  # noqa: E731
    assert 0.8 <= share(default) <= 0.97 and 0.4 <= share(half) <= 0.6 and share(never) == 0.0
    assert share(reasonings(opener_rate=1.0)) == 1.0
    # same random draws: each trace is the default one, with or without its opener
    assert [without_opener(t) for t in half] == [without_opener(t) for t in default] == never
    with pytest.raises(ValueError, match="opener_rate"):
        ScriptedTeacher(opener_rate=1.5)
