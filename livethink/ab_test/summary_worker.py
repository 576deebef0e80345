"""Live summaries computed outside the serving process: ``GET /v1/ab/experiments/{name}`` only awaits a future.

An experiment's analysis reads all of its events, so its cost grows with the event count; run in the serving
process (even in a thread) its Python work holds the interpreter lock and the event loop lags behind it. A
``SummaryWorker`` runs it in one child process instead (a ``ProcessPoolExecutor`` of one worker, ``spawn``
context): the child opens the store by its URL (a SQLite file or a PostgreSQL URL) on its first task, keeps it
open, and computes each summary there; the serving process submits a name and unpickles the small result, so its
cost per refresh does not grow with the events. The child runs ``nice`` steps below the server's CPU priority
(analysis is background work beside the serving loop), ignores Ctrl-C (its parent shuts it down) and exits when
its parent dies, even by ``kill -9``. It starts on the first summary requested, which therefore waits ~2 s longer
(the child imports the analysis stack).

Results are cached per experiment: a summary younger than ``max_age_s`` (counted from the start of its
computation) is served as it is; otherwise one computation starts and every caller that arrives while it runs
shares it (at most one in flight per experiment). Each caller gets a future of its own, so a caller that gives
up (a client that went away) cancels nothing for the others. A failure reaches every caller waiting for that
computation and is not cached: the package's own errors as they are (``UnknownExperimentError``), anything else,
a worker that died included, as ``SummaryError`` naming the experiment; a dead worker is replaced on the next
request.

Fallback: a store that no other process can open (SQLite in memory) has its summaries computed in a thread of
this process, the path used before this module (logged once at INFO). Every other store is analysed in the
child; there is no silent fallback for them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from sqlalchemy.engine import make_url

from livethink.ab_test.errors import ABError
from livethink.ab_test.store import EventStore

__all__ = ["COMPACT", "Compute", "SummaryError", "SummaryWorker", "opens_by_url"]

log = logging.getLogger(__name__)

Summary = dict[str, Any]
Compute = Callable[[EventStore, str], Summary]  # (store, experiment name) -> summary; a module-level function
COMPACT = "compact"  # the view a caller gets unless it names another (``SummaryWorker(views=...)``)


class SummaryError(RuntimeError):
    """A live summary could not be computed: an unexpected error in the worker, or the worker died."""


def opens_by_url(url: str) -> bool:
    """Whether another process can open the store at ``url``: False only for an in-memory SQLite database."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return True
    return u.database not in (None, "", ":memory:") and "mode=memory" not in url


# -- the child's side ---------------------------------------------------------------------------------------
_child_store: EventStore | None = None  # the worker process's store, opened by its first task


def _init_child(nice: int) -> None:
    """The worker's initializer: leave Ctrl-C to the parent, run at a lower CPU priority, exit with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if nice > 0:
        with contextlib.suppress(OSError):
            os.nice(nice)
    # a parent killed with -9 cannot stop its worker: the worker watches for that itself
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent,), name="ab-summary-parent", daemon=True).start()


def _exit_with(parent: Any) -> None:
    parent.join()  # returns once the parent process has ended
    os._exit(0)


def _compute(compute: Compute, name: str, url: str | None, store: EventStore | None = None) -> Summary:
    """One summary: in the worker process (``url``: the store it opens once) or in a thread here (``store``)."""
    global _child_store
    try:
        if store is None:
            if _child_store is None:
                _child_store = EventStore(url, create=False)  # type: ignore[arg-type]
            store = _child_store
        return compute(store, name)
    except ABError:
        raise
    except Exception as exc:
        raise SummaryError(
            f"experiment: the summary of {name!r} failed in the summary worker: {type(exc).__name__}: {exc}"
        ) from exc


# -- the serving process's side -----------------------------------------------------------------------------
def _relay(name: str, out: Future[Summary], flight: Future[Summary]) -> None:
    """Hand a finished shared computation to one caller's future (unless that caller gave up)."""
    if not out.set_running_or_notify_cancel():
        return
    if flight.cancelled():
        out.set_exception(SummaryError(f"experiment: the summary of {name!r} was cancelled (worker closed)"))
        return
    exc = flight.exception()
    if exc is None:
        out.set_result(flight.result())
    elif isinstance(exc, ABError | SummaryError):
        out.set_exception(exc)
    else:  # the worker died (BrokenProcessPool), or the result could not be sent back
        err = SummaryError(
            f"experiment: the summary worker failed computing {name!r}: {type(exc).__name__}: {exc}"
        )
        err.__cause__ = exc
        out.set_exception(err)


class SummaryWorker:
    """Live summaries of the experiments of one store, computed in a child process and cached.

    ``submit(name, max_age_s, view)`` returns a ``concurrent.futures.Future`` of the summary (await it with
    ``asyncio.wrap_future``); ``close()`` stops the child. Thread-safe. ``compute`` is the ``compact`` view;
    ``views`` names more (``{"full": ...}``), each cached apart. Every one must be a module-level function (it
    is pickled by reference into the child), e.g. ``livethink.ab_test.hooks.compute_summary``.
    """

    def __init__(
        self, store: EventStore, compute: Compute, *, views: dict[str, Compute] | None = None, nice: int = 10,
        close_timeout_s: float = 2.0,
    ):  # fmt: skip
        self.store = store
        self.in_process = not opens_by_url(store.url)
        self.views: dict[str, Compute] = {COMPACT: compute, **(views or {})}
        self._nice, self._close_timeout_s = nice, close_timeout_s
        self._lock = threading.RLock()  # a computation that ends at once calls _landed inside submit
        self._pool: Executor | None = None
        self._done: dict[tuple[str, str], tuple[float, Summary]] = {}  # (name, view) -> (computation start, summary)
        self._flights: dict[tuple[str, str], Future[Summary]] = {}  # (name, view) -> the computation in flight
        self._closed = False

    def submit(self, name: str, max_age_s: float = 5.0, view: str = COMPACT) -> Future[Summary]:
        """A future of ``name``'s summary in ``view``: the cached one when younger than ``max_age_s``, else the
        computation in flight, else a new one. Failures: ``UnknownExperimentError``, ``SummaryError``;
        ``ValueError`` naming the views for an unknown ``view``."""
        if view not in self.views:
            raise ValueError(f"view: unknown summary view {view!r} (known: {sorted(self.views)})")
        out: Future[Summary] = Future()
        now = time.monotonic()
        key = (name, view)
        with self._lock:
            if self._closed:
                raise SummaryError(f"experiment: the summary worker is closed (asked for {name!r})")
            hit = self._done.get(key)
            if hit is not None and now - hit[0] <= max_age_s:
                out.set_result(hit[1])
                return out
            flight = self._flights.get(key) or self._start(key, now)
        flight.add_done_callback(functools.partial(_relay, name, out))
        return out

    def _start(self, key: tuple[str, str], now: float) -> Future[Summary]:
        """Submit one computation (under the lock)."""
        pool = self._pool or self._new_pool()
        try:
            flight = self._submit(pool, key)
        except BrokenProcessPool:  # the worker died since the last computation ended: start a new one
            pool = self._new_pool()
            flight = self._submit(pool, key)
        self._flights[key] = flight
        flight.add_done_callback(functools.partial(self._landed, key, now, pool))
        return flight

    def _submit(self, pool: Executor, key: tuple[str, str]) -> Future[Summary]:
        name, view = key
        if self.in_process:
            return pool.submit(_compute, self.views[view], name, None, self.store)
        return pool.submit(_compute, self.views[view], name, self.store.url)

    def _new_pool(self) -> Executor:
        if self.in_process:
            log.info("A/B summaries of %s are computed in this process: an in-memory store cannot be opened by "
                     "another process", self.store.url)  # fmt: skip
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ab-summary")
        else:
            self._pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=_init_child,
                initargs=(self._nice,),
            )  # fmt: skip
        return self._pool

    def _landed(self, key: tuple[str, str], started: float, pool: Executor, flight: Future[Summary]) -> None:
        """A computation ended: cache its summary (unless a newer one is cached); forget a worker that died."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
            if flight.cancelled():
                return
            exc = flight.exception()
            if exc is None:
                prev = self._done.get(key)
                if prev is None or prev[0] <= started:
                    self._done[key] = (started, flight.result())
            elif isinstance(exc, BrokenProcessPool) and self._pool is pool:
                log.warning("the A/B summary worker died (%s); the next request starts a new one", exc)
                self._pool = None

    def close(self) -> None:
        """Stop the worker: summaries in flight fail with ``SummaryError``; a child still busy after
        ``close_timeout_s`` is terminated (a server's shutdown does not wait for an analysis)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is None:
            return
        # ProcessPoolExecutor has no public way to stop a busy worker before Python 3.14 (terminate_workers)
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + self._close_timeout_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
                p.join(5)
