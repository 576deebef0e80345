"""benchmarks/reply_anatomy.py: teacher sentence kinds per reasoning line, tokens per reply by kind."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("reply_anatomy", Path(__file__).resolve().parents[1] / "benchmarks/reply_anatomy.py")
anatomy_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(anatomy_mod)

COMPLETION = (
    "<think>\n"
    "They refer to something from earlier in the chat, so first I need to work out which product they mean.\n"
    'Looking back at the chat: the viewer said "green?" and the host replied "Yes!"\n'
    "History: the host said the Aurora Classic Blender comes in green.\n"
    "Okay, that settles it.\n"
    "Answer: 3 days.\n"
    "Helpful: Free returns within 30 days.\n"
    "7 days.\n"
    "</think>\n\n3 days. Free returns within 30 days."
)


def test_each_line_gets_its_teacher_sentence_kind():
    kinds = [anatomy_mod.line_kind(line) for line in COMPLETION.split("</think>")[0].splitlines()[1:]]
    assert kinds == ["goal", "chat_quote", "useful", "lead", "answer", "helpful", "other"]
    assert anatomy_mod.line_kind('Let me think about this. The viewer wrote "how much?" and I should …') == "opener"


def test_tokens_per_reply_by_kind_averages_over_completions():
    words = lambda text: len(text.split())  # noqa: E731  (a whitespace "tokenizer" keeps the sums checkable)
    per_reply, others = anatomy_mod.anatomy([COMPLETION, "<think>\nAnswer: 3 days.\n</think>\n\n3 days."], words)
    # goal 20 words in one of two completions -> 10.0, chat quote 14 -> 7.0; "Answer: 3 days." 3 words in both -> 3.0
    assert per_reply["goal"] == 10.0 and per_reply["answer"] == 3.0 and per_reply["chat_quote"] == 7.0
    assert per_reply["reply"] == (7 + 2) / 2 and per_reply["opener"] == 0.0
    assert others == {"7 days.": 1}
