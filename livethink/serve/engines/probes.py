"""Cheap engine probes: a short generation that measures the idle decode time per token.

``probe_once`` is the warm-up's unit; ``IdleProber`` repeats it on an engine that has been idle for
``interval_s``, so the idle estimate stays measured (``controller``: estimates decay towards it). A real request
on the engine cancels a running probe (aborting it in the engine), so a probe never delays a viewer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from livethink.serve.budget.estimates import stream_timing
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.engines.base import Engine, GenerationRequest, SamplingOptions

log = logging.getLogger(__name__)
PROBE_MESSAGES = [
    {"role": "system", "content": "You are the shopping assistant of a livestream."},
    {"role": "user", "content": "Is the hoodie in stock in size M?"},
]


@dataclass(frozen=True)
class ProbeTiming:
    ttft_s: float | None
    tpot_s: float | None  # (last token − first token) / (tokens − 1)
    tokens: int


async def probe_once(engine: Engine, model: str, prompt_ids: list[int], tokens: int, request_id: str) -> ProbeTiming:
    """Generate ``tokens`` tokens (half thinking, half reply, EOS ignored) and time them."""
    request = GenerationRequest(request_id, model, prompt_ids, SamplingOptions(ignore_eos=True, seed=0))
    t0 = time.monotonic()
    t_first = t_last = None
    n = first = 0
    async for delta in engine.generate(request, TokenBudget(tokens // 2, tokens - tokens // 2)):
        if delta.tokens:
            n += delta.tokens
            t_last = time.monotonic()
            if t_first is None:
                t_first, first = t_last, delta.tokens
    ttft, tpot = stream_timing(t0, t_first, first, t_last, n)
    return ProbeTiming(ttft, tpot, n)


class IdleProber:
    """Probes each idle engine every ``interval_s`` seconds of idleness and reports the timing."""

    def __init__(
        self,
        engines: dict[str, tuple[Engine, str, list[int]]],  # key -> (engine, model, prompt ids)
        idle: Callable[[str], float],  # key -> seconds the engine has been idle (0 while busy)
        report: Callable[[str, ProbeTiming], None],
        interval_s: float,
        tokens: int = 64,  # ~0.2 s on a tiny CPU student: enough intervals for a steady per-token time
    ):
        self.engines = engines
        self.idle = idle
        self.report = report
        self.interval_s = interval_s
        self.tokens = tokens
        self.probes = 0
        self._running: dict[str, asyncio.Task] = {}
        self._last: dict[str, float] = {}

    def cancel(self, key: str) -> None:
        """A real request is about to run on ``key``: stop its probe (the engine request is aborted)."""
        task = self._running.get(key)
        if task is not None and not task.done():
            task.cancel()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.interval_s))
            for key, (engine, model, ids) in self.engines.items():
                now = time.monotonic()
                if self.idle(key) < self.interval_s or now - self._last.get(key, 0.0) < self.interval_s:
                    continue
                self._last[key] = now
                task = asyncio.create_task(probe_once(engine, model, ids, self.tokens, f"probe-{key}-{self.probes}"))
                self._running[key] = task
                self.probes += 1
                await asyncio.wait({task})
                self._running.pop(key, None)
                if task.cancelled():
                    continue
                with contextlib.suppress(Exception):
                    timing = task.result()
                    if self.idle(key) > 0:  # nothing started meanwhile: an idle measurement
                        self.report(key, timing)
                if task.exception() is not None:
                    log.info("idle probe of engine %s failed: %s", key, task.exception())  # the supervisor reports why
