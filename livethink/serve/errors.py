"""API errors: ``{"error": {"message", "type", "param", "code"}}`` (OpenAI's shape), never a stack trace."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse


class APIError(Exception):
    """An error the client should see, with its HTTP status and the offending field (``param``)."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.extra = extra or {}  # top-level fields next to "error" (e.g. the A/B arm of a 429)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code},
            **self.extra,
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def not_found(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(404, message, "not_found_error", param, code)


def overloaded(
    message: str, retry_after_s: float, param: str | None = None, extra: dict[str, Any] | None = None
) -> APIError:
    seconds = max(1, int(-(-retry_after_s // 1)))  # Retry-After is whole seconds, rounded up
    return APIError(
        429,
        message,
        "rate_limit_error",
        param,
        "deadline_unreachable",
        {"Retry-After": str(seconds), "X-Retry-After-Ms": str(int(retry_after_s * 1000))},
        {"retry_after_ms": int(retry_after_s * 1000), **(extra or {})},
    )


def _loc_to_param(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    # drop pydantic's union-branch tags (e.g. 'str', 'list[TextPart]', 'function-after[...]')
    parts = [p for p in parts if not (p.endswith("]") or p in ("str", "int", "float", "bool", "list"))]
    return ".".join(parts) or None


def validation_error(errors: list[dict[str, Any]]) -> APIError:
    """A 400 from FastAPI/pydantic validation errors; ``param`` is the first offending field."""
    if not errors:
        return bad_request("invalid request")
    first = errors[0]
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx") or {}
        return bad_request(
            f"malformed JSON body: {ctx.get('error', 'could not parse')}", None, "invalid_json"
        )
    messages = []
    for err in errors[:5]:
        param = _loc_to_param(tuple(err.get("loc", ())))
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        if err.get("type") == "missing":
            msg = "field required"
        elif err.get("type") == "extra_forbidden":
            msg = "unknown field"
        messages.append(f"{param}: {msg}" if param else msg)
    if len(errors) > 5:
        messages.append(f"... ({len(errors) - 5} more)")
    return bad_request("; ".join(messages), _loc_to_param(tuple(first.get("loc", ()))), first.get("type"))


def sse_error(err: APIError) -> str:
    return f"data: {json.dumps(err.body())}\n\n"


def engine_unavailable(message: str, retry_after_s: float, extra: dict[str, Any] | None = None) -> APIError:
    """503 + ``Retry-After``: the engine that serves the request is down, restarting or stalled."""
    seconds = max(1, int(-(-retry_after_s // 1)))
    return APIError(
        503,
        message,
        "unavailable_error",
        None,
        "engine_unavailable",
        {"Retry-After": str(seconds)},
        {"retry_after_ms": int(retry_after_s * 1000), **(extra or {})},
    )
