"""Drain: after SIGTERM the server stops taking work and finishes what it has, then exits 0.

``Drain`` is the state (``app.state.drain``): ``begin()`` (the CLI's server calls it on SIGTERM) turns ``/health``
503 ``draining`` at once, so a load balancer or Kubernetes' readiness probe takes the replica out; ``DrainGate``
(an ASGI middleware) answers every new request but the health and metrics routes with 503 + ``Retry-After`` +
``Connection: close`` (HAProxy's ``retry-on 503`` sends it to another replica), and counts the requests in flight
(streams until their last byte); a response that starts while draining closes its connection. The server exits
once none is left, or after ``server.drain_s`` at most.
"""

from __future__ import annotations

import json
import time
from typing import Any

from livethink.serve.errors import APIError

# answered while draining: the orchestrator's probes and the last scrape
EXEMPT_PATHS = ("/health", "/health/live", "/metrics")
DRAIN_RETRY_AFTER_S = 1


class Drain:
    """Whether the server is draining, since when and why, and how many requests are in flight."""

    def __init__(self) -> None:
        self.since: float | None = None  # time.monotonic() of begin()
        self.reason: str | None = None
        self.in_flight = 0

    @property
    def draining(self) -> bool:
        return self.since is not None

    def begin(self, reason: str, now: float | None = None) -> bool:
        """Start draining (idempotent: False when it had already begun). Safe in a signal handler: it only sets
        attributes."""
        if self.since is not None:
            return False
        self.since = time.monotonic() if now is None else now
        self.reason = reason
        return True

    def done(self, max_s: float, now: float | None = None) -> bool:
        """Draining, and no request is in flight or ``max_s`` seconds have passed since it began."""
        if self.since is None:
            return False
        now = time.monotonic() if now is None else now
        return self.in_flight == 0 or now - self.since >= max_s

    def error(self) -> APIError:
        """The 503 a new request (and ``/health``) gets while draining."""
        message = f"draining: this replica is shutting down ({self.reason}); send the request to another one"
        return APIError(
            503, message, "unavailable_error", None, "draining",
            {"Retry-After": str(DRAIN_RETRY_AFTER_S), "Connection": "close"},
            {"status": "draining", "reason": self.reason, "retry_after_ms": DRAIN_RETRY_AFTER_S * 1000},
        )  # fmt: skip


class DrainGate:
    """ASGI middleware: count the HTTP requests in flight; while draining, refuse new ones (but ``EXEMPT_PATHS``)
    with the drain's 503 before they reach the app."""

    def __init__(self, app: Any, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        if self.drain.draining:
            err = self.drain.error()
            body = json.dumps(err.body()).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
            await send({"type": "http.response.start", "status": err.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        drain = self.drain

        async def send_closing(message: dict[str, Any]) -> None:
            # a response that starts while draining closes its connection: the client's next request opens a new
            # one (to another replica) instead of racing the server's close of an idle keep-alive connection
            if message["type"] == "http.response.start" and drain.draining:
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        drain.in_flight += 1
        try:
            await self.app(scope, receive, send_closing)
        finally:
            drain.in_flight -= 1
