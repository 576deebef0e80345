"""Calculator-assisted decoding for transformers and vLLM: force the digits of a pending sum's result.

Both processors (this module's for transformers, ``vllm_processor``'s for vLLM) are stateless: at every step they decode the tail of what was generated, ask
:func:`~livethink.calculator.arithmetic.next_result_char` whether a result is being written, and if so leave
only that character's token possible. Sampling, stop strings and streaming work unchanged. The tail is decoded
only where a result can be pending: its last token's text ends in a result character or a space (or shows
nothing) and one of its tokens has an ``=`` (each token's own text is decoded once per tokenizer).

- transformers: ``model.generate(..., logits_processor=LogitsProcessorList([CalculatorLogitsProcessor(tok)]))``
- vLLM: ``LLM(..., logits_processors=[vllm_processor.VLLMCalculatorLogitsProcessor])`` and per request
  ``SamplingParams(extra_args={"calculator": True})``.
"""

from __future__ import annotations

import weakref

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from livethink.calculator.arithmetic import RESULT_CHARS, next_result_char

TAIL_TOKENS = 48  # generated tokens decoded per step: more than the longest "A op B = result" (one token a digit)
REQUEST_FLAG = "calculator"  # SamplingParams.extra_args key that turns the vLLM processor on for a request


def result_char_token_ids(tokenizer) -> dict[str, int]:
    """Token id of each character a result is written with; a clear error if one is not a single token."""
    ids: dict[str, int] = {}
    for char in sorted(RESULT_CHARS):
        encoded = tokenizer.encode(char, add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(f"calculator: tokenizer spells {char!r} as {len(encoded)} tokens; it needs one per digit")
        ids[char] = encoded[0]
    return ids


_PENDING_LAST_CHARS = RESULT_CHARS | {" "}  # a text with a pending result ends "= " and what is written of it


class _TokenGate:
    """Which token ids can end a text with a pending result, and which have an ``=``, from each token's own text.

    A token's last character does not depend on its neighbours (context changes only leading spaces and
    completes multi-byte characters, never ASCII), and ``=`` is one byte: a tail whose last token cannot end
    a pending result, or with no ``=`` in it, decodes to a text ``next_result_char`` answers None for. Ids the
    tokenizer does not know, and tokens that show nothing (special tokens), always pass."""

    def __init__(self, tokenizer):
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=True)
        self.quiet_end = frozenset(i for i, t in enumerate(texts) if t and t[-1] not in _PENDING_LAST_CHARS)
        self.no_equals = frozenset(i for i, t in enumerate(texts) if "=" not in t)

    def may_be_pending(self, tail: list[int]) -> bool:
        return tail[-1] not in self.quiet_end and not self.no_equals.issuperset(tail)


_GATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _gate(tokenizer) -> _TokenGate:
    gate = _GATES.get(tokenizer)
    if gate is None:
        gate = _GATES[tokenizer] = _TokenGate(tokenizer)
    return gate


def forced_token(tokenizer, char_ids: dict[str, int], token_ids: list[int]) -> int | None:
    """The token to force after ``token_ids`` (the sequence so far; None: let the model choose)."""
    if not token_ids:
        return None
    token_ids = token_ids[-TAIL_TOKENS:]
    if not _gate(tokenizer).may_be_pending(token_ids):
        return None
    tail = tokenizer.decode(token_ids, skip_special_tokens=True)
    char = next_result_char(tail)
    return None if char is None else char_ids[char]


def forced_mask(tokenizer, char_ids: dict[str, int], context_ids: list[int], completion_ids: list[int]) -> list[bool]:
    """Which tokens of ``completion_ids`` the calculator forced (replayed: ``context_ids`` is what preceded them).

    These are tool output, not the policy's choice: RL leaves them out of the loss (``tool_mask``)."""
    sequence = list(context_ids[-TAIL_TOKENS:])
    mask = []
    for token in completion_ids:
        mask.append(forced_token(tokenizer, char_ids, sequence[-TAIL_TOKENS:]) is not None)
        sequence.append(token)
    return mask


def force(logits: torch.Tensor, token_id: int) -> torch.Tensor:
    """``logits`` (1-D) with every token but ``token_id`` at -inf."""
    forced = torch.full_like(logits, float("-inf"))
    forced[token_id] = 0.0
    return forced


class CalculatorLogitsProcessor(LogitsProcessor):
    """transformers ``LogitsProcessor``: calculator results for every row of a (left-padded) batch.

    It reads the tail of the whole sequence, so a prompt that ends in ``A op B = `` (a pre-filled assistant
    turn) gets its result too; padding and special tokens are skipped when decoding."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.char_ids = result_char_token_ids(tokenizer)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for row, tail in enumerate(input_ids[:, -TAIL_TOKENS:].tolist()):  # one copy to the host for the batch
            token = forced_token(self.tokenizer, self.char_ids, tail)
            if token is not None:
                scores[row] = force(scores[row], token)
        return scores


def with_calculator(model, tokenizer):
    """Make ``model.generate`` calculator-assisted (for callers that build the ``generate`` call themselves, such
    as TRL's GRPO rollouts): an explicit ``logits_processor`` argument still wins. Returns ``model``."""
    processors = LogitsProcessorList([CalculatorLogitsProcessor(tokenizer)])
    generate = model.generate

    def generate_with_calculator(*args, **kwargs):
        kwargs.setdefault("logits_processor", processors)
        return generate(*args, **kwargs)

    model.generate = generate_with_calculator
    return model
