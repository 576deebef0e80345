"""Running an admitted job: wait for an engine slot, generate within the deadline, stream ``Piece`` events and
end with ``Done(result)``. At the hard cut the engine request is aborted and the usable part of the reply is
kept, or replaced by the configured fallback (``result.fallback``); a cancelled run (client gone) aborts it too.

A streamed livestream job (``job.stream``) also gets a ``Sentence`` event for each complete sentence of its reply
as soon as it is decoded (``reasoning.SentenceStream``: never retracted; the result's reply is the sentences
joined), paced to speech (``budget.speech``): the hard cut bounds its first sentence, and each sentence sent moves
the cut later by its speaking time (``Pacer``). A job admission refused with ``on_refusal: filler`` gets the
filler line, marked ``refused``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass

from livethink.data.reasoning_format import ReasoningFormat
from livethink.rewards.parse import parse_completion
from livethink.serve.budget.controller import QueueState
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.budget.speech import SpeechClock, paced_bound, word_count
from livethink.serve.config import ServeConfig
from livethink.serve.engines.base import Engine, GenerationRequest
from livethink.serve.engines.probes import IdleProber
from livethink.serve.request_path.accounting import Accounting
from livethink.serve.request_path.admission import Admission
from livethink.serve.request_path.generation import Done, End, Piece, Progress, Result, produce
from livethink.serve.request_path.jobs import Job
from livethink.serve.request_path.reasoning import SentenceStream, ThinkSplitter, usable_reply
from livethink.serve.telemetry.metrics import ServeMetrics


@dataclass(frozen=True)
class Sentence:
    """A complete sentence of a streamed reply (times monotonic): the exact slice of the reply."""

    index: int
    text: str
    words: int
    at: float  # when it was handed on
    speech_end: float  # when the avatar will have spoken it (``SpeechClock``)
    stall: bool  # it came after the avatar had finished speaking the sentences before it
    fallback: bool = False  # the fallback or filler line


class Pacer:
    """One streamed reply's sentences and its speech clock; moves the generation's hard cut (``timer``) to
    ``speech.paced_bound`` as sentences are sent."""

    def __init__(self, rate_wps: float, stop: str, first_cut: float, limit: float):
        self.stream = SentenceStream(stop=stop)
        self.clock = SpeechClock(rate_wps)
        self.first_cut, self.limit = first_cut, limit
        self.timer: asyncio.Timeout | None = None
        self.first_at: float | None = None

    @property
    def bound(self) -> float:
        """The hard cut now (monotonic): the first-sentence cut, later by the speaking time of what was sent."""
        return paced_bound(self.first_cut, self.clock.words, self.clock.rate_wps, self.limit)

    def feed(self, text: str, now: float) -> list[Sentence]:
        return self._sentences(self.stream.feed(text), now)

    def finish(self, complete: bool, now: float) -> list[Sentence]:
        return self._sentences(self.stream.finish(complete), now)

    def fallback(self, text: str, now: float) -> list[Sentence]:
        return self._sentences([text], now, fallback=True)

    def _sentences(self, texts: list[str], now: float, fallback: bool = False) -> list[Sentence]:
        out = []
        for text in texts:
            words = word_count(text)
            stall = self.clock.add(now, words)
            out.append(Sentence(self.clock.sentences - 1, text, words, now, self.clock.end or now, stall, fallback))
            self.first_at = now if self.first_at is None else self.first_at
        if out and self.timer is not None:
            with contextlib.suppress(RuntimeError):  # the timer already fired or exited
                loop = asyncio.get_running_loop()
                self.timer.reschedule(loop.time() + (self.bound - time.monotonic()))
        return out


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
    spoken: str | None = None,
) -> Result:
    """What the engine produced for ``job`` (``cut``: stopped at the hard cut), its usable reply or the fallback.
    ``spoken``: a streamed reply's sentences sent (``SentenceStream``), which are its reply."""
    text = (fmt.prefill + p.raw) if job.thinking else p.raw
    parsed = parse_completion(text, fmt)
    complete = not cut and p.finish != "abort"
    body = parsed.reply if parsed.closed else ""
    if fmt.thinks and fmt.start in body:  # a reply that opens another think block ends there
        body = body[: body.index(fmt.start)]
    reply = usable_reply(body, complete) if spoken is None else spoken
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

    def _pacer(self, job: Job, fmt: ReasoningFormat) -> Pacer | None:
        """A streamed job's pacer: cut at the first-sentence deadline, later sentences paced to speech up to
        ``endpoints.livestream.max_stream_ms`` (default: the chat deadline) from arrival."""
        if not job.stream:
            return None
        ep = self.config.endpoints.livestream
        limit = job.arrival + (ep.max_stream_ms or self.config.deadline_ms("chat")) / 1000
        return Pacer(job.speech_rate_wps, fmt.start if fmt.thinks else "", self.admission.hard_cut(job), limit)

    def _sent(self, job: Job, pacer: Pacer, sentences: list[Sentence]) -> list[Sentence]:
        """Count what the avatar is sent: its first sentence's time and size (the controller learns the size), and
        the stalls."""
        m = self.metrics
        for s in sentences:
            if s.stall:
                m.speech_stalls.labels(*job.labels).inc()
            if s.index == 0:
                m.first_sentence.labels(*job.labels).observe(s.at - job.arrival)
                if not s.fallback:
                    self._learn_first_sentence(job, s.text)
        return sentences

    def _learn_first_sentence(self, job: Job, text: str, at_least: bool = False) -> None:
        """Teach the controller a first sentence's tokens, with the one after it that shows it ended (``at_least``:
        a cut came first; it was longer than that)."""
        tok = self.engines[job.engine_key].tokenizer_for(job.model)
        tokens = len(tok.encode(text.strip(), add_special_tokens=False)) + 1
        if at_least:
            tokens = max(tokens, job.first_sentence_tokens or 0)
        self.controller.observe_first_sentence(job.reply_key, tokens)

    def _without_generation(self, job: Job, reply: str, queue_s: float, pacer: Pacer | None) -> Iterator[Sentence | Done]:
        """The fallback line (the floor did not fit) or, for a refused job, the filler line."""
        result = fallback_result(job, reply, queue_s)
        if job.refusal_reason is not None:
            result.refused, result.refusal_reason = True, job.refusal_reason
            result.fallback_reason, result.status = "refused", "rejected"
        if pacer is not None:
            yield from self._sent(job, pacer, pacer.fallback(reply, time.monotonic()))
            self._stamp_speech(result, job, pacer)
        yield self._done(job, result)

    @staticmethod
    def _stamp_speech(result: Result, job: Job, pacer: Pacer) -> None:
        if pacer.first_at is not None:
            result.first_sentence_ms = round((pacer.first_at - job.arrival) * 1000, 2)
        result.stalls, result.sentences = pacer.clock.stalls, pacer.clock.sentences

    async def run(self, job: Job) -> AsyncIterator[Piece | Sentence | Done]:
        """Wait for an engine slot, generate within the deadline, stream pieces (and, streamed, sentences), end
        with ``Done``."""
        b = self.config.budget
        fallback_reply = b.fallback_reply
        fmt = self.reasoning_format(job.model)
        pacer = self._pacer(job, fmt)
        if job.refusal_reason is not None:
            filler = self.config.endpoints.livestream.filler_reply or fallback_reply
            for event in self._without_generation(job, filler, 0.0, pacer):
                yield event
            return
        if job.quality_fallback:
            for event in self._without_generation(job, fallback_reply, 0.0, pacer):
                yield event
            return
        m = self.metrics
        queue = self.controller.queues[job.engine_key]
        hard = self.admission.hard_cut(job)  # early enough for the answer (streamed: its first sentence) to leave
        progress = Progress(ThinkSplitter(phase="reasoning" if job.thinking else "reply", fmt=fmt))
        t_enqueue = time.monotonic()
        if self.prober is not None:
            self.prober.cancel(job.engine_key)  # a probe never delays a viewer
        self.last_active[job.engine_key] = t_enqueue
        m.queued.labels(job.model).inc()
        queue.unreserve(job.request_id)  # our own reservation is not a queue ahead of us
        est = self.controller.estimates(job.engine_key)
        min_reply = min(b.min_reply_tokens, job.first_sentence_tokens or b.min_reply_tokens)  # streamed: a sentence
        min_needed = est.ttft + min_reply * est.tpot + self.controller.policy.margin_s
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
            area_start = self.controller.busy_area(job.engine_key, t_start)
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
                    on_timer = None if pacer is None else (lambda timer: setattr(pacer, "timer", timer))
                    producer = asyncio.create_task(produce(engine, request, budget, hard, deltas, on_timer))
                    try:
                        while True:
                            item = await deltas.get()
                            if isinstance(item, End):
                                break
                            for piece in progress.take(item, time.monotonic()):
                                yield piece
                                if pacer is not None and piece.phase == "reply":
                                    for sentence in self._sent(job, pacer, pacer.feed(piece.text, time.monotonic())):
                                        yield sentence
                    except (asyncio.CancelledError, GeneratorExit):
                        m.aborts.labels(job.model, "disconnect").inc()
                        m.requests.labels(*job.labels, "cancelled").inc()
                        raise
                    finally:
                        if not producer.done():
                            producer.cancel()
                        with contextlib.suppress(BaseException):
                            await producer
                        load = self.controller.mean_load(job.engine_key, area_start, t_start)
                        self.accounting.observe_stream(job, t_start, progress, load)
                    if isinstance(item.status, BaseException):
                        self.accounting.failed(job)
                        raise item.status
                    cut = item.status == "deadline"
                    if cut:
                        job.t_cut = hard if pacer is None else pacer.bound
                        m.aborts.labels(job.model, "deadline").inc()
            finally:
                queue.release()
                self.last_active[job.engine_key] = time.monotonic()
                m.in_flight.labels(job.model).dec()
        if job.quality_fallback:
            for event in self._without_generation(job, fallback_reply, queue_s, pacer):
                yield event
            return
        for piece in progress.flush(time.monotonic()):
            yield piece
            if pacer is not None and piece.phase == "reply":
                for sentence in self._sent(job, pacer, pacer.feed(piece.text, time.monotonic())):
                    yield sentence
        spoken = None
        if pacer is not None:
            complete = not cut and progress.finish != "abort"
            for sentence in self._sent(job, pacer, pacer.finish(complete, time.monotonic())):
                yield sentence
            spoken = pacer.stream.spoken
            if not spoken and pacer.stream.text.strip() and budget is not None:
                self._learn_first_sentence(job, pacer.stream.text, at_least=True)
        result = generated_result(job, fmt, progress, cut, budget, queue_s, fallback_reply, spoken)
        if pacer is not None:
            if result.fallback:
                for sentence in self._sent(job, pacer, pacer.fallback(result.reply, time.monotonic())):
                    yield sentence
            self._stamp_speech(result, job, pacer)
        yield self._done(job, result)

    async def complete(self, job: Job) -> Result:
        """``run`` to its end, without the pieces."""
        async for event in self.run(job):
            if isinstance(event, Done):
                return event.result
        raise RuntimeError("generation ended without a result")
