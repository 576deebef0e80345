"""The client's clock on the server: each request's span runs from its first byte to its last response byte.

* ``StampedHttpToolsProtocol`` (uvicorn's httptools protocol, one override each) stamps a request at the
  moment its first bytes are read from the socket (for the first request of a connection: when the connection
  was accepted), before the HTTP parser, routing or the app run.
* ``RequestClock`` (ASGI middleware) turns that stamp into the request's ``arrival``: the stamp minus the
  event loop's measured lag, because a ready socket waits for a busy loop about as long as a timer does. It
  also sees the last byte of the response leave (``http.response.body`` without ``more_body``) and then runs
  the callbacks the endpoint registered (``Clock.on_sent``): metrics, deadline accounting and A/B records use
  that span, the one a client measures, up to the network.

Without httptools (uvicorn's h11 protocol) the middleware stamps the request itself, a little later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

FIRST_BYTE_KEY = "livethink.first_byte"
CLOCK_KEY = "livethink.clock"

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - uvicorn without httptools: the middleware stamps instead
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


if HttpToolsProtocol is not None:

    class StampedHttpToolsProtocol(HttpToolsProtocol):  # type: ignore[misc,valid-type]
        """uvicorn's httptools protocol that puts the request's first-byte time (monotonic) in its scope."""

        _t_accept: float | None = None
        _t_data: float = 0.0

        def connection_made(self, transport: Any) -> None:
            self._t_accept = time.monotonic()
            super().connection_made(transport)

        def data_received(self, data: bytes) -> None:
            self._t_data = time.monotonic()
            super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            t = self._t_data if self._t_accept is None else min(self._t_accept, self._t_data)
            self._t_accept = None  # later requests on a kept-alive connection start at their own bytes
            self.scope[FIRST_BYTE_KEY] = t  # type: ignore[literal-required]

else:  # pragma: no cover
    StampedHttpToolsProtocol = None  # type: ignore[assignment,misc]


def uvicorn_http() -> Any:
    """The ``http=`` argument for uvicorn: the stamping protocol, or ``"auto"`` without httptools."""
    return StampedHttpToolsProtocol or "auto"


@dataclass
class Clock:
    """One request's clock: ``arrival`` (monotonic), ``sent`` once the last byte left, callbacks for then."""

    arrival: float
    sent: float | None = None
    _callbacks: list[Callable[[float], None]] = field(default_factory=list)

    def on_sent(self, callback: Callable[[float], None]) -> None:
        """Run ``callback(t_sent)`` after the last byte of the response has been handed to the socket."""
        self._callbacks.append(callback)

    def elapsed_ms(self, now: float | None = None) -> float:
        return ((time.monotonic() if now is None else now) - self.arrival) * 1000

    def fire(self, t: float) -> None:
        self.sent = t
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb(t)
            except Exception:  # accounting must never break the connection
                log.exception("after-send callback failed")


class RequestClock:
    """ASGI middleware: a ``Clock`` per HTTP request in ``scope[CLOCK_KEY]``; fires it at the last byte.

    ``lag`` returns the event loop's current lag in seconds (subtracted from the first-byte stamp).
    """

    def __init__(self, app: Any, lag: Callable[[], float] | None = None):
        self.app = app
        self.lag = lag or (lambda: 0.0)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stamp = scope.get(FIRST_BYTE_KEY)
        now = time.monotonic()
        clock = Clock(arrival_time(stamp, now, self.lag()))
        scope[CLOCK_KEY] = clock

        async def timed_send(message: dict) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                clock.fire(time.monotonic())

        try:
            await self.app(scope, receive, timed_send)
        finally:
            if clock.sent is None:
                clock.fire(time.monotonic())  # no complete response (client gone, error): account now


def arrival_time(first_byte: float | None, now: float, lag_s: float) -> float:
    """When the request reached the server: the first-byte stamp (else ``now``) moved back by the loop lag
    (the time a readable socket waits for a busy event loop), never later than ``now``."""
    t = now if first_byte is None else min(first_byte, now)
    return t - max(0.0, lag_s)
