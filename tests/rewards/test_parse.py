"""Splitting completions into reasoning and reply."""

from __future__ import annotations

import pytest

from livethink.data.prompt import format_completion
from livethink.rewards.parse import parse_completion, split_completion


@pytest.mark.parametrize(
    ("completion", "reasoning", "reply", "closed"),
    [
        (format_completion("Step 1.\nStep 2.", "$76.80."), "Step 1.\nStep 2.", "$76.80.", True),
        ("$76.80. Coupon available.", "", "$76.80. Coupon available.", True),  # no think block
        ("<think>\nstill thinking about 76.80", "still thinking about 76.80", "", False),  # cut off
        ("reasoning only closed\n</think>\n\nYes.", "reasoning only closed", "Yes.", True),  # template pre-filled <think>
        ("  \n<think>  a  </think>   \n\n  Yes.  \n", "a", "Yes.", True),  # stray whitespace
        ("<think>a</think>\n<think>b</think>\nNo.", "a\nb", "No.", True),  # two blocks: reply after the last
        ("", "", "", True),
    ],
    ids=["layout", "no-think", "unclosed", "close-only", "whitespace", "two-blocks", "empty"],
)
def test_parse(completion, reasoning, reply, closed):
    parsed = parse_completion(completion)
    assert (parsed.reasoning, parsed.reply, parsed.closed) == (reasoning, reply, closed)


def test_conversational_completions():
    messages = [{"role": "assistant", "content": "<think>\nr\n</think>\n\nYes."}]
    assert split_completion(messages) == ("r", "Yes.")
    separate = [{"role": "assistant", "content": "Yes.", "reasoning_content": "r2"}]
    assert split_completion(separate) == ("r2", "Yes.")
    assert split_completion([{"role": "user", "content": "q"}, {"role": "assistant", "content": "A"}]) == ("", "A")


def test_bad_type():
    with pytest.raises(TypeError):
        parse_completion(42)  # type: ignore[arg-type]
