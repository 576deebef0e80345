"""Running an admitted job: wait for an engine slot, generate within the deadline, stream ``Piece`` events and
end with ``Done(result)``. At the hard cut the engine request is aborted and the usable part of the reply is
kept, or replaced by the configured fallback (``result.fallback``); a cancelled run (client gone) aborts it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping

from livethink.data.reasoning_format import ReasoningFormat
from livethink.rewards.parse import parse_completion
from livethink.serve.budget.controller import QueueState
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.config import ServeConfig
from livethink.serve.engines.base import Engine, GenerationRequest
from livethink.serve.engines.probes import IdleProber
from livethink.serve.request_path.accounting import Accounting
from livethink.serve.request_path.admission import Admission
from livethink.serve.request_path.generation import Done, End, Piece, Progress, Result, produce
from livethink.serve.request_path.jobs import Job
from livethink.serve.request_path.reasoning import ThinkSplitter, usable_reply
from livethink.serve.telemetry.metrics import ServeMetrics


def fallback_result(job: Job, reply: str, queue_s: float) -> Result:
    """The configured fallback reply, without generating: the thinking floor does not fit the deadline."""
    e2e = time.monotonic() - job.arrival
    return Result(
        reasoning="",
        reply=reply,
        finish_reason="stop",
        fallback=True,
        forced_end_of_thinking=False,
        deadline_met=e2e <= job.deadline_ms / 1000,
        prompt_tokens=len(job.prompt_ids),
        reasoning_tokens=0,
        completion_tokens=0,
        queue_ms=round(queue_s * 1000, 2),
        first_token_ms=None,
        first_reply_token_ms=None,
        e2e_ms=round(e2e * 1000, 2),
        budget=None,
        status="fallback",
        fallback_reason="below_min_thinking",
    )


def generated_result(
    job: Job,
    fmt: ReasoningFormat,
    p: Progress,
    cut: bool,
    budget: TokenBudget | None,
    queue_s: float,
    fallback_reply: str,
) -> Result:
    """What the engine produced for ``job`` (``cut``: stopped at the hard cut), its usable reply or the fallback."""
    text = (fmt.prefill + p.raw) if job.thinking else p.raw
    parsed = parse_completion(text, fmt)
    complete = not cut and p.finish != "abort"
    body = parsed.reply if parsed.closed else ""
    if fmt.thinks and fmt.start in body:  # a reply that opens another think block ends there
        body = body[: body.index(fmt.start)]
    reply = usable_reply(body, complete)
    # no usable reply: the livestream always speaks something; chat only substitutes after a cut
    fallback = not reply and (cut or job.endpoint == "livestream")
    if fallback:
        reply = fallback_reply
    thinking_tokens = p.thinking_tokens if p.thinking_tokens is not None else (p.thinking_seen if job.thinking else 0)
    e2e = time.monotonic() - job.arrival

    def ms(t: float | None) -> float | None:
        return None if t is None else round((t - job.arrival) * 1000, 2)

    return Result(
        reasoning=parsed.reasoning if job.thinking else p.splitter.reasoning,
        reply=reply,
        finish_reason="length" if cut else p.finish,
        fallback=fallback,
        forced_end_of_thinking=p.forced,
        deadline_met=e2e <= job.deadline_ms / 1000,
        prompt_tokens=len(job.prompt_ids),
        reasoning_tokens=thinking_tokens,
        completion_tokens=p.tokens,
        queue_ms=round(queue_s * 1000, 2),
        first_token_ms=ms(p.t_first),
        first_reply_token_ms=ms(p.t_first_reply),
        e2e_ms=round(e2e * 1000, 2),
        budget=budget,
        cut_at_deadline=cut,
        status="fallback" if fallback else "ok",
        fallback_reason=("deadline" if cut else "no_reply") if fallback else None,
        planned_ms=ms(budget.expected_end) if budget is not None else None,
    )


class Runner:
    def __init__(
        self,
        config: ServeConfig,
        engines: Mapping[str, Engine],
        admission: Admission,
        accounting: Accounting,
        metrics: ServeMetrics,
        reasoning_format: Callable[[str], ReasoningFormat],
    ):
        self.config = config
        self.engines = engines
        self.controller = admission.controller
        self.admission = admission
        self.accounting = accounting
        self.metrics = metrics
        self.reasoning_format = reasoning_format
        self.last_active = {key: time.monotonic() for key in engines}  # engine key -> its last request's end
        self.prober: IdleProber | None = None  # cancelled whenever a request comes (a probe never delays one)

    def _done(self, job: Job, result: Result) -> Done:
        self.accounting.done(job, result)
        return Done(result)

    async def run(self, job: Job) -> AsyncIterator[Piece | Done]:
        """Wait for an engine slot, generate within the deadline, stream pieces, end with ``Done``."""
        fallback_reply = self.config.budget.fallback_reply
        if job.quality_fallback:
            yield self._done(job, fallback_result(job, fallback_reply, 0.0))
            return
        m = self.metrics
        queue = self.controller.queues[job.engine_key]
        hard = self.admission.hard_cut(job)  # early enough for the answer to leave by the deadline
        fmt = self.reasoning_format(job.model)
        progress = Progress(ThinkSplitter(phase="reasoning" if job.thinking else "reply", fmt=fmt))
        t_enqueue = time.monotonic()
        if self.prober is not None:
            self.prober.cancel(job.engine_key)  # a probe never delays a viewer
        self.last_active[job.engine_key] = t_enqueue
        m.queued.labels(job.model).inc()
        queue.unreserve(job.request_id)  # our own reservation is not a queue ahead of us
        est = self.controller.estimates(job.engine_key)
        min_needed = est.ttft + self.config.budget.min_reply_tokens * est.tpot + self.controller.policy.margin_s
        try:
            got = await queue.acquire(max(0.0, hard - t_enqueue - min_needed), key=job.request_id)
        finally:
            m.queued.labels(job.model).dec()
        t_start = time.monotonic()
        queue_s = t_start - t_enqueue
        m.queue.labels(*job.labels).observe(queue_s)
        budget: TokenBudget | None = None
        cut = True  # unless generation ends by itself
        if got:
            m.in_flight.labels(job.model).inc()
            load_start = self.controller.running_load(job.engine_key)
            try:
                plan = self.admission.plan(job, t_start, QueueState(queue.running - 1, 0, queue.capacity))
                action = self.admission.below_floor_action(job, plan)
                if action in ("shed", "fallback"):  # below the floor now: the fallback (a 429 comes too late)
                    m.below_floor.labels(*job.labels, "fallback").inc()
                    job.quality_fallback = True
                elif isinstance(plan, TokenBudget):  # else the wait ate the budget: nothing fits any more
                    if action == "answer":  # a forced reply below the floor
                        m.below_floor.labels(*job.labels, "answer").inc()
                    budget = plan
                    request = GenerationRequest(job.request_id, job.model, job.prompt_ids, job.sampling, job.thinking)
                    deltas: asyncio.Queue = asyncio.Queue()
                    engine = self.engines[job.engine_key]
                    producer = asyncio.create_task(produce(engine, request, budget, hard, deltas))
                    try:
                        while True:
                            item = await deltas.get()
                            if isinstance(item, End):
                                break
                            for piece in progress.take(item, time.monotonic()):
                                yield piece
                    except (asyncio.CancelledError, GeneratorExit):
                        m.aborts.labels(job.model, "disconnect").inc()
                        m.requests.labels(*job.labels, "cancelled").inc()
                        raise
                    finally:
                        if not producer.done():
                            producer.cancel()
                        with contextlib.suppress(BaseException):
                            await producer
                        load_end = self.controller.running_load(job.engine_key)
                        self.accounting.observe_stream(job, t_start, progress, load_start, load_end)
                    if isinstance(item.status, BaseException):
                        self.accounting.failed(job)
                        raise item.status
                    cut = item.status == "deadline"
                    if cut:
                        job.t_cut = hard
                        m.aborts.labels(job.model, "deadline").inc()
            finally:
                queue.release()
                self.last_active[job.engine_key] = time.monotonic()
                m.in_flight.labels(job.model).dec()
        if job.quality_fallback:
            yield self._done(job, fallback_result(job, fallback_reply, queue_s))
            return
        for piece in progress.flush(time.monotonic()):
            yield piece
        yield self._done(job, generated_result(job, fmt, progress, cut, budget, queue_s, fallback_reply))

    async def complete(self, job: Job) -> Result:
        """``run`` to its end, without the pieces."""
        async for event in self.run(job):
            if isinstance(event, Done):
                return event.result
        raise RuntimeError("generation ended without a result")
