"""Group commit: many callers submit single events, one thread commits them in batches.

``submit`` validates synchronously (bad input raises at once, naming the field) and returns a
``concurrent.futures.Future`` that resolves to an ``Ack`` only after the batch holding the event committed.
In async code use ``ack = await writer.asubmit(event)`` (same semantics, one loop wake-up per batch).

With a ``Spool`` (``livethink.ab_test.spool``) every event is written ahead to local disk inside ``submit``, so
an accepted event survives a ``kill -9`` of the process; and when the store fails, batches are fsynced to the
spool and acknowledged ``spooled`` (the writer is then *degraded*), to be replayed once the store answers again
(probed every ``probe_interval_s``). A full spool refuses new events with ``SpoolFullError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

from livethink.ab_test.errors import ABError, EventConflictError
from livethink.ab_test.spool import Spool
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
        retries: int | None = None,
        spool: Spool | None = None,
        probe_interval_s: float = 1.0,
        rotate_interval_s: float = 1.0,
    ):
        self.store = store
        self.max_batch = max_batch
        self.max_delay_s = max_delay_s
        # with a spool, fail over to it quickly (requests keep flowing); without, retry harder before failing
        self.retries = retries if retries is not None else (1 if spool is not None else 5)
        self.spool = spool
        self.probe_interval_s = probe_interval_s
        self.rotate_interval_s = rotate_interval_s
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._submit_lock = threading.Lock()
        self._closed = False
        self.batches = 0
        self.spooled = 0  # events acknowledged from the spool while the store was down
        self.replayed = 0  # spooled events later stored by a replay (duplicates not counted)
        self.replay_conflicts = 0  # replayed ids that clashed with stored content (kept in conflicts.jsonl)
        self.degraded = False  # the store failed; batches go to the spool until a replay succeeds
        self._dirty = spool is not None and bool(spool.backlog())  # segments that must be replayed
        self._committed_seq = -1
        self._next_probe = 0.0
        self._last_rotate = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="ab-batch-writer", daemon=True)
        self._thread.start()

    def submit(self, event: AnyEvent | dict) -> Future[Ack]:
        """Validate now, commit soon; the future resolves after the commit (or with the error)."""
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        (parsed,) = self.store.validate([event])
        fut: Future[Ack] = Future()
        self._enqueue([parsed], [fut])
        return fut

    async def asubmit(self, event: AnyEvent | dict) -> Ack:
        """Async ``submit``: awaits the ack; a batch wakes each event loop once (cheaper than wrap_future)."""
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        (parsed,) = self.store.validate([event])
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Ack] = loop.create_future()
        self._enqueue([parsed], [(loop, fut)])
        return await fut

    def submit_many(self, events: Iterable[AnyEvent | dict]) -> list[Future[Ack]]:
        """Validate all first (nothing is queued if one is bad), then queue them."""
        if self._closed:
            raise RuntimeError("BatchWriter is closed")
        parsed = self.store.validate(events)
        futures: list[Future[Ack]] = [Future() for _ in parsed]
        self._enqueue(parsed, futures)
        return futures

    def _enqueue(self, events: list[AnyEvent], targets: list[Any]) -> None:
        """Queue events for the writer thread; with a spool, write them ahead first (``SpoolFullError``)."""
        if self.spool is None:
            for ev, target in zip(events, targets, strict=True):
                self._queue.put((ev, target, None))
            return
        lines = [ev.model_dump_json() + "\n" for ev in events]
        with self._submit_lock:  # spool order = queue order, so "committed up to seq" is a watermark
            last = self.spool.append(lines)
            for k, (ev, target) in enumerate(zip(events, targets, strict=True)):
                self._queue.put((ev, target, last - len(events) + 1 + k))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything submitted so far is committed."""
        marker: Future[None] = Future()
        self._queue.put((None, marker, None))
        marker.result(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self.spool is not None:
            if not self._dirty:
                self.spool.rotate()
                self.spool.release(self._committed_seq)
            self.spool.close()  # what awaits replay stays on disk; the next process adopts it

    def state(self) -> dict[str, Any]:
        """Health of the write path: degraded (store failing), spool use, replay counts."""
        out: dict[str, Any] = {
            "degraded": self.degraded,
            "queued": self._queue.qsize(),
            "spooled_events": self.spooled,
            "replayed_events": self.replayed,
            "replay_conflicts": self.replay_conflicts,
        }
        if self.spool is not None:
            out["spool"] = self.spool.state()
        return out

    def __enter__(self) -> BatchWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writer thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        stop = False
        while not stop:
            try:
                item = self._queue.get(timeout=self.probe_interval_s if self.spool is not None else None)
            except queue.Empty:
                self._maintain()
                continue
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
            self._maintain()
            self._commit(batch)
        self._maintain()

    # -- spool upkeep ------------------------------------------------------------------------------------
    def _maintain(self) -> None:
        """Replay when there is a backlog (at most every ``probe_interval_s``); else rotate and free segments."""
        if self.spool is None:
            return
        if self._dirty:
            if time.monotonic() >= self._next_probe:
                self._replay()
            return
        now = time.monotonic()
        if self.spool.should_rotate() or now - self._last_rotate >= self.rotate_interval_s:
            self.spool.rotate()
            self._last_rotate = now
        self.spool.release(self._committed_seq)

    def _replay(self) -> None:
        """Store every closed segment (idempotently), oldest first, deleting each once stored."""
        assert self.spool is not None
        self.spool.rotate()
        try:
            for seg in self.spool.backlog():
                events = Spool.read(seg)
                for k in range(0, len(events), self.max_batch):
                    self._replay_chunk(events[k : k + self.max_batch])
                self.spool.remove(seg)
        except Exception as exc:
            self._next_probe = time.monotonic() + self.probe_interval_s
            log.warning("A/B spool replay failed, retrying in %.1f s: %s", self.probe_interval_s, exc)
            return
        if self.degraded:
            log.warning("A/B event store reachable again: spool replayed, %d events so far", self.replayed)
        self._dirty = self.degraded = False

    def _replay_chunk(self, events: list[dict]) -> None:
        try:
            acks = self.store.append(events, on_conflict="report")
        except ABError:  # one bad event (e.g. its experiment is not in this store): store the rest one by one
            acks = []
            for ev in events:
                try:
                    acks += self.store.append([ev], on_conflict="report")
                except ABError as exc:
                    self._dead_letter(ev, str(exc))
        self.replayed += sum(a.status == "stored" for a in acks)
        by_id = {e["event_id"]: e for e in events}
        for a in acks:
            if a.status == "conflict":
                self._dead_letter(by_id[a.event_id], "event_id already stored with different content")

    def _dead_letter(self, event: dict, reason: str) -> None:
        """Keep an event the store refused on replay (never dropped silently): ``<spool root>/conflicts.jsonl``."""
        assert self.spool is not None
        self.replay_conflicts += 1
        log.error(
            "A/B spool replay: event %s refused (%s); kept in conflicts.jsonl", event.get("event_id"), reason
        )
        with (self.spool.root / "conflicts.jsonl").open("a") as f:
            f.write(json.dumps({"reason": reason, "event": event}) + "\n")

    # -- commits -----------------------------------------------------------------------------------------
    def _commit(self, batch: list[tuple[AnyEvent | None, Any, int | None]]) -> None:
        events = [ev for ev, _, _ in batch if ev is not None]
        error: BaseException | None = None
        acks: list[Ack] = []
        if events and self.spool is not None and self.degraded:
            acks = self._spool_acks(events)
        else:
            for attempt in range(self.retries + 1):
                try:
                    acks = self.store.append(events, on_conflict="report") if events else []
                    error = None
                    break
                except Exception as exc:  # DB busy/unavailable: retry with backoff, then spool or fail
                    error = exc
                    log.warning("A/B batch commit failed (attempt %d): %s", attempt + 1, exc)
                    if attempt < self.retries:
                        time.sleep(min(0.05 * 2**attempt, 1.0))
            if error is not None and self.spool is not None:
                log.warning("A/B event store unavailable: spooling events to %s", self.spool.dir)
                self.degraded = self._dirty = True
                self._next_probe = time.monotonic() + self.probe_interval_s
                acks, error = self._spool_acks(events), None
            elif error is None and not self._dirty:
                seqs = [q for _, _, q in batch if q is not None]
                if seqs:
                    self._committed_seq = max(self._committed_seq, max(seqs))
        self.batches += 1
        it = iter(acks)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future, Any, BaseException | None]]] = {}
        for ev, target, _ in batch:
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

    def _spool_acks(self, events: list[AnyEvent]) -> list[Ack]:
        """The events are already in the spool: make them durable (fsync) and acknowledge them ``spooled``."""
        assert self.spool is not None
        self.spool.sync()
        self.spooled += len(events)
        return [Ack(ev.event_id, "spooled") for ev in events]


def _resolve(items: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    for fut, result, exc in items:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
