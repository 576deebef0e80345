"""One request's generation: the deadline-bounded producer task and what the consumer tracks.

``produce`` runs the engine in its own task under one ``asyncio.timeout_at`` (the hard deadline), pushing
deltas to a queue and aborting the engine request when it stops early; ``Progress`` accumulates the deltas
(text, token counts, timings, think/reply split) into ``Piece`` events and, at the end, a ``Result``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from livethink.serve.budget.plan import TokenBudget
from livethink.serve.engines.base import Delta, Engine, GenerationRequest
from livethink.serve.request_path.reasoning import ThinkSplitter


@dataclass(frozen=True)
class Piece:
    phase: str  # reasoning | reply
    text: str


@dataclass
class Result:
    reasoning: str
    reply: str
    finish_reason: str
    fallback: bool
    forced_end_of_thinking: bool
    deadline_met: bool
    prompt_tokens: int
    reasoning_tokens: int
    completion_tokens: int
    queue_ms: float
    first_token_ms: float | None
    first_reply_token_ms: float | None
    e2e_ms: float
    budget: TokenBudget | None
    cut_at_deadline: bool = False
    status: str = "ok"
    fallback_reason: str | None = None  # deadline | no_reply | below_min_thinking
    planned_ms: float | None = None  # when the plan expected the reply complete (from arrival)
    # a streamed livestream reply (``running.py``): its first sentence (ms from arrival) and the speech stalls
    first_sentence_ms: float | None = None
    stalls: int = 0
    sentences: int = 0
    # admission refused the request and the endpoint's ``on_refusal: filler`` answered with a filler line instead
    # of a 429 (``fallback`` too): never a correct answer, whatever records it
    refused: bool = False
    refusal_reason: str | None = None

    @property
    def reply_tokens(self) -> int:
        return max(0, self.completion_tokens - self.reasoning_tokens)


@dataclass(frozen=True)
class Done:
    result: Result


@dataclass
class Progress:
    """What has come out of the engine so far for one request."""

    splitter: ThinkSplitter
    raw: str = ""
    tokens: int = 0
    thinking_seen: int = 0  # tokens received inside the think block (used if the engine's count never comes)
    thinking_tokens: int | None = None
    forced: bool = False
    finish: str = "length"
    t_first: float | None = None
    first_tokens: int = 0  # tokens in the first delta (``stream_interval`` batches them)
    t_last: float | None = None
    t_first_reply: float | None = None

    def take(self, delta: Delta, now: float) -> list[Piece]:
        """The pieces of text ``delta`` completes. The first engine output always gives one: an empty piece
        when the splitter holds its text back (a think tag), so a stream's first chunk leaves with it."""
        first = bool(delta.tokens) and self.t_first is None
        if delta.tokens:
            self.tokens += delta.tokens
            if self.splitter.phase == "reasoning":
                self.thinking_seen += delta.tokens
            self.t_last = now
            if first:
                self.t_first, self.first_tokens = now, delta.tokens
        self.forced = self.forced or delta.forced_end_of_thinking
        if delta.finish_reason is not None:
            self.finish = delta.finish_reason
            if delta.thinking_tokens is not None:
                self.thinking_tokens = delta.thinking_tokens
        self.raw += delta.text
        pieces = self._pieces(self.splitter.feed(delta.text), now)
        return pieces if pieces or not first else [Piece(self.splitter.phase, "")]

    def flush(self, now: float) -> list[Piece]:
        return self._pieces(self.splitter.flush(), now)

    def _pieces(self, parts: list[tuple[str, str]], now: float) -> list[Piece]:
        if self.t_first_reply is None and any(phase == "reply" for phase, _ in parts):
            self.t_first_reply = now
        return [Piece(phase, text) for phase, text in parts]


@dataclass(frozen=True)
class End:
    status: Any  # "done" | "deadline" | an exception raised by the engine


async def produce(
    engine: Engine,
    request: GenerationRequest,
    budget: TokenBudget,
    hard: float,
    out: asyncio.Queue,
    on_timer: Callable[[asyncio.Timeout], None] | None = None,
) -> None:
    """Engine deltas → ``out`` until the engine finishes or the hard deadline (monotonic) passes; then abort
    what is left in the engine. Runs as its own task (one timer per request, not one per delta); always
    ends by putting an ``End``. ``on_timer`` gets the timer, for a caller that moves the hard deadline (a
    streamed reply paced to speech)."""
    loop = asyncio.get_running_loop()
    agen = engine.generate(request, budget)
    status: Any = "deadline"
    try:
        async with asyncio.timeout_at(loop.time() + (hard - time.monotonic())) as timer:
            if on_timer is not None:
                on_timer(timer)
            async for delta in agen:
                out.put_nowait(delta)
                if delta.finish_reason is not None:
                    status = "done"
                    break
            else:
                status = "done"
    except TimeoutError:
        status = "deadline"
    except asyncio.CancelledError:
        status = "cancelled"
        raise
    except Exception as exc:  # handed to the consumer, which raises it
        status = exc
    finally:
        with contextlib.suppress(BaseException):
            await agen.aclose()
        if status != "done":
            with contextlib.suppress(BaseException):
                await engine.abort(request.request_id)
        out.put_nowait(End(status))
