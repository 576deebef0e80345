"""Latency-budget math: pure functions from a deadline and live estimates to a token budget (or a refusal).

Notation (seconds unless noted): ``remaining`` = time left until the deadline when the plan is made, ``wait`` =
expected wait for an engine slot, ``ttft`` = expected time from engine submission to the first token
(prefill + engine queue), ``tpot`` = expected decode time per output token, ``margin`` = safety margin.
The token capacity (budget forcing as in s1, arXiv 2501.19393, with a deadline-derived cap) is

    N_total = floor((remaining − wait − ttft − margin) / tpot)

with ``tpot`` the conservative per-token time (mean × safety): it decides admission. Thinking is sized on what
is *expected* (mean per-token time ``tpot_mean``, typical reply ``reply_expected`` tokens) and ended in *time*
so that the reply still fits at its measured tail:

    thinking_cap = min(max_thinking, N_expected − reply_expected)    reply = min(reply_reserve, N_total)
    thinking_deadline = now + remaining − margin − (reply_tail · tpot_hi + switch)

where ``N_expected`` is the capacity at ``tpot_mean``, ``reply_tail`` a high quantile of recent reply lengths and
``switch`` the time to start the reply after a forced end (a prefill). Whichever of the cap and the time limit
comes first forces ``</think>``; a reply that runs past its tail is cut at the hard deadline (complete sentences
kept), so the deadline holds either way while a typical forced reply ends just inside it. Without measurements
(``tpot_mean``, ``reply_expected``, ``reply_tail`` unset) this is the plain rule: cap = N_total − reserve, time
limit = reply reserve at ``tpot_hi``.

When even ``min_reply_tokens`` do not fit, the request is refused (HTTP 429) with a ``Retry-After`` that
estimates when the queue will have drained enough.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from livethink.data.budget_forcing import REPLY_RESERVE


@dataclass(frozen=True)
class Estimates:
    """Live estimates for one engine under its current load (seconds).

    ``tpot`` is the expected per-token time (sizes the token budget); ``tpot_hi`` a pessimistic one (mean +
    spread) that times the end of thinking, so the reply still fits when decoding turns out slower.
    """

    wait: float  # queue wait for an engine slot
    ttft: float  # engine submission -> first token
    tpot: float  # per output token after the first (conservative: admission)
    tpot_hi: float | None = None  # None = tpot
    tpot_mean: float | None = None  # the expected per-token time (sizes thinking); None = tpot
    ttft_mean: float | None = None  # the expected TTFT; None = ttft
    switch: float = 0.0  # starting the reply after a forced end of thinking (a continuation prefill)

    @property
    def tpot_reply(self) -> float:
        """Per-token time of the reply's tail (times the end of thinking)."""
        if self.tpot_hi is None:
            return self.tpot
        return self.tpot_hi if self.tpot_mean is not None else max(self.tpot, self.tpot_hi)


@dataclass(frozen=True)
class BudgetPolicy:
    """How a deadline becomes tokens (token counts are output tokens)."""

    margin_s: float = 0.05
    reply_reserve: int = REPLY_RESERVE
    min_reply_tokens: int = 8
    max_thinking_tokens: int = 256
    max_tokens: int = 512
    min_retry_after_s: float = 1.0

    def __post_init__(self) -> None:
        if self.margin_s < 0:
            raise ValueError(f"margin_s must be >= 0, got {self.margin_s}")
        for name in ("reply_reserve", "min_reply_tokens", "max_thinking_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be > 0, got {self.max_tokens}")
        if self.min_reply_tokens > self.max_tokens:
            raise ValueError(f"min_reply_tokens={self.min_reply_tokens} exceeds max_tokens={self.max_tokens}")


@dataclass(frozen=True)
class TokenBudget:
    """What the engine may spend: ``thinking_cap`` tokens of reasoning, then up to ``reply_cap`` for the reply.

    ``reply_reserve`` is what planning holds back for the reply; ``reply_limit`` (None: the reserve) is what the
    reply may use once thinking has ended, when the caller's own ``max_tokens`` allows more than the reserve (the
    chat endpoint: OpenAI's ``max_tokens`` bounds thinking plus reply, and the hard deadline bounds the time).
    ``max_tokens`` = thinking_cap + reply_cap. ``thinking_deadline`` (monotonic seconds, or None) is the
    latest time thinking may go on: past it the engine forces ``</think>`` even below the token cap, so the
    reply still fits when decoding turned out slower than estimated.
    """

    thinking_cap: int
    reply_reserve: int
    thinking_deadline: float | None = None
    probe: bool = False  # granted although the estimates said no (they may be stale); the hard cut bounds it
    expected_end: float | None = None  # monotonic: when the plan expects the reply to be complete
    reply_limit: int | None = None

    @property
    def reply_cap(self) -> int:
        """The most reply tokens after thinking ends: ``reply_limit``, else the reserve."""
        return self.reply_reserve if self.reply_limit is None else max(self.reply_reserve, self.reply_limit)

    @property
    def max_tokens(self) -> int:
        return self.thinking_cap + self.reply_cap

    @property
    def thinking_enabled(self) -> bool:
        return self.thinking_cap > 0


@dataclass(frozen=True)
class Reject:
    """Refuse now: the deadline cannot be met. ``retry_after_s`` is when a retry is likely to fit."""

    retry_after_s: float
    reason: str
    needed_s: float = 0.0  # time the minimal reply would need at the current load


def token_capacity(remaining_s: float, est: Estimates, margin_s: float) -> int:
    """N_total = floor((remaining − wait − ttft − margin) / tpot); negative when nothing fits."""
    if est.tpot <= 0:
        raise ValueError(f"tpot must be > 0, got {est.tpot}")
    usable = remaining_s - est.wait - est.ttft - margin_s
    return math.floor(usable / est.tpot + 1e-9)


def time_needed(tokens: int, est: Estimates, margin_s: float) -> float:
    """Seconds a reply of ``tokens`` output tokens needs, queue wait included (the inverse of token_capacity)."""
    return est.wait + est.ttft + margin_s + tokens * est.tpot


def split_budget(
    n_total: int,
    reply_reserve: int,
    max_thinking: int,
    max_tokens: int,
    thinking_allowed: bool = True,
) -> tuple[int, int]:
    """(thinking_cap, reply_tokens) from a token capacity.

    The reply reserve is served first; thinking gets what is left, capped by ``max_thinking``; the sum never
    exceeds ``max_tokens`` (a caller's ``max_tokens`` wins over the reserve too).
    """
    n = max(0, min(n_total, max_tokens))
    reply = min(reply_reserve, n)
    thinking = max(0, min(max_thinking, n - reply)) if thinking_allowed else 0
    return thinking, reply


def retry_after(remaining_s: float, est: Estimates, policy: BudgetPolicy, tokens: int | None = None) -> float:
    """Seconds until a request with the same deadline would likely fit ``tokens`` output tokens (default: the
    minimal reply): the shortfall of the queue wait.

    If the deadline cannot be met even with an empty queue, the full wait is suggested (a retry needs a
    longer deadline anyway); never less than ``policy.min_retry_after_s``.
    """
    needed = time_needed(max(policy.min_reply_tokens, 1) if tokens is None else tokens, est, policy.margin_s)
    fits_when_idle = needed - est.wait <= remaining_s
    delay = needed - remaining_s if fits_when_idle else est.wait
    return max(policy.min_retry_after_s, delay)


def plan_budget(
    remaining_s: float,
    est: Estimates,
    policy: BudgetPolicy,
    *,
    max_thinking: int | None = None,
    reply_reserve: int | None = None,
    max_tokens: int | None = None,
    thinking_allowed: bool = True,
    now: float | None = None,
    reply_expected: int | None = None,
    reply_tail: int | None = None,
    forced_end_tokens: int = 0,
    first_sentence: int | None = None,
) -> TokenBudget | Reject:
    """Turn the remaining time into a token budget, or refuse.

    ``forced_end_tokens``: what a cut adds beyond the thinking cap (the forced end, less the thinking the prompt
    pre-filled; ``livethink.data.budget_forcing``): the thinking cap leaves room for it, so the reply keeps its
    reserve and a caller's ``max_tokens`` holds.
    ``max_thinking`` / ``reply_reserve`` / ``max_tokens`` override the policy (per arm or per request).
    ``reply_expected`` / ``reply_tail``: typical and tail reply lengths measured for the model (None: the
    reserve). With ``now`` (monotonic), the budget carries a thinking deadline: the time after which only the
    reply's tail (plus the margin) still fits before the deadline, timed with the pessimistic ``tpot_hi``.
    ``first_sentence``: a streamed reply (``speech.py``), whose deadline bounds only its first sentence, planned at
    this many tokens (``reply_expected`` / ``reply_tail`` then describe first sentences): only that part of the
    reply must fit before the deadline, the rest of the reserve is decoded while the avatar speaks, so thinking
    gets what the rest of the reserve would have taken.
    """
    thinking_limit = policy.max_thinking_tokens if max_thinking is None else max_thinking
    cap = policy.max_tokens if max_tokens is None else min(max_tokens, policy.max_tokens)
    min_reply = min(policy.min_reply_tokens, cap)
    if first_sentence is not None:  # a streamed reply: its first sentence is what must fit
        min_reply = max(1, min(min_reply, first_sentence))
    reserve = max(min_reply, policy.reply_reserve if reply_reserve is None else reply_reserve)
    n_total = token_capacity(remaining_s, est, policy.margin_s)
    if n_total < max(min_reply, 1):
        needed = time_needed(max(min_reply, 1), est, policy.margin_s)
        return Reject(retry_after(remaining_s, est, policy), "deadline_unreachable", needed)
    overhead = forced_end_tokens if thinking_allowed else 0
    thinking, reply = split_budget(n_total, reserve, thinking_limit, cap, thinking_allowed)
    in_deadline = reply  # the reply tokens that must be decoded before the deadline
    if first_sentence is not None:
        reply = min(reserve, cap)  # the whole reserve, decoded while the avatar speaks
        in_deadline = max(min_reply, min(reply, first_sentence))
        thinking = min(thinking_limit, n_total) if thinking_allowed else 0
    thinking = max(0, min(thinking, n_total - in_deadline - overhead, cap - reply - overhead))
    if thinking_allowed and (est.tpot_mean is not None or reply_expected is not None):
        expected = replace(est, tpot=est.tpot_mean or est.tpot, ttft=est.ttft if est.ttft_mean is None else est.ttft_mean)
        n_expected = max(n_total, token_capacity(remaining_s, expected, policy.margin_s))
        typical = in_deadline if reply_expected is None else max(min_reply, min(in_deadline, reply_expected))
        thinking = max(0, min(thinking_limit, n_expected - typical - overhead, cap - reply - overhead))
    thinking_deadline = expected_end = None
    if now is not None and thinking > 0:
        tail = in_deadline if reply_tail is None else max(min_reply, min(in_deadline, reply_tail))
        thinking_deadline = now + remaining_s - policy.margin_s - tail * est.tpot_reply - est.switch
    if now is not None:
        typical = in_deadline if reply_expected is None else max(1, min(in_deadline, reply_expected))
        expected_end = expected_completion(now, est, thinking, typical, thinking_deadline)
    return TokenBudget(thinking, reply, thinking_deadline, expected_end=expected_end)


def expected_completion(
    now: float, est: Estimates, thinking: int, reply: int, thinking_deadline: float | None
) -> float:
    """When a plan expects its reply complete (monotonic): wait and first token, thinking up to its cap or its
    time limit (then the reply restarts, ``switch``), then a typical reply, all at the expected speed."""
    tpot = est.tpot_mean or est.tpot
    think_end = now + est.wait + (est.ttft if est.ttft_mean is None else est.ttft_mean) + thinking * tpot
    if thinking_deadline is not None and thinking_deadline < think_end:
        think_end = max(now, thinking_deadline) + est.switch
    return think_end + reply * tpot


def hard_deadline(arrival: float, deadline_s: float, finalize_s: float) -> float:
    """Monotonic time at which generation is cut, leaving ``finalize_s`` to send the response."""
    return arrival + max(0.0, deadline_s - finalize_s)
