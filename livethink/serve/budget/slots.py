"""Engine slots: FIFO admission to an engine with at most ``capacity`` requests running at once, the reservations
of admitted requests, the ramp-up of a cold engine, and the expected wait for a slot (``queue_wait``)."""

from __future__ import annotations

import asyncio
import collections
import time


def queue_wait(waiting: int, running: int, capacity: int, service_s: float) -> float:
    """Expected wait for a slot of a new request: 0 if a slot is free, else ``(waiting + 1) · S / capacity``
    (one of ``capacity`` slots frees every ``S / capacity`` seconds on average)."""
    if running < capacity and waiting == 0:
        return 0.0
    return (waiting + 1) * service_s / capacity


class SlotQueue:
    """FIFO admission to an engine: at most ``capacity`` requests run at once.

    Admitted requests *reserve* a place until they ask for a slot (or their deadline passes), so a burst of
    arrivals sees the queue it is about to form, not the one of a moment ago.
    """

    def __init__(self, capacity: int, start: int | None = None):
        if capacity < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {capacity}")
        self.max_capacity = capacity
        self.capacity = capacity if start is None else max(1, min(capacity, start))  # slots open now
        self._running = 0
        self._area = 0.0  # ∫ running dt up to ``_since`` (request-seconds)
        self._since = time.monotonic()
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._reserved: dict[str, float] = {}  # request id -> monotonic time the reservation lapses

    @property
    def running(self) -> int:
        """Requests holding a slot now."""
        return self._running

    @running.setter
    def running(self, n: int) -> None:
        now = time.monotonic()
        self._area += self._running * (now - self._since)
        self._since, self._running = now, n

    def busy_area(self, now: float | None = None) -> float:
        """∫ running dt since the queue was made (request-seconds): the mean load over an interval is the
        difference of two readings divided by its length."""
        now = time.monotonic() if now is None else now
        return self._area + self._running * max(0.0, now - self._since)

    @property
    def waiting(self) -> int:
        now = time.monotonic()
        for key in [k for k, until in self._reserved.items() if until <= now]:
            del self._reserved[key]
        return sum(1 for f in self._waiters if not f.done()) + len(self._reserved)

    def reserve(self, key: str, until: float) -> None:
        self._reserved[key] = until

    def unreserve(self, key: str) -> None:
        self._reserved.pop(key, None)

    async def acquire(self, timeout: float | None, key: str | None = None) -> bool:
        """Wait for a slot up to ``timeout`` seconds; False when it did not come in time."""
        if key is not None:
            self.unreserve(key)
        if self.running < self.capacity and not any(not f.done() for f in self._waiters):
            self.running += 1
            return True
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)  # a slot handed over at the last moment still counts
            return True
        except TimeoutError:
            return False  # `fut` is cancelled: release() skips it
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot while being cancelled: pass it on
            raise

    def open_slots(self, capacity: int) -> None:
        """Open slots up to ``capacity`` (never more than ``max_capacity``, never fewer than now): the
        ramp-up of a cold engine. Waiting requests get the new slots at once."""
        capacity = min(self.max_capacity, capacity)
        while self.capacity < capacity:
            self.capacity += 1
            self.running += 1
            self.release()  # hands the new slot to a waiter, or gives it back as free

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes to the next waiter; `running` is unchanged
                return
        self.running -= 1
