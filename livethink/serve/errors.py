"""API errors: ``{"error": {"message", "type", "param", "code"}}`` (OpenAI's shape), never a stack trace.

Plain data, free of the web framework: the service raises ``APIError``; the app (``routing.py``) answers it.
"""

from __future__ import annotations

import json
from typing import Any


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


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def not_found(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(404, message, "not_found_error", param, code)


def _retry_after(retry_after_s: float) -> dict[str, str]:
    """``Retry-After`` (whole seconds, rounded up, at least 1) and ``retry-after-ms`` (the wait in milliseconds,
    the header openai-python's retries read first)."""
    return {"Retry-After": str(max(1, int(-(-retry_after_s // 1)))), "retry-after-ms": str(int(retry_after_s * 1000))}


def overloaded(
    message: str, retry_after_s: float, param: str | None = None, extra: dict[str, Any] | None = None
) -> APIError:
    """429 + ``Retry-After``: the deadline cannot be met at the current load."""
    ms = int(retry_after_s * 1000)
    headers = _retry_after(retry_after_s)
    extra = {"retry_after_ms": ms, **(extra or {})}
    return APIError(429, message, "rate_limit_error", param, "deadline_unreachable", headers, extra)


def _loc_to_param(loc: tuple[Any, ...]) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    # drop pydantic's union-branch tags (e.g. 'str', 'list[TextPart]', 'constrained-str', 'function-after[...]')
    parts = [p for p in parts if not (p.endswith("]") or "-" in p or p in ("str", "int", "float", "bool", "list"))]
    return ".".join(parts) or None


_OBJECT_TYPES = ("model_type", "model_attributes_type", "dict_type")


def validation_error(errors: list[dict[str, Any]], document: str | None = None) -> APIError:
    """A 400 from pydantic validation errors of a request (``loc`` from the body down); ``param`` is the first
    offending field. A body that is empty, not JSON (``document``: the text that failed to parse) or not an
    object is named as such."""
    if not errors:
        return bad_request("invalid request")
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        reason = (first.get("ctx") or {}).get("error", "could not parse")
        if document is not None and len(loc) > 1 and isinstance(loc[-1], int):
            reason = str(json.JSONDecodeError(reason, document, loc[-1]))  # with its line and column
        return bad_request(f"malformed JSON body: {reason}", None, "invalid_json")
    if loc == ("body",) and first.get("type") == "missing":
        return bad_request("the request body is empty (expected a JSON object)", None, "empty_body")
    if loc == ("body",) and first.get("type") in _OBJECT_TYPES:
        got = type(first.get("input")).__name__
        return bad_request(f"the body must be a JSON object, got {got}", None, "invalid_type")
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
    extra = {"retry_after_ms": int(retry_after_s * 1000), **(extra or {})}
    return APIError(503, message, "unavailable_error", None, "engine_unavailable", _retry_after(retry_after_s), extra)
