"""Request ids and the access line: every response carries ``X-Request-Id`` (the client's own when it sent a
well-formed one, else a new one), and every request writes one access line once its response has left, so a
viewer's complaint, the server's log and the A/B event can be tied together.

The access line (``livethink.serve.telemetry.access_log``): request id, method, path, HTTP status, duration on
the client's clock, and for a livestream or chat request its job: the job id (the A/B event's request id),
endpoint, experiment and arm, model, deadline and whether it was met, the labels (forced end of thinking, cut at
the deadline, fallback and why), finish reason, first-token times and token counts. A malformed id is replaced,
never echoed (it would let a client write into the logs).
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from livethink.serve.api.clock import FIRST_BYTE_KEY
from livethink.serve.request_path.jobs import Job
from livethink.serve.telemetry.access_log import log_access

REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID_KEY = "livethink.request_id"
JOB_KEY = "livethink.job"  # a holder in the scope: the endpoint puts its Job under "job" (scopes are copied)
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


def request_id_from(header: str | None) -> str:
    """The client's id when it is 1–128 characters of ``[A-Za-z0-9._:-]``, else a new one."""
    if header is not None and _WELL_FORMED.fullmatch(header):
        return header
    return uuid.uuid4().hex


def job_fields(job: Job) -> dict[str, Any]:
    """What the access line says of a livestream or chat request's job (and its reply, when there was one)."""
    out: dict[str, Any] = {
        "job_id": job.request_id,
        "endpoint": job.endpoint,
        "experiment": job.choice.experiment,
        "arm": job.choice.arm,
        "model": job.model,
        "viewer_id": job.viewer_id,
        "deadline_ms": job.deadline_ms,
    }
    r = job.result
    if r is not None:
        out.update(
            status=r.status,
            deadline_met=r.deadline_met,
            forced_end_of_thinking=r.forced_end_of_thinking,
            cut_at_deadline=r.cut_at_deadline,
            fallback=r.fallback,
            fallback_reason=r.fallback_reason,
            finish_reason=r.finish_reason,
            first_token_ms=r.first_token_ms,
            first_reply_token_ms=r.first_reply_token_ms,
            e2e_ms=r.e2e_ms,
            tokens={"prompt": r.prompt_tokens, "reasoning": r.reasoning_tokens, "reply": r.reply_tokens},
        )
    return out


class AccessLog:
    """ASGI middleware: the request id in the scope and on the response, then one access line per request."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-request-id"), None)
        rid = scope[REQUEST_ID_KEY] = request_id_from(header)
        holder: dict[str, Job] = {}
        scope[JOB_KEY] = holder
        status = 0

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", rid.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            start = scope.get(FIRST_BYTE_KEY)
            fields: dict[str, Any] = {
                "request_id": rid,
                "method": scope.get("method"),
                "path": scope.get("path"),
                "http_status": status,
                "duration_ms": None if start is None else round((time.monotonic() - start) * 1000, 2),
            }
            job = holder.get("job")
            if job is not None:
                fields.update(job_fields(job))
            log_access(fields)
