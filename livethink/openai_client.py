"""The one client of OpenAI-compatible ``/chat/completions`` endpoints (the LLM judge, the ``openai`` teacher).

Both use the official ``openai`` client (``openai.OpenAI`` for the sync judge, ``openai.AsyncOpenAI`` for the
teacher), built here with one retry policy. The client's own rules
(https://github.com/openai/openai-python#retries, read from the installed release, openai 3.57):

- a request is tried at most ``1 + max_retries`` times; connection errors, timeouts and HTTP 408, 409, 429 and
  5xx are retried, other 4xx are not;
- before a retry it waits what the server asks (``retry-after-ms``, or ``Retry-After`` in seconds or as an HTTP
  date) when that is more than 0 and at most 120 s; a server that asks for more gets no retry; otherwise it
  waits 0.5 s × 2^retry, at most 8 s, less up to 25 % jitter;
- ``timeout_s`` bounds each read and write of an attempt, ``connect_timeout_s`` the connect; waiting for one of
  the ``max_connections`` connections is not timed.

Kept on top, thinly, because the client lacks it:

- a 200 whose body is unusable (not JSON, no ``choices``, or refused by the caller's ``parse``: a judge answer
  with no verdict) is asked again at once, within the same ``1 + max_retries`` attempts;
- every failure becomes one ``EndpointError``: a reason (``timeout``, ``connection``, ``rate_limited``,
  ``server_error``, ``context_length`` for a 400/413/422 about the context or length, ``http_<code>``,
  ``malformed_response``), the endpoint URL, the status, the server's message and the attempts made (from the
  client's ``x-stainless-retry-count`` request header);
- the key comes from the configured variable only (never ``OPENAI_API_KEY`` behind the caller's back); with no
  key the placeholder ``EMPTY`` is sent, which keyless servers (vLLM without ``--api-key``) ignore.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import openai

T = TypeVar("T")
C = TypeVar("C", openai.OpenAI, openai.AsyncOpenAI)
NO_KEY = "EMPTY"
CONTEXT_ERROR = re.compile(r"context|too long|maximum.{0,40}length|max_model_len|prompt.{0,40}tokens", re.I)
# typed arguments of ``chat.completions.create``; the other keys of a request body travel as ``extra_body``
_TYPED = ("temperature", "top_p", "max_tokens", "n", "seed", "response_format", "stop")


class EndpointError(Exception):
    """A chat-completions request that failed for good: ``reason``, ``detail`` (endpoint, status, server message),
    ``attempts``, ``status`` (None without a response) and the server's ``message``; ``str()`` reads
    ``"<reason>: <detail> (after N attempts)"``."""

    def __init__(self, reason: str, detail: str, *, attempts: int, status: int | None = None, message: str = ""):
        self.reason, self.detail, self.attempts = reason, detail, attempts
        self.status, self.message = status, message
        super().__init__(f"{reason}: {detail} (after {attempts} attempt{'s' if attempts != 1 else ''})")


@dataclass
class Reply(Generic[T]):
    """What ``parse`` made of a usable response, and the HTTP attempts it took."""

    value: T
    attempts: int


def resolve_api_key(api_key: str | None = None, api_key_env: str | None = None) -> str | None:
    """``api_key`` if given, else the value of the environment variable ``api_key_env`` (None when unset)."""
    return api_key or (os.environ.get(api_key_env) if api_key_env else None) or None


def _options(base_url: str, api_key: str | None, timeout_s: float, connect_timeout_s: float | None,
             max_retries: int, headers: dict[str, str] | None) -> dict[str, Any]:
    if max_retries < 0:
        raise ValueError(f"max_retries: must be >= 0, got {max_retries!r}")
    timeout = openai.Timeout(timeout_s, connect=connect_timeout_s or timeout_s, pool=None)
    return {"base_url": base_url, "api_key": api_key or NO_KEY, "timeout": timeout, "max_retries": max_retries,
            "default_headers": headers or None}


def sync_client(base_url: str, *, api_key: str | None, timeout_s: float, max_retries: int,
                connect_timeout_s: float | None = None, headers: dict[str, str] | None = None) -> openai.OpenAI:
    """An ``openai.OpenAI`` under the policy (thread-safe: one client may serve a thread pool)."""
    return openai.OpenAI(**_options(base_url, api_key, timeout_s, connect_timeout_s, max_retries, headers))


def async_client(base_url: str, *, api_key: str | None, timeout_s: float, max_retries: int,
                 connect_timeout_s: float | None = None, headers: dict[str, str] | None = None,
                 max_connections: int | None = None,
                 before_each_attempt: Callable[[Any], Awaitable[None]] | None = None) -> openai.AsyncOpenAI:
    """An ``openai.AsyncOpenAI`` under the policy. ``max_connections`` caps the HTTP requests in flight (a request
    waiting to retry holds none); ``before_each_attempt(request)`` is awaited before every attempt, retries
    included (e.g. a requests-per-second limiter). Create, use and close it on one event loop."""
    options = _options(base_url, api_key, timeout_s, connect_timeout_s, max_retries, headers)
    http: dict[str, Any] = {}
    if max_connections:
        limits = type(openai.DEFAULT_CONNECTION_LIMITS)  # httpx.Limits or httpx2.Limits, as the client uses
        http["limits"] = limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    if before_each_attempt is not None:
        http["event_hooks"] = {"request": [before_each_attempt]}
    if http:
        options["http_client"] = openai.DefaultAsyncHttpxClient(**http)
    return openai.AsyncOpenAI(**options)


# ------------------------------------------------------------------------------------------ one request


def _create_args(body: dict[str, Any]) -> dict[str, Any]:
    args = {"model": body["model"], "messages": body["messages"]}
    args.update({key: body[key] for key in _TYPED if key in body})
    extra = {key: value for key, value in body.items() if key not in args}
    return {**args, "extra_body": extra} if extra else args


def _body(text: str) -> dict[str, Any]:
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"invalid JSON ({exc}): {text[:80]!r}") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list) or not payload["choices"]:
        raise ValueError(f"no choices in {str(payload)[:120]!r}")
    return payload


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body  # the client unwraps {"error": ...}
    if isinstance(body, dict):
        return str(body.get("message") or body)[:300]
    if body is not None:
        return str(body)[:300]
    return exc.response.text[:300]


def _failure(exc: openai.APIError, before: int) -> EndpointError:
    """The client's exception as an ``EndpointError``; ``before``: attempts made by earlier calls."""
    request = getattr(exc, "request", None)
    headers = getattr(request, "headers", None) or {}
    try:
        attempts = before + int(headers.get("x-stainless-retry-count", 0)) + 1
    except ValueError:
        attempts = before + 1
    url = str(request.url) if request is not None else "the endpoint"
    if isinstance(exc, openai.APITimeoutError):
        limit = headers.get("x-stainless-read-timeout")
        return EndpointError("timeout", f"no response from {url}" + (f" within {limit} s" if limit else ""),
                             attempts=attempts)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__
        why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        return EndpointError("connection", f"cannot reach {url}{why}", attempts=attempts)
    if isinstance(exc, openai.APIStatusError):
        status, message = exc.status_code, _server_message(exc)
        if status in (400, 413, 422) and CONTEXT_ERROR.search(message):
            reason = "context_length"
        elif status == 429:
            reason = "rate_limited"
        elif status >= 500:
            reason = "server_error"
        else:
            reason = f"http_{status}"
        return EndpointError(reason, f"HTTP {status} from {url}: {message}", attempts=attempts, status=status,
                             message=message)
    return EndpointError("malformed_response", f"{type(exc).__name__}: {exc} ({url})", attempts=attempts)


def _unusable(error: ValueError, attempts: int) -> EndpointError:
    return EndpointError("malformed_response", str(error), attempts=attempts)


class _Attempts:
    """The attempts of one call against its budget of ``1 + max_retries``: the client's own retries count, and so
    does each ask-again of an unusable 200."""

    def __init__(self, budget: int):
        self.budget, self.made = budget, 0

    def client(self, client: C) -> C:
        """``client`` with the retries left to this call (the client as it is for the first request)."""
        return client if self.made == 0 else client.with_options(max_retries=self.budget - self.made - 1)

    def answer(self, raw: Any, parse: Callable[[dict[str, Any]], T]) -> Reply[T] | None:
        """The parsed reply of a 200; None to ask again; ``EndpointError`` when it is unusable and none are left."""
        self.made += raw.retries_taken + 1
        try:
            return Reply(parse(_body(raw.text)), self.made)
        except ValueError as exc:
            if self.made >= self.budget:
                raise _unusable(exc, self.made) from exc
            return None


def chat(client: openai.OpenAI, body: dict[str, Any], parse: Callable[[dict[str, Any]], T]) -> Reply[T]:
    """POST ``body`` (an OpenAI chat-completions request; keys the client does not type go as ``extra_body``) and
    return ``parse(response JSON)``; ``parse`` raises ``ValueError`` for an unusable answer. Raises
    ``EndpointError``. Policy: see the module docstring."""
    tries = _Attempts(client.max_retries + 1)
    while True:
        try:
            raw = tries.client(client).chat.completions.with_raw_response.create(**_create_args(body))
        except openai.APIError as exc:
            raise _failure(exc, tries.made) from exc
        if (reply := tries.answer(raw, parse)) is not None:
            return reply


async def achat(client: openai.AsyncOpenAI, body: dict[str, Any],
                parse: Callable[[dict[str, Any]], T]) -> Reply[T]:
    """``chat`` for ``openai.AsyncOpenAI``."""
    tries = _Attempts(client.max_retries + 1)
    while True:
        try:
            raw = await tries.client(client).chat.completions.with_raw_response.create(**_create_args(body))
        except openai.APIError as exc:
            raise _failure(exc, tries.made) from exc
        if (reply := tries.answer(raw, parse)) is not None:
            return reply
