"""Budget forcing in token space: where thinking is cut at a cap, and which tokens the cut forced.

One rule for the server, the eval and stage-2 rollouts (s1, arXiv 2501.19393; Elastic Reasoning, arXiv 2505.05315):
thinking counts the tokens after the reasoning start delimiter, whether the prompt pre-fills it (the server's
``ReasoningFormat.prefill``) or the model writes it (a conversational rollout). Once ``cap`` thinking tokens exist
and the block is still open, the format's forced end (``ReasoningFormat.forced_end``, e.g. ``\\n</think>\\n\\n``)
follows, token for token, and the reply gets at most ``reply_reserve`` tokens after it. This is where vLLM's native
``thinking_token_budget`` puts it too (pre-filled tokens after the start count). A completion whose thinking closes
before the cap is unchanged. Once thinking is open, the model may not open it again (``banned_token``): forced after a
token or two, small students start a new think block at once, and a reply inside one is not a reply the server can
speak.

Delimiters are token-id sequences (``ForcingTokens.of``); the functions are pure and replayable, so the tokens a
rollout was forced to write can be found afterwards and left out of the loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from livethink.data.reasoning_format import ReasoningFormat

REPLY_RESERVE = 48
"""Tokens a reply gets after the forced end unless configured otherwise: the server's ``budget.reply_reserve``
default and ``livethink eval --reply-reserve``'s, so that a calibrated cap is measured as it is served."""


@dataclass(frozen=True)
class ForcingTokens:
    """A reasoning format as token ids: ``start`` opens thinking, ``close`` ends it, ``forced_end`` is inserted at
    the cap (it contains ``close``), ``eos`` ends a reply that used its reserve."""

    start: tuple[int, ...]
    close: tuple[int, ...]
    forced_end: tuple[int, ...]
    eos: int | None = None

    @classmethod
    def of(cls, tokenizer: Any, fmt: ReasoningFormat, eos: int | None = None) -> ForcingTokens:
        """The format's delimiters as the tokenizer spells them (``eos`` defaults to the tokenizer's)."""
        if not fmt.thinks:
            raise ValueError(f"budget forcing: the reasoning format {fmt.describe()} does not think")

        def ids(text: str) -> tuple[int, ...]:
            return tuple(tokenizer.encode(text, add_special_tokens=False))

        return cls(ids(fmt.start), ids(fmt.end), ids(fmt.forced_end),
                   tokenizer.eos_token_id if eos is None else eos)

    def to_json(self) -> dict[str, Any]:
        return {"start": list(self.start), "close": list(self.close), "forced_end": list(self.forced_end),
                "eos": self.eos}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ForcingTokens:
        return cls(tuple(data["start"]), tuple(data["close"]), tuple(data["forced_end"]), data.get("eos"))


def find(sequence: Sequence[int], pattern: Sequence[int], start: int = 0, end: int | None = None) -> int:
    """Index of the first ``pattern`` that starts in ``sequence[start:end]`` and fits in ``sequence``, else -1."""
    n, m = len(sequence), len(pattern)
    stop = n - m + 1 if end is None else min(end, n - m + 1)
    if m == 1:  # single-token delimiters (the common case): C speed, called at every decoding step
        try:
            return sequence.index(pattern[0], max(start, 0), max(stop, 0))
        except ValueError:
            return -1
    for i in range(max(start, 0), stop):
        if all(sequence[i + k] == pattern[k] for k in range(m)):
            return i
    return -1


def rfind(sequence: Sequence[int], pattern: Sequence[int]) -> int:
    """Index of the last ``pattern`` in ``sequence``, else -1."""
    m = len(pattern)
    if m == 1 and isinstance(sequence, list):
        try:
            return len(sequence) - 1 - sequence[::-1].index(pattern[0])
        except ValueError:
            return -1
    for i in range(len(sequence) - m, -1, -1):
        if all(sequence[i + k] == pattern[k] for k in range(m)):
            return i
    return -1


def thinking_opened(prompt_ids: Sequence[int], output_ids: Sequence[int], tokens: ForcingTokens) -> tuple[int, int] | None:
    """(output index where thinking begins, thinking tokens already in the prompt), or None while not opened.

    A prompt that ends inside an open think block (the server's prefill) counts its tokens after the start; else
    the first start delimiter the model writes opens it."""
    at = rfind(prompt_ids, tokens.start)
    if at >= 0 and find(prompt_ids, tokens.close, at) < 0:
        return 0, len(prompt_ids) - at - len(tokens.start)
    at = find(output_ids, tokens.start)
    return None if at < 0 else (at + len(tokens.start), 0)


def banned_token(prompt_ids: Sequence[int], output_ids: Sequence[int], tokens: ForcingTokens) -> int | None:
    """The token the model may not write next, or None: once thinking is open (pre-filled or written), the last
    token of the start delimiter wherever the tokens before it would complete one (a single-token start: always).
    The same ban as vLLM's ``SamplingParams.bad_words`` and transformers' ``bad_words_ids`` for that sequence."""
    if thinking_opened(prompt_ids, output_ids, tokens) is None:
        return None
    head = len(tokens.start) - 1
    if head:
        tail = [*prompt_ids[-head:], *output_ids][-head:]
        if tail != list(tokens.start[:-1]):
            return None
    return tokens.start[-1]


def cut_index(prompt_ids: Sequence[int], output_ids: Sequence[int], cap: int, tokens: ForcingTokens) -> int | None:
    """Output index where the forced end starts for thinking ``cap``, or None: thinking not opened (yet), or it
    closed on its own before the cap. An index past ``len(output_ids)`` means the cap is still ahead."""
    opened = thinking_opened(prompt_ids, output_ids, tokens)
    if opened is None:
        return None
    begin, prefilled = opened
    cut = begin + max(0, cap - prefilled)
    if find(output_ids, tokens.close, begin, cut) >= 0:
        return None
    return cut


def served_reply_end(prompt_ids: Sequence[int], output_ids: Sequence[int], tokens: ForcingTokens,
                     reply_reserve: int) -> int | None:
    """Output index where the server stops a reply whose think block closed on its own, or None (not closed, or
    the reply ends within its cap): ``reply_reserve`` tokens after the close delimiter, the tokens the model writes
    after it (its own blank line) included. The server counts a reply so (``ThinkingGuard.reply_count``), whether
    thinking was cut or not, so an evaluation of what is served stops there too."""
    start = natural_reply_start(prompt_ids, output_ids, tokens)
    if start is None:
        return None
    end = start + reply_reserve
    return end if end < len(output_ids) else None


def natural_reply_start(prompt_ids: Sequence[int], output_ids: Sequence[int], tokens: ForcingTokens) -> int | None:
    """Output index just after the close delimiter the model wrote itself, or None (thinking not opened, or not
    closed yet). A forced end is not a natural close: its close sits after the cut (``cut_index``)."""
    opened = thinking_opened(prompt_ids, output_ids, tokens)
    if opened is None:
        return None
    close = find(output_ids, tokens.close, opened[0])
    return None if close < 0 else close + len(tokens.close)


def next_forced_token(prompt_ids: Sequence[int], output_ids: Sequence[int], cap: int, tokens: ForcingTokens,
                      reply_reserve: int | None = None) -> int | None:
    """The token budget forcing writes next after ``output_ids`` (None: the model chooses): the forced end from
    the cut on, and ``eos`` once the reply after it has used ``reply_reserve`` tokens; a think block that closed
    on its own before the cap gets ``eos`` after ``reply_reserve`` reply tokens too (``served_reply_end``)."""
    cut = cut_index(prompt_ids, output_ids, cap, tokens)
    n = len(output_ids)
    if cut is None:  # closed on its own before the cap: the reply stops where the server stops it
        start = natural_reply_start(prompt_ids, output_ids, tokens)
        if start is not None and reply_reserve is not None and tokens.eos is not None and n == start + reply_reserve:
            return tokens.eos
        return None
    if n < cut:
        return None
    if n < cut + len(tokens.forced_end):
        if list(output_ids[cut:n]) != list(tokens.forced_end[: n - cut]):
            return None  # a cut that did not happen (generation reached the cap some other way)
        return tokens.forced_end[n - cut]
    if reply_reserve is not None and tokens.eos is not None and n == cut + len(tokens.forced_end) + reply_reserve:
        return tokens.eos
    return None


def forced_mask(prompt_ids: Sequence[int], completion_ids: Sequence[int], cap: int | None, tokens: ForcingTokens,
                reply_reserve: int | None = None) -> list[bool]:
    """Which tokens of a finished completion budget forcing wrote (``cap`` None: none). The policy did not choose
    them: RL leaves them out of the loss, as it does with tool output."""
    mask = [False] * len(completion_ids)
    if cap is None:
        return mask
    cut = cut_index(prompt_ids, completion_ids, cap, tokens)
    if cut is None:  # closed on its own: only the EOS that stopped the reply at its reserve was forced
        start = natural_reply_start(prompt_ids, completion_ids, tokens)
        eos_at = None if start is None or reply_reserve is None else start + reply_reserve
        if eos_at is not None and eos_at < len(completion_ids) and completion_ids[eos_at] == tokens.eos:
            mask[eos_at] = True
        return mask
    end = cut + len(tokens.forced_end)
    if list(completion_ids[cut:end]) != list(tokens.forced_end):
        return mask
    for i in range(cut, end):
        mask[i] = True
    if reply_reserve is not None and end + reply_reserve < len(completion_ids) + 1:
        eos_at = end + reply_reserve
        if eos_at < len(completion_ids) and completion_ids[eos_at] == tokens.eos:
            mask[eos_at] = True
    return mask


def was_forced(prompt_ids: Sequence[int], completion_ids: Sequence[int], cap: int | None, tokens: ForcingTokens) -> bool:
    """True when the completion's thinking was cut at ``cap``."""
    return any(forced_mask(prompt_ids, completion_ids, cap, tokens))


def forced_continuation(prompt_ids: Sequence[int], output_ids: Sequence[int], cap: int,
                        tokens: ForcingTokens) -> list[int] | None:
    """The prompt for the reply after a cut at ``cap``: prompt + thinking up to the cut + the forced end (what the
    server's two-phase forcing and the eval continue from). None: thinking closed before the cap."""
    cut = cut_index(prompt_ids, output_ids, cap, tokens)
    if cut is None:
        return None
    if cut > len(output_ids):  # generation stopped inside thinking before the cap (EOS, length): cut where it stopped
        cut = len(output_ids) - (1 if output_ids and output_ids[-1] == tokens.eos else 0)
    return [*prompt_ids, *output_ids[:cut], *tokens.forced_end]
