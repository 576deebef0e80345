"""The token-space budget-forcing rule (``livethink.data.budget_forcing``), on hand-built token sequences.

Token ids: 1 = <think>, 2 = </think>, 9 = newline, 0 = EOS; forced end = [9, 2, 9, 9] (``\\n</think>\\n\\n``)."""

from __future__ import annotations

import pytest

from livethink.data.budget_forcing import (
    ForcingTokens,
    banned_token,
    cut_index,
    find,
    forced_continuation,
    forced_mask,
    next_forced_token,
    rfind,
    served_reply_end,
    thinking_opened,
)

T = ForcingTokens(start=(1,), close=(2,), forced_end=(9, 2, 9, 9), eos=0)
PREFILLED = [50, 51, 1, 9]  # the server's prompt: chat template + "<think>\n"
PLAIN = [50, 51]  # a conversational rollout's prompt: the model opens thinking itself


def test_find_and_rfind_single_and_multi_token():
    assert find([5, 1, 7, 1], (1,)) == 1 and find([5, 1, 7, 1], (1,), 2) == 3 and find([5, 7], (1,)) == -1
    assert find([5, 1, 7, 1], (1,), 0, 1) == -1  # must start before `end`
    assert find([3, 9, 2, 9, 9], (9, 2)) == 1 and find([3, 9, 2], (2, 9)) == -1
    assert rfind([1, 4, 1, 4], (1,)) == 2 and rfind([1, 4, 1, 4], (1, 4)) == 2 and rfind([4], (1,)) == -1


def test_thinking_opened_counts_prefilled_tokens_or_waits_for_the_model():
    assert thinking_opened(PREFILLED, [], T) == (0, 1)  # "\n" after <think> is one thinking token already
    assert thinking_opened(PLAIN, [], T) is None
    assert thinking_opened(PLAIN, [1, 9, 7], T) == (1, 0)
    assert thinking_opened([1, 5, 2, 50], [1], T) == (1, 0)  # a closed block in the prompt (history) does not count


def test_cut_index_matches_vllm_native_counting():
    # prefilled: cap 4 -> 3 generated thinking tokens, then the forced end
    assert cut_index(PREFILLED, [7, 7], 4, T) == 3
    # the model opens thinking: <think> + 4 thinking tokens ("\n" included) -> cut at output index 5
    assert cut_index(PLAIN, [1, 9, 7], 4, T) == 5
    assert cut_index(PLAIN, [1, 9, 7, 2, 8], 4, T) is None  # closed on its own before the cap
    assert cut_index(PREFILLED, [], 0, T) == 0  # cap below what the prompt pre-filled: cut at once


def test_next_forced_token_writes_the_forced_end_then_eos_after_the_reserve():
    out = [7, 7, 7]
    written = []
    for _ in range(4):
        token = next_forced_token(PREFILLED, out, 4, T)
        written.append(token)
        out.append(token)
    assert written == [9, 2, 9, 9]
    assert next_forced_token(PREFILLED, out, 4, T, reply_reserve=2) is None
    out += [5, 6]
    assert next_forced_token(PREFILLED, out, 4, T, reply_reserve=2) == 0  # the reply used its reserve
    assert next_forced_token(PREFILLED, out, 4, T) is None  # no reserve: the reply goes on
    assert next_forced_token(PREFILLED, [7, 7], 4, T) is None  # before the cap: the model chooses
    assert next_forced_token(PREFILLED, [7, 2, 5], 4, T) is None  # closed on its own
    # closed on its own before the cap: the reply stops at its reserve after the close, as the server stops it
    assert next_forced_token(PREFILLED, [7, 2, 5], 4, T, reply_reserve=2) is None
    assert next_forced_token(PREFILLED, [7, 2, 5, 6], 4, T, reply_reserve=2) == 0


def test_banned_token_stops_the_model_opening_thinking_again():
    assert banned_token(PREFILLED, [], T) == 1  # the prompt opened it
    assert banned_token(PREFILLED, [7, 9, 2, 9, 9, 5], T) == 1  # a forced reply may not open another block
    assert banned_token(PLAIN, [], T) is None  # not open yet: the model may open it
    assert banned_token(PLAIN, [1, 7], T) == 1
    multi = ForcingTokens(start=(3, 4, 5), close=(2,), forced_end=(9, 2, 9, 9), eos=0)  # "<", "think", ">"
    assert banned_token([50, 3, 4, 5, 9], [7, 2, 9, 3, 4], multi) == 5  # only where it would complete "<think>"
    assert banned_token([50, 3, 4, 5, 9], [7, 2, 9, 3], multi) is None
    assert banned_token([50, 3, 4, 5, 3], [4], multi) == 5  # across the prompt / output boundary


def test_forced_mask_replays_a_finished_completion():
    completion = [7, 7, 7, 9, 2, 9, 9, 5, 6, 0]
    assert forced_mask(PREFILLED, completion, 4, T) == [False] * 3 + [True] * 4 + [False] * 3
    assert forced_mask(PREFILLED, completion, 4, T, reply_reserve=2) == [False] * 3 + [True] * 4 + [False] * 2 + [True]
    assert forced_mask(PREFILLED, completion, None, T) == [False] * 10
    assert forced_mask(PREFILLED, [7, 2, 9, 9, 5, 0], 4, T) == [False] * 6  # ended thinking itself
    # ... and the reply stopped at its reserve of 3 after the close: that EOS was forced, nothing else
    assert forced_mask(PREFILLED, [7, 2, 9, 9, 5, 0], 4, T, reply_reserve=3) == [False] * 5 + [True]
    assert forced_mask(PREFILLED, [7, 2, 9, 0], 4, T, reply_reserve=3) == [False] * 4  # ended by itself earlier
    assert forced_mask(PREFILLED, [7, 7, 0], 4, T) == [False] * 3  # EOS inside thinking before the cap


def test_forced_continuation_is_prompt_thinking_to_the_cut_and_the_forced_end():
    assert forced_continuation(PREFILLED, [7, 8, 7, 7, 7], 4, T) == [*PREFILLED, 7, 8, 7, 9, 2, 9, 9]
    assert forced_continuation(PREFILLED, [7, 2, 5], 4, T) is None
    assert forced_continuation(PREFILLED, [7, 0], 4, T) == [*PREFILLED, 7, 9, 2, 9, 9]  # stopped early: EOS dropped


def test_forcing_tokens_from_a_tokenizer_and_json_round_trip():
    from livethink.data.reasoning_format import THINK, ReasoningFormat

    class Tok:
        eos_token_id = 0
        vocab = {"<think>": [1], "</think>": [2], "\n</think>\n\n": [9, 2, 9, 9]}

        def encode(self, text, add_special_tokens=False):
            return self.vocab[text]

    tokens = ForcingTokens.of(Tok(), THINK)
    assert tokens == T and ForcingTokens.from_json(tokens.to_json()) == T
    with pytest.raises(ValueError, match="does not think"):
        ForcingTokens.of(Tok(), ReasoningFormat("", ""))


def test_served_reply_end_stops_a_naturally_closed_reply_at_its_reserve():
    # prefilled prompt; thinking [7, 7], close at output index 2, then the model's blank line and the reply:
    # a reserve of 3 keeps [9, 9, 40] (the blank line counts, as the server counts it) and stops before 41
    out = [7, 7, 2, 9, 9, 40, 41, 42]
    assert served_reply_end(PREFILLED, out, T, 3) == 6
    assert served_reply_end(PREFILLED, out, T, 5) is None  # the reply ends within its reserve: as generated
    assert served_reply_end(PREFILLED, out[:2], T, 3) is None  # never closed (cut rows are forced elsewhere)
    assert served_reply_end(PLAIN, [1, 7, 2, 40, 41], T, 1) == 4  # the model opened thinking itself
    assert served_reply_end(PLAIN, [40, 41, 42], T, 1) is None  # no thinking: nothing to count from
