"""The engine interface: ``generate(request, budget) -> async iterator of Delta`` and ``abort(request_id)``.

An engine serves one or more model variants (a checkpoint, or LoRA adapters over one base). The prompt comes
tokenized (the server renders the chat template and counts tokens); if ``request.thinking`` the prompt ends
inside the model's reasoning (``engine.reasoning_format``, e.g. ``<think>``) and the engine enforces the budget: at
``budget.thinking_cap`` reasoning tokens, or at ``budget.thinking_deadline``, it forces the end of thinking
(``ReasoningFormat.forced_end``, e.g. ``\\n</think>\\n\\n``, of any number of tokens) and the reply continues with up
to ``budget.reply_cap`` tokens (budget forcing). A model that does not think gets only the reply cap.
Cancelling the iterator, or ``abort``, stops the request in the engine. ``alive()`` is the engine's own liveness;
a dead engine is restarted by ``stop()`` then ``start()`` (``livethink.serve.engines.supervisor``).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from livethink.data.reasoning_format import THINK, ReasoningFormat
from livethink.serve.budget.plan import TokenBudget

# The default format's forced end: closes the block and starts the reply on a fresh paragraph.
FORCED_THINK_END = THINK.forced_end


@dataclass(frozen=True)
class SamplingOptions:
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int | None = None
    stop: tuple[str, ...] = ()
    min_tokens: int = 0  # suppress EOS until this many tokens were generated
    ignore_eos: bool = False
    stream_interval: int = 1  # deliver deltas every n tokens (less front-end work when nobody watches tokens)


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    model: str  # the variant name (selects the LoRA adapter or checkpoint)
    prompt_token_ids: list[int]
    sampling: SamplingOptions = SamplingOptions()
    thinking: bool = True  # the prompt ends inside an open think block


@dataclass(frozen=True)
class Delta:
    """New output: ``text`` decoded from ``tokens`` new tokens.

    The last delta carries ``finish_reason`` ("stop", "length", "abort") and ``thinking_tokens``.
    ``forced_end_of_thinking`` marks the delta whose text contains the forced ``</think>``. ``token_ids``: the
    new tokens' ids, where the engine reports them (the vLLM and transformers engines do).
    """

    text: str
    tokens: int
    finish_reason: str | None = None
    forced_end_of_thinking: bool = False
    thinking_tokens: int | None = None
    token_ids: tuple[int, ...] = ()


@dataclass
class EngineStats:
    kind: str
    models: tuple[str, ...]
    running: int  # requests inside generate() right now
    engine_unfinished: int  # requests the engine itself still tracks (must reach 0 after aborts)
    aborts: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    kind: str
    models: tuple[str, ...]
    reasoning_format: ReasoningFormat  # resolved at start (config, checkpoint, tokenizer)

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def tokenizer_for(self, model: str) -> Any: ...

    def generate(self, request: GenerationRequest, budget: TokenBudget) -> AsyncIterator[Delta]: ...

    async def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...

    def alive(self) -> bool:
        """The engine's own liveness (vLLM: its engine core process; transformers: its decode thread). Cheap:
        polled every ``engine.health_poll_s``. A stopped engine is not alive."""
        ...


class EngineDead(RuntimeError):
    """The engine died (its process or decode thread is gone): raised to the requests it was serving."""


@dataclass
class ThinkingGuard:
    """Tracks reasoning tokens of one request and says when the end of thinking must be forced.

    The end of thinking is seen as the single token ``close_id`` when the delimiter is one token, else as the
    string ``close_text`` in the decoded text (a delimiter of several tokens; the delta that completes it counts
    as reasoning).
    """

    close_id: int | None
    budget: TokenBudget
    thinking: bool = True
    close_text: str = ""
    count: int = 0  # reasoning tokens, the pre-filled ones after the start delimiter included
    reply_count: int = 0  # tokens after the think block
    _tail: str = field(default="", repr=False)

    def observe(self, token_ids: list[int] | tuple[int, ...], text: str = "") -> None:
        """Count new tokens (and their decoded ``text``); leaving the think block at its end delimiter."""
        if self.close_id is None:
            if not self.thinking:
                self.reply_count += len(token_ids)
                return
            self.count += len(token_ids)
            self._tail += text
            if self.close_text and self.close_text in self._tail:
                self.thinking = False
            else:
                self._tail = self._tail[-max(0, len(self.close_text) - 1) :] if self.close_text else ""
            return
        for tid in token_ids:
            if not self.thinking:
                self.reply_count += 1
            elif tid == self.close_id:
                self.thinking = False
            else:
                self.count += 1

    @property
    def reply_done(self) -> bool:
        """The reply used its cap (a think block that closed early does not lengthen the reply)."""
        return not self.thinking and self.reply_count >= self.budget.reply_cap

    def must_force(self, now: float | None = None) -> bool:
        if not self.thinking:
            return False
        if self.count >= self.budget.thinking_cap:
            return True
        deadline = self.budget.thinking_deadline
        return deadline is not None and (time.monotonic() if now is None else now) >= deadline

    def seconds_left(self, now: float | None = None) -> float | None:
        """Time until the thinking deadline (None: no time limit or not thinking)."""
        if not self.thinking or self.budget.thinking_deadline is None:
            return None
        return self.budget.thinking_deadline - (time.monotonic() if now is None else now)


def single_token_id(tokenizer: Any, text: str) -> int | None:
    """The id of ``text`` if the tokenizer encodes it as exactly one token, else None."""
    ids = tokenizer.encode(text, add_special_tokens=False) if text else []
    return ids[0] if len(ids) == 1 else None

