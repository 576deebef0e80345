"""Responses, built as their models (``livethink.serve.protocol``): the livestream reply, OpenAI ``chat.completion`` and its SSE
``chat.completion.chunk``s."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel

from livethink.serve.errors import APIError, sse_error
from livethink.serve.protocol import (
    FALLBACK_FINGERPRINT,
    SYSTEM_FINGERPRINT,
    AssistantMessage,
    BudgetOut,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChunkChoice,
    ChunkDelta,
    CompletionTokensDetails,
    LivestreamReplyRequest,
    LivestreamReplyResponse,
    LivethinkFlags,
    Timings,
    TokenCounts,
    Usage,
)
from livethink.serve.request_path.generation import Done, Piece, Result
from livethink.serve.request_path.service import Job, Service

log = logging.getLogger(__name__)


def _flags(job: Job, r: Result) -> dict[str, Any]:
    """The fields of ``LivethinkFlags``: arm, deadline, budget-forcing and fallback flags, timings, budget."""
    budget = None if r.budget is None else BudgetOut.model_validate(r.budget, from_attributes=True)
    timings = Timings.model_validate(r, from_attributes=True)
    return {
        "experiment": job.choice.experiment,
        "arm": job.choice.arm,
        "deadline_ms": job.deadline_ms,
        "deadline_met": r.deadline_met,
        "forced_end_of_thinking": r.forced_end_of_thinking,
        "fallback": r.fallback,
        "fallback_reason": r.fallback_reason,
        "cut_at_deadline": r.cut_at_deadline,
        "timings": timings,
        "budget": budget,
    }


def _usage(r: Result) -> Usage:
    return Usage(
        prompt_tokens=r.prompt_tokens,
        completion_tokens=r.completion_tokens,
        total_tokens=r.prompt_tokens + r.completion_tokens,
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=r.reasoning_tokens),
    )


def livestream_response(job: Job, body: LivestreamReplyRequest, r: Result) -> LivestreamReplyResponse:
    tokens = TokenCounts(
        prompt=r.prompt_tokens,
        reasoning=r.reasoning_tokens,
        reply=r.reply_tokens,
        total=r.prompt_tokens + r.completion_tokens,
    )
    return LivestreamReplyResponse(
        request_id=job.public_id,
        viewer_id=body.viewer_id,
        model=job.model,
        reply=r.reply,
        reasoning=r.reasoning if body.include_reasoning else None,
        tokens=tokens,
        finish_reason=r.finish_reason,
        refused=r.refused,
        refusal_reason=r.refusal_reason,
        **_flags(job, r),
    )


def chat_response(job: Job, r: Result, include_reasoning: bool) -> ChatCompletion:
    message = AssistantMessage(role="assistant", content=r.reply)
    if include_reasoning:  # both names, as vLLM's reasoning parsers send them
        message.reasoning = message.reasoning_content = r.reasoning or None
    return ChatCompletion(
        id=job.request_id,
        object="chat.completion",
        created=job.created,
        model=job.model,
        choices=[ChatChoice(index=0, message=message, finish_reason=r.finish_reason, logprobs=None)],
        system_fingerprint=FALLBACK_FINGERPRINT if r.fallback else SYSTEM_FINGERPRINT,
        usage=_usage(r),
        livethink=LivethinkFlags(**_flags(job, r)),
    )


def body_of(response: BaseModel) -> dict[str, Any]:
    """The JSON body of a response model: the fields that were set (an unasked ``reasoning`` stays absent)."""
    return response.model_dump(mode="json", exclude_unset=True)


async def sse_chunks(
    svc: Service, job: Job, include_reasoning: bool, include_usage: bool
) -> AsyncIterator[str]:
    """Server-sent ``chat.completion.chunk`` events: role (with the first engine output, so a client's time to
    first token is the engine's), reasoning / content pieces, the finish chunk (with ``livethink`` flags and, for
    a fallback, ``FALLBACK_FINGERPRINT``), the usage chunk (``choices: []``) if asked, then ``data: [DONE]``."""

    def event(choices: list[ChunkChoice], fingerprint: str = SYSTEM_FINGERPRINT, **extra: Any) -> str:
        payload = ChatCompletionChunk(
            id=job.request_id,
            object="chat.completion.chunk",
            created=job.created,
            model=job.model,
            choices=choices,
            system_fingerprint=fingerprint,
            **extra,
        )
        return f"data: {json.dumps(body_of(payload))}\n\n"

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return event([ChunkChoice(index=0, delta=ChunkDelta(**delta), finish_reason=finish, logprobs=None)], **extra)

    role_sent = False

    def role() -> str:
        nonlocal role_sent
        role_sent = True
        return chunk({"role": "assistant", "content": ""})

    sent_reply = False
    try:
        async for item in svc.run(job):
            if isinstance(item, Piece):
                if not item.text:  # the first engine output, held back (a think tag): the role chunk goes now
                    if not role_sent:
                        yield role()
                elif item.phase == "reply":
                    sent_reply = True
                    yield (role() if not role_sent else "") + chunk({"content": item.text})
                elif include_reasoning:
                    yield (role() if not role_sent else "") + chunk(
                        {"reasoning": item.text, "reasoning_content": item.text}
                    )
            elif isinstance(item, Done):
                r = item.result
                if not role_sent:
                    yield role()
                if r.fallback and not sent_reply:
                    yield chunk({"content": r.reply})
                fingerprint = FALLBACK_FINGERPRINT if r.fallback else SYSTEM_FINGERPRINT
                yield chunk({}, r.finish_reason, fingerprint=fingerprint, livethink=LivethinkFlags(**_flags(job, r)))
                if include_usage:
                    yield event([], usage=_usage(r))
    except asyncio.CancelledError:
        raise
    except APIError as exc:
        yield sse_error(exc)
    except Exception:
        log.exception("stream %s failed", job.request_id)
        yield sse_error(APIError(500, "internal server error", "server_error"))
    yield "data: [DONE]\n\n"
