"""Response bodies: the livestream reply, OpenAI ``chat.completion`` and its SSE ``chat.completion.chunk``s."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from livethink.serve.errors import APIError, sse_error
from livethink.serve.generation import Done, Piece, Result
from livethink.serve.protocol import LivestreamReplyRequest
from livethink.serve.service import Job, Service

log = logging.getLogger(__name__)


def timings(r: Result) -> dict[str, Any]:
    return {
        "queue_ms": r.queue_ms,
        "first_token_ms": r.first_token_ms,
        "first_reply_token_ms": r.first_reply_token_ms,
        "e2e_ms": r.e2e_ms,
        "planned_ms": r.planned_ms,
    }


def budget(r: Result) -> dict[str, int] | None:
    if r.budget is None:
        return None
    return {"thinking_cap": r.budget.thinking_cap, "reply_reserve": r.budget.reply_reserve}


def flags(job: Job, r: Result) -> dict[str, Any]:
    """The ``livethink`` object of chat answers: arm, deadline, budget-forcing and fallback flags, timings."""
    return {
        "experiment": job.choice.experiment,
        "arm": job.choice.arm,
        "deadline_ms": job.deadline_ms,
        "deadline_met": r.deadline_met,
        "forced_end_of_thinking": r.forced_end_of_thinking,
        "fallback": r.fallback,
        "fallback_reason": r.fallback_reason,
        "cut_at_deadline": r.cut_at_deadline,
        "timings": timings(r),
        "budget": budget(r),
    }


def usage(r: Result) -> dict[str, Any]:
    return {
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "total_tokens": r.prompt_tokens + r.completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": r.reasoning_tokens},
    }


def livestream_body(job: Job, body: LivestreamReplyRequest, r: Result) -> dict[str, Any]:
    return {
        "request_id": job.request_id,
        "viewer_id": body.viewer_id,
        "experiment": job.choice.experiment,
        "arm": job.choice.arm,
        "model": job.model,
        "reply": r.reply,
        "reasoning": r.reasoning if body.include_reasoning else None,
        "timings": timings(r),
        "tokens": {
            "prompt": r.prompt_tokens,
            "reasoning": r.reasoning_tokens,
            "reply": r.reply_tokens,
            "total": r.prompt_tokens + r.completion_tokens,
        },
        "deadline_ms": job.deadline_ms,
        "deadline_met": r.deadline_met,
        "forced_end_of_thinking": r.forced_end_of_thinking,
        "fallback": r.fallback,
        "fallback_reason": r.fallback_reason,
        "cut_at_deadline": r.cut_at_deadline,
        "finish_reason": r.finish_reason,
        "budget": budget(r),
    }


def chat_body(job: Job, r: Result, include_reasoning: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": r.reply}
    if include_reasoning:  # both names, as vLLM's reasoning parsers send them
        message["reasoning"] = message["reasoning_content"] = r.reasoning or None
    return {
        "id": job.request_id,
        "object": "chat.completion",
        "created": job.created,
        "model": job.model,
        "choices": [{"index": 0, "message": message, "finish_reason": r.finish_reason, "logprobs": None}],
        "usage": usage(r),
        "livethink": flags(job, r),
    }


async def sse_chunks(
    svc: Service, job: Job, include_reasoning: bool, include_usage: bool
) -> AsyncIterator[str]:
    """Server-sent ``chat.completion.chunk`` events: role, reasoning / content pieces, the finish chunk (with
    ``livethink`` flags), the usage chunk (``choices: []``) if asked, then ``data: [DONE]``."""

    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        payload = {
            "id": job.request_id,
            "object": "chat.completion.chunk",
            "created": job.created,
            "model": job.model,
            "choices": choices,
            **extra,
        }
        return f"data: {json.dumps(payload)}\n\n"

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return event([{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}], **extra)

    yield chunk({"role": "assistant", "content": ""})
    sent_reply = False
    try:
        async for item in svc.run(job):
            if isinstance(item, Piece):
                if item.phase == "reply":
                    sent_reply = True
                    yield chunk({"content": item.text})
                elif include_reasoning:
                    yield chunk({"reasoning": item.text, "reasoning_content": item.text})
            elif isinstance(item, Done):
                r = item.result
                if r.fallback and not sent_reply:
                    yield chunk({"content": r.reply})
                yield chunk({}, r.finish_reason, livethink=flags(job, r))
                if include_usage:
                    yield event([], usage=usage(r))
    except asyncio.CancelledError:
        raise
    except APIError as exc:
        yield sse_error(exc)
    except Exception:
        log.exception("stream %s failed", job.request_id)
        yield sse_error(APIError(500, "internal server error", "server_error"))
    yield "data: [DONE]\n\n"
