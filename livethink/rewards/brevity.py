"""LiveThinking's length-band reward (arXiv 2510.07685, https://arxiv.org/abs/2510.07685).

With L_ref the reference length (the RFT model's length, per prompt or one global number):

    L_lower = λ_low·L_ref,  L_upper = λ_up·L_ref
    d = L_lower − L  if L < L_lower;  L − L_upper  if L > L_upper;  0 inside the band
    r_len = max(0, 1 − d/ε)

so r_len is 1 inside the band and falls linearly to 0 over ε tokens outside it (too short is penalised too).
The paper gives no values for λ_low, λ_up, ε: the defaults here (band [0.2, 0.4]·L_ref, ε = 0.5·L_ref) aim at
the ≥ 60 % compression target of stage 2 and are meant to be set in the GRPO config.

L counts tokens of the reasoning only (``scope="reasoning"``) or of the whole completion (``"completion"``), with
a HF tokenizer, any ``str -> int | list`` callable, or whitespace words when no tokenizer is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from livethink.rewards.parse import Completion, completion_text, parse_completion

Scope = Literal["reasoning", "completion"]
LAMBDA_LOW = 0.2
LAMBDA_UP = 0.4
EPSILON_FRACTION = 0.5  # ε = 0.5·L_ref when no ε is given
Tokenizer = Any  # a HF tokenizer (has .encode) or a callable str -> int | sequence


def band_bounds(l_ref: float, lambda_low: float = LAMBDA_LOW, lambda_up: float = LAMBDA_UP) -> tuple[float, float]:
    """(L_lower, L_upper)."""
    if l_ref <= 0:
        raise ValueError(f"L_ref must be > 0, got {l_ref}")
    if not 0 <= lambda_low <= lambda_up:
        raise ValueError(f"need 0 <= lambda_low <= lambda_up, got {lambda_low}, {lambda_up}")
    return lambda_low * l_ref, lambda_up * l_ref


def band_distance(length: float, l_ref: float, lambda_low: float = LAMBDA_LOW, lambda_up: float = LAMBDA_UP) -> float:
    """d: how far ``length`` lies outside the band (0 inside)."""
    low, up = band_bounds(l_ref, lambda_low, lambda_up)
    if length < low:
        return low - length
    if length > up:
        return length - up
    return 0.0


def band_reward(
    length: float,
    l_ref: float,
    lambda_low: float = LAMBDA_LOW,
    lambda_up: float = LAMBDA_UP,
    epsilon: float | None = None,
) -> float:
    """r_len = max(0, 1 − d/ε); ε defaults to ``EPSILON_FRACTION·L_ref`` tokens."""
    eps = EPSILON_FRACTION * l_ref if epsilon is None else epsilon
    if eps <= 0:
        raise ValueError(f"epsilon must be > 0, got {eps}")
    return max(0.0, 1.0 - band_distance(length, l_ref, lambda_low, lambda_up) / eps)


def count_tokens(text: str, tokenizer: Tokenizer | Callable[[str], Any] | None = None) -> int:
    """Token count of ``text``: HF tokenizer (no special tokens), a callable, or whitespace words."""
    if not text:
        return 0
    if tokenizer is None:
        return len(text.split())
    if hasattr(tokenizer, "encode"):
        try:
            return len(tokenizer.encode(text, add_special_tokens=False))
        except TypeError:  # tokenizers.Tokenizer.encode returns an Encoding
            encoded = tokenizer.encode(text)
            return len(getattr(encoded, "ids", encoded))
    if callable(tokenizer):
        out = tokenizer(text)
        return int(out) if isinstance(out, int | float) else len(out)
    raise TypeError(f"tokenizer must have .encode or be callable, got {type(tokenizer).__name__}")


def completion_length(
    completion: Completion, tokenizer: Tokenizer | None = None, scope: Scope = "reasoning"
) -> int:
    """L of a completion: its reasoning only, or the whole output text."""
    if scope == "reasoning":
        return count_tokens(parse_completion(completion).reasoning, tokenizer)
    if scope == "completion":
        content, reasoning = completion_text(completion)
        return count_tokens(content, tokenizer) + (count_tokens(reasoning, tokenizer) if reasoning else 0)
    raise ValueError(f"scope must be 'reasoning' or 'completion', got {scope!r}")
