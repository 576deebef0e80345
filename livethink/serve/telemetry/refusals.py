"""Recent refusals: the share of requests refused (429) over the last minute, and whether the server is refusing
everything while its engines are idle, which ``/health`` reports as ``degraded`` and a gauge exports."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class RefusalShare:
    requests: int  # answered or refused in the window
    refused: int
    top_reason: str | None  # the most common refusal reason in the window

    @property
    def share(self) -> float:
        return self.refused / self.requests if self.requests else 0.0


def refusing_while_idle(s: RefusalShare, engines_idle: bool, threshold: float, min_requests: int) -> bool:
    """Degraded: at least ``min_requests`` in the window, a refused share ≥ ``threshold``, nothing running."""
    return engines_idle and s.requests >= min_requests and s.share >= threshold


class RecentRefusals:
    """Answered and refused requests of the last ``window_s`` seconds (bounded memory)."""

    def __init__(self, window_s: float = 60.0, max_events: int = 100_000):
        self.window_s = window_s
        self._events: collections.deque[tuple[float, str | None]] = collections.deque(maxlen=max_events)

    def record(self, refused_reason: str | None, now: float | None = None) -> None:
        """One finished request: ``refused_reason`` None when it was answered."""
        self._events.append((time.monotonic() if now is None else now, refused_reason))

    def share(self, now: float | None = None) -> RefusalShare:
        now = time.monotonic() if now is None else now
        while self._events and self._events[0][0] < now - self.window_s:
            self._events.popleft()
        reasons = collections.Counter(r for _, r in self._events if r is not None)
        refused = sum(reasons.values())
        top = reasons.most_common(1)[0][0] if reasons else None
        return RefusalShare(len(self._events), refused, top)
