"""Tail batching for stage 2's synchronous rollouts (RollPacker, arXiv 2509.21009): the selection and the queue.

RollPacker's short rounds launch more prompts than a step needs and keep the first groups to finish; prompts whose
responses run long are aborted, queued, and later run together in a dedicated long round. On a synchronous batch
engine (transformers ``generate``, colocated vLLM) "first to finish" becomes a token limit:

- a **short round** generates ``n_groups + extra_groups(n_groups, η)`` prompts with the short limit
  ``tail_short_tokens``; a group any of whose completions reaches that limit without ending is **deferred** (its
  partial tokens are discarded, its prompt queued with the step it was deferred at); the step trains on the first
  ``n_groups`` complete groups (if fewer finished, the rest of the batch is filled with deferred rows masked out of
  the loss, as dynamic sampling fills with zero-std groups);
- once the queue holds a full batch of prompts, the step is a **long round**: the oldest queued prompts are
  generated from scratch at the full ``max_completion_length`` by the current policy (never resumed from stale
  tokens), so every group stays whole and on-policy; the step's own fresh prompts are pushed back and come first
  among the next short rounds' extra prompts.

Staleness is the number of optimiser steps a deferred prompt waited for its long round. The options
(``TailBatchingOptions``) are a mixin of ``GRPOVariantConfig``; the trainer glue is ``tail_rollouts``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

RoundKind = Literal["short", "long", "plain"]


@dataclass
class TailBatchingOptions:
    """Config fields of tail batching (a rollout option any variant can turn on)."""

    tail_batching: bool = field(default=False, metadata={
        "help": "tail batching (RollPacker): short rounds over-provision prompts and defer the groups that reach "
                "tail_short_tokens to a long round at max_completion_length; groups stay whole and on-policy"})
    tail_short_tokens: int = field(default=0, metadata={
        "help": "tail batching: the short rounds' completion limit (tokens); 0 = max_completion_length // 2"})
    tail_overprovision: float = field(default=1.25, metadata={
        "help": "tail batching: prompts launched per prompt trained on in a short round (RollPacker's "
                "max_prompts_ratio; >= 1)"})

    def tail_short_limit(self) -> int:
        """The short rounds' limit; raises ``ValueError`` naming the field for a bad value of any tail option."""
        max_len = self.max_completion_length  # type: ignore[attr-defined]  (GRPOConfig's)
        if not math.isfinite(self.tail_overprovision) or self.tail_overprovision < 1:
            raise ValueError(f"tail_overprovision must be a finite number >= 1, got {self.tail_overprovision}")
        if self.tail_short_tokens < 0:
            raise ValueError(f"tail_short_tokens must be >= 0 (0 = max_completion_length // 2), got "
                             f"{self.tail_short_tokens}")
        limit = self.tail_short_tokens or max_len // 2
        if not 0 < limit < max_len:
            raise ValueError(f"tail_short_tokens ({limit}) must be in (0, max_completion_length = {max_len}): the "
                             "short rounds must stop before the long round's limit")
        return limit


# ---------------------------------------------------------------- pure selection


def extra_groups(n_groups: int, overprovision: float) -> int:
    """Prompts a short round launches beyond the ``n_groups`` it trains on: ⌈n_groups·η⌉ − n_groups."""
    return max(0, math.ceil(n_groups * overprovision - 1e-9) - n_groups)


def plan_round(queued: int, n_groups: int, short_cap: int, full_cap: int) -> RoundKind:
    """``long`` once ``queued`` deferred prompts fill a batch of ``n_groups``; ``plain`` when the round's own cap
    (``full_cap``: the variant's schedule or ``max_completion_length``) is no longer than the short limit (nothing
    could be deferred); else ``short``."""
    if queued >= n_groups:
        return "long"
    return "plain" if full_cap <= short_cap else "short"


def hit_limit(lengths: Sequence[int], ended: Sequence[bool], limit: int) -> list[bool]:
    """Per completion: it reached ``limit`` tokens without ending (it would have run on)."""
    return [not e and n >= limit for n, e in zip(lengths, ended, strict=True)]


def deferred_groups(hit: Sequence[bool], group_size: int) -> list[bool]:
    """Per group of ``group_size`` consecutive completions: any of them hit the limit (the group is deferred)."""
    if len(hit) % group_size:
        raise ValueError(f"tail batching: {len(hit)} completions do not split into groups of {group_size}")
    return [any(hit[i:i + group_size]) for i in range(0, len(hit), group_size)]


def keep_order(usable: Sequence[bool], preferred: Sequence[bool], needed: int) -> list[int]:
    """The ``needed`` groups a step keeps: usable and preferred first, then usable, then (fillers, to be masked)
    the rest; each part in order."""
    n = len(usable)
    first = [i for i in range(n) if usable[i] and preferred[i]]
    second = [i for i in range(n) if usable[i] and not preferred[i]]
    rest = [i for i in range(n) if not usable[i]]
    return (first + second + rest)[:needed]


def staleness(waits: Sequence[int]) -> tuple[float, int]:
    """(mean, max) steps the prompts of a long round waited since they were deferred (0, 0 for none)."""
    return (sum(waits) / len(waits), max(waits)) if waits else (0.0, 0)


# ---------------------------------------------------------------- state


@dataclass
class TailQueue:
    """Deferred prompts (oldest first, each with the step it was deferred at) and the fresh prompts long rounds
    pushed back (``displaced``). One per process: its prompts are that process's share of the batch."""

    deferred: deque[tuple[dict[str, Any], int]] = field(default_factory=deque)
    displaced: deque[dict[str, Any]] = field(default_factory=deque)

    def __len__(self) -> int:
        return len(self.deferred)

    def defer(self, prompts: Sequence[dict[str, Any]], step: int) -> None:
        self.deferred.extend((dict(p), step) for p in prompts)

    def take_long_round(self, n: int, step: int) -> tuple[list[dict[str, Any]], list[int]]:
        """The ``n`` oldest deferred prompts and the steps each waited (``step`` − its deferral step)."""
        if n > len(self.deferred):
            raise RuntimeError(f"tail batching: a long round of {n} prompts but only {len(self.deferred)} queued")
        taken = [self.deferred.popleft() for _ in range(n)]
        return [p for p, _ in taken], [step - s for _, s in taken]

    def displace(self, prompts: Sequence[dict[str, Any]]) -> None:
        """Fresh prompts a long round took the place of: they come first among later short rounds' extras."""
        self.displaced.extend(dict(p) for p in prompts)

    def take_displaced(self, n: int) -> list[dict[str, Any]]:
        """Up to ``n`` displaced prompts, oldest first."""
        return [self.displaced.popleft() for _ in range(min(n, len(self.displaced)))]

    def state(self) -> dict[str, Any]:
        """JSON-ready state (a checkpoint keeps it)."""
        return {"deferred": [[p, s] for p, s in self.deferred], "displaced": list(self.displaced)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> TailQueue:
        return cls(deque((dict(p), int(s)) for p, s in state.get("deferred", [])),
                   deque(dict(p) for p in state.get("displaced", [])))
