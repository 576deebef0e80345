"""The engine interface: ``generate(request, budget) -> async iterator of Delta`` and ``abort(request_id)``.

An engine serves one or more model variants (a checkpoint, or LoRA adapters over one base). The prompt comes
tokenized (the server renders the chat template and counts tokens); if ``request.thinking`` the prompt ends
inside ``<think>`` and the engine enforces the budget: at ``budget.thinking_cap`` reasoning tokens, or at
``budget.thinking_deadline``, it forces the end of thinking (``\\n</think>\\n\\n``) and the reply continues with
``budget.reply_reserve`` tokens (budget forcing). Cancelling the iterator, or ``abort``, stops the request in
the engine.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from livethink.serve.budget import TokenBudget

# What is forced when thinking must end: closes the block and starts the reply on a fresh paragraph, the
# completion layout of ``livethink.data.prompt.format_completion``.
FORCED_THINK_END = "\n</think>\n\n"


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
    ``forced_end_of_thinking`` marks the delta whose text contains the forced ``</think>``.
    """

    text: str
    tokens: int
    finish_reason: str | None = None
    forced_end_of_thinking: bool = False
    thinking_tokens: int | None = None


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

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def tokenizer_for(self, model: str) -> Any: ...

    def generate(self, request: GenerationRequest, budget: TokenBudget) -> AsyncIterator[Delta]: ...

    async def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...


@dataclass
class ThinkingGuard:
    """Tracks reasoning tokens of one request and says when the end of thinking must be forced."""

    close_id: int
    budget: TokenBudget
    thinking: bool = True
    count: int = 0  # reasoning tokens
    reply_count: int = 0  # tokens after the think block

    def observe(self, token_ids: list[int] | tuple[int, ...]) -> None:
        """Count new tokens; leaving the think block on ``</think>``."""
        for tid in token_ids:
            if not self.thinking:
                self.reply_count += 1
            elif tid == self.close_id:
                self.thinking = False
            else:
                self.count += 1

    @property
    def reply_done(self) -> bool:
        """The reply used its reserve (a think block that closed early does not lengthen the reply)."""
        return not self.thinking and self.reply_count >= self.budget.reply_reserve

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


def think_close_id(tokenizer: Any) -> int:
    """Id of the single ``</think>`` token (the student's tokenizer and Qwen3's both have one)."""
    ids = tokenizer.encode("</think>", add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"the tokenizer must encode '</think>' as one token, got {ids}")
    return ids[0]
