"""Group commit: many callers submit single events, one thread commits them in batches.

``submit`` validates synchronously (bad input raises at once, naming the field) and returns a
``concurrent.futures.Future`` that resolves to an ``Ack`` only after the batch holding the event committed.
In async code use ``ack = await writer.asubmit(event)`` (same semantics, one loop wake-up per batch).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from livethink.ab_test.errors import EventConflictError
from livethink.ab_test.store import Ack, AnyEvent, EventStore

log = logging.getLogger(__name__)
_STOP = object()


class BatchWriter:
    """Background batching writer over an ``EventStore``. Use as a context manager or call ``close()``.

    Group commit: while one batch commits, new events queue up and form the next batch (up to ``max_batch``);
    ``max_delay_s`` > 0 additionally waits that long for stragglers (0 is best when callers await their acks).
    """

    def __init__(
        self,
        store: EventStore,
        *,
        max_batch: int = 2000,
        max_delay_s: float = 0.0,
        max_queue: int = 100_000,
        retries: int = 5,
    ):
        self.store = store
        self.max_batch = max_batch
        self.max_delay_s = max_delay_s
        self.retries = retries
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._closed = False
        self.batches = 0
        self._thread = threading.Thread(target=self._run, name="ab-batch-writer", daemon=True)
        self._thread.start()

    def submit(self, event: AnyEvent | dict) -> Future[Ack]:
        """Validate now, commit soon; the future resolves after the commit (or with the error)."""
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        (parsed,) = self.store.validate([event])
        fut: Future[Ack] = Future()
        self._queue.put((parsed, fut))
        return fut

    async def asubmit(self, event: AnyEvent | dict) -> Ack:
        """Async ``submit``: awaits the ack; a batch wakes each event loop once (cheaper than wrap_future)."""
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        (parsed,) = self.store.validate([event])
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Ack] = loop.create_future()
        self._queue.put((parsed, (loop, fut)))
        return await fut

    def submit_many(self, events: Iterable[AnyEvent | dict]) -> list[Future[Ack]]:
        """Validate all first (nothing is queued if one is bad), then queue them."""
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        parsed = self.store.validate(events)
        futures: list[Future[Ack]] = []
        for ev in parsed:
            fut: Future[Ack] = Future()
            self._queue.put((ev, fut))
            futures.append(fut)
        return futures

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything submitted so far is committed."""
        marker: Future[None] = Future()
        self._queue.put((None, marker))
        marker.result(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writer thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        stop = False
        while not stop:
            item = self._queue.get()
            if item is _STOP:
                break
            batch = [item]
            deadline = time.monotonic() + self.max_delay_s
            while len(batch) < self.max_batch:
                try:  # drain what is queued without waiting; wait only while the queue is empty
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    try:
                        nxt = self._queue.get(timeout=remaining)
                    except queue.Empty:
                        break
                if nxt is _STOP:
                    stop = True
                    break
                batch.append(nxt)
            self._commit(batch)

    def _commit(self, batch: list[tuple[AnyEvent | None, Future]]) -> None:
        events = [ev for ev, _ in batch if ev is not None]
        error: BaseException | None = None
        acks: list[Ack] = []
        for attempt in range(self.retries + 1):
            try:
                acks = self.store.append(events, on_conflict="report") if events else []
                error = None
                break
            except Exception as exc:  # DB busy/unavailable: retry with backoff, then fail the batch
                error = exc
                log.warning("A/B batch commit failed (attempt %d): %s", attempt + 1, exc)
                time.sleep(min(0.05 * 2**attempt, 1.0))
        self.batches += 1
        it = iter(acks)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, Any, BaseException | None]]] = {}
        for ev, target in batch:
            result: Any = None
            exc: BaseException | None = None
            if ev is not None:
                if error is not None:
                    exc = error
                else:
                    result = next(it)
                    if result.status == "conflict":
                        exc, result = EventConflictError([result.event_id]), None
            if isinstance(target, tuple):  # (event loop, asyncio future) from asubmit
                by_loop.setdefault(target[0], []).append((target[1], result, exc))
            elif exc is not None:
                target.set_exception(exc)
            else:
                target.set_result(result)
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # loop closed: nobody is waiting any more
                loop.call_soon_threadsafe(_resolve, items)


def _resolve(items: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    for fut, result, exc in items:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
