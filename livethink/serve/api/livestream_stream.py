"""A streamed livestream reply (``stream: true``) as server-sent events, for a speaking avatar.

``event: plan`` (at once: arm, model, thinking cap, when the first sentence is planned), then ``event: sentence``
for each complete sentence as soon as it is decoded (``running.Sentence``: never retracted; at a hard cut the
reply is exactly the sentences sent), then ``event: done`` with the whole reply, its flags and timings
(``first_sentence_ms``). Each ``data:`` line is one JSON object (``protocol.LivestreamEvent``) whose ``event``
field names it too. An error after the first event is ``event: error`` with the usual error body.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from livethink.serve.api.responses import body_of, livestream_response
from livethink.serve.errors import APIError
from livethink.serve.protocol import (
    LivestreamDoneEvent,
    LivestreamPlanEvent,
    LivestreamReplyRequest,
    LivestreamSentenceEvent,
    StreamTimings,
)
from livethink.serve.request_path.generation import Done, Result
from livethink.serve.request_path.running import Sentence
from livethink.serve.request_path.service import Job, Service

log = logging.getLogger(__name__)
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(event: str, payload: BaseModel | dict[str, Any]) -> str:
    """One server-sent event: its name and one ``data:`` line of JSON."""
    data = body_of(payload) if isinstance(payload, BaseModel) else payload
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def _ms(job: Job, t: float) -> float:
    return round((t - job.arrival) * 1000, 2)


def plan_event(job: Job) -> LivestreamPlanEvent:
    """What admission decided: who answers, the thinking cap, when the first sentence is planned."""
    plan = job.plan
    no_generation = job.refusal_reason is not None or job.quality_fallback
    return LivestreamPlanEvent(
        event="plan",
        request_id=job.public_id,
        experiment=job.choice.experiment,
        arm=job.choice.arm,
        model=job.model,
        deadline_ms=job.deadline_ms,
        speech_rate_wps=job.speech_rate_wps,
        thinking_cap=None if plan is None or no_generation else plan.thinking_cap,
        reply_reserve=None if plan is None or no_generation else plan.reply_reserve,
        planned_first_sentence_ms=None
        if plan is None or plan.expected_end is None or no_generation
        else _ms(job, plan.expected_end),
        fallback=no_generation,
        refused=job.refusal_reason is not None,
    )


def sentence_event(job: Job, s: Sentence) -> LivestreamSentenceEvent:
    return LivestreamSentenceEvent(
        event="sentence",
        index=s.index,
        text=s.text,
        words=s.words,
        at_ms=_ms(job, s.at),
        speech_end_ms=_ms(job, s.speech_end),
        stall=s.stall,
        fallback=s.fallback,
    )


def done_event(job: Job, body: LivestreamReplyRequest, r: Result) -> LivestreamDoneEvent:
    answer = livestream_response(job, body, r).model_dump(exclude_unset=True)
    answer["timings"] = StreamTimings(**answer["timings"], first_sentence_ms=r.first_sentence_ms)
    return LivestreamDoneEvent(
        event="done", speech_rate_wps=job.speech_rate_wps, sentences=r.sentences, stalls=r.stalls, **answer
    )


async def livestream_events(svc: Service, job: Job, body: LivestreamReplyRequest) -> AsyncIterator[str]:
    """The events of an admitted streamed job (see the module docstring)."""
    yield sse("plan", plan_event(job))
    try:
        async for item in svc.run(job):
            if isinstance(item, Sentence):
                yield sse("sentence", sentence_event(job, item))
            elif isinstance(item, Done):
                yield sse("done", done_event(job, body, svc.stamp(job, item.result)))
    except asyncio.CancelledError:
        raise
    except APIError as exc:
        yield sse("error", exc.body())
    except Exception:
        log.exception("livestream stream %s failed", job.request_id)
        yield sse("error", APIError(500, "internal server error", "server_error").body())
