"""Engine supervision: notice a dead or wedged engine, refuse its requests with 503 while it is down, restart it
with bounded retries and exponential backoff, and ask the process to exit once the retry budget is spent.

Three layers:

- pure state machine (``states``: ``on_poll``, ``on_restarted``, ``backoff``, ``retry_after``) over ``Status``: ``ok`` →
  ``stalled`` (a request has waited ``engine.stall_s`` for any output) → ``dead`` (the engine's own liveness says
  so, or it stayed stalled ``engine.stall_kill_s``) → ``restarting`` → ``ok``; or ``failed`` when more than
  ``engine.restart_max`` restarts fell within ``engine.restart_window_s`` (the process then exits non-zero, so
  systemd, Kubernetes or ``livethink.replicas`` restarts it);
- ``SupervisedEngine``: the engine as the service sees it; refuses requests (503 ``engine_unavailable`` with
  ``Retry-After``) while the engine is down, turns a request that dies with its engine into the same 503, and
  tracks progress (when output last came, since when a request has waited for any);
- ``EngineSupervisor``: one asyncio task per engine polling liveness every ``engine.health_poll_s`` (and woken at
  once by a request that saw the engine die), probing an idle or suspect engine with a one-token generation,
  and stopping / restarting it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from livethink.serve.budget.plan import TokenBudget
from livethink.serve.engines.base import Delta, Engine, EngineDead, GenerationRequest, SamplingOptions
from livethink.serve.engines.states import SERVING, Action, Policy, Status, on_poll, on_restarted, retry_after
from livethink.serve.errors import APIError, engine_unavailable

log = logging.getLogger(__name__)


# -- the engine as the service sees it ----------------------------------------------------------------------
def _is_dead_error(exc: BaseException) -> bool:
    return isinstance(exc, EngineDead) or type(exc).__name__ == "EngineDeadError"  # vllm.v1.engine.exceptions


class SupervisedEngine:
    """Wraps an engine: the ``Engine`` interface plus the supervisor's gate and progress tracking."""

    def __init__(self, key: str, inner: Engine, policy: Policy, start_s: float = 30.0):
        self.key, self.inner, self.policy = key, inner, policy
        self.status = Status(since=time.monotonic())
        self.start_s = start_s  # how long a (re)start takes: the Retry-After estimate
        self.active: dict[str, float] = {}  # request id -> start (monotonic)
        self.unanswered_since: float | None = None  # a request waits for any output since then
        self.last_output = time.monotonic()
        self.wake = asyncio.Event()  # a request saw the engine die: poll now

    # the Engine interface, delegated
    @property
    def kind(self) -> str:
        return self.inner.kind

    @property
    def models(self) -> tuple[str, ...]:
        return self.inner.models

    @property
    def reasoning_format(self) -> Any:
        return self.inner.reasoning_format

    def __getattr__(self, name: str) -> Any:  # engine-specific attributes (e.g. vLLM's ``forcing``)
        if name == "inner":  # not set yet (e.g. during copy): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    def tokenizer_for(self, model: str) -> Any:
        return self.inner.tokenizer_for(model)

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)

    def stats(self) -> Any:
        return self.inner.stats()

    def alive(self) -> bool:
        return self.inner.alive()

    # supervision
    def unanswered_s(self, now: float) -> float | None:
        return None if self.unanswered_since is None else now - self.unanswered_since

    def unavailable(self, why: str | None = None) -> APIError:
        now = time.monotonic()
        wait = retry_after(self.status, now, self.start_s, self.policy)
        reason = why or self.status.reason or "the engine is down"
        return engine_unavailable(
            f"engine {self.key!r} is unavailable ({self.status.state}: {reason}); retry after {wait:.0f} s",
            wait,
            {"reason": self.status.state},
        )

    async def generate(self, request: GenerationRequest, budget: TokenBudget) -> AsyncIterator[Delta]:
        if self.status.state not in SERVING:
            raise self.unavailable()
        async with contextlib.aclosing(self.tracked(request, budget)) as deltas:
            async for delta in deltas:
                yield delta

    async def tracked(self, request: GenerationRequest, budget: TokenBudget) -> AsyncIterator[Delta]:
        """The engine's deltas, noting progress; a death of the engine under the request becomes a 503."""
        now = time.monotonic()
        self.active[request.request_id] = now
        if self.unanswered_since is None:
            self.unanswered_since = now
        agen = self.inner.generate(request, budget)
        try:
            async for delta in agen:
                if not delta.forced_end_of_thinking:  # a forced end may be the engine wrapper's own text
                    self.last_output, self.unanswered_since = time.monotonic(), None
                yield delta
        except Exception as exc:
            if not (_is_dead_error(exc) or not self.inner.alive()):
                raise
            log.warning("engine %s died under request %s: %s", self.key, request.request_id, exc)
            self.wake.set()
            raise self.unavailable("the engine died during the request") from None
        finally:
            self.active.pop(request.request_id, None)
            with contextlib.suppress(Exception):
                await agen.aclose()

    def reset_progress(self) -> None:
        self.unanswered_since, self.last_output = None, time.monotonic()


# -- the task -----------------------------------------------------------------------------------------------
_probe_ids = itertools.count()


async def probe(engine: SupervisedEngine, timeout_s: float) -> bool:
    """A one-token generation outside the controller's queue: True if a token came within ``timeout_s``."""
    model = engine.models[0]
    tok = engine.tokenizer_for(model)
    ids = tok.encode("Hello", add_special_tokens=False) or [tok.eos_token_id or 0]
    rid = f"probe-{engine.key}-{next(_probe_ids)}"
    request = GenerationRequest(rid, model, ids, SamplingOptions(temperature=0.0, ignore_eos=True), thinking=False)
    agen = engine.tracked(request, TokenBudget(0, 1))
    try:
        async with asyncio.timeout(timeout_s):
            async for delta in agen:
                if delta.tokens or delta.finish_reason:
                    return True
        return True
    except TimeoutError:
        return False
    except Exception as exc:  # noqa: BLE001 - a failing probe is a finding, not a crash of the supervisor
        log.warning("engine %s: probe failed: %s", engine.key, getattr(exc, "message", exc))
        return False
    finally:
        with contextlib.suppress(Exception):
            await agen.aclose()
        with contextlib.suppress(Exception):
            await engine.abort(rid)


@dataclass
class EngineSupervisor:
    """Polls one engine's liveness and progress; stops, restarts, or gives up on it (``on_give_up(reason)``)."""

    engine: SupervisedEngine
    on_give_up: Callable[[str, str], None]
    on_state: Callable[[str, Status], None] = lambda key, status: None  # metrics
    on_restart: Callable[[str, str], None] = lambda key, cause: None  # an attempt began (metrics)
    on_started: Callable[[], None] = lambda: None  # the engine is up again (e.g. re-nice its processes)
    _probe: asyncio.Task | None = field(default=None, repr=False)

    @property
    def policy(self) -> Policy:
        return self.engine.policy

    def _set(self, status: Status) -> None:
        old = self.engine.status
        self.engine.status = status
        if status.state != old.state:
            log.log(logging.INFO if status.state == "ok" else logging.WARNING,
                    "engine %s: %s -> %s%s", self.engine.key, old.state, status.state,
                    f" ({status.reason})" if status.reason else "")  # fmt: skip
            self.on_state(self.engine.key, status)

    async def step(self, now: float | None = None) -> Action:
        """One poll: observe, then act (stop, restart, exit). Returns the action taken."""
        e = self.engine
        now = time.monotonic() if now is None else now
        status, action = on_poll(e.status, e.alive(), e.unanswered_s(now), now, self.policy)
        self._set(status)
        if action == "stop":
            await self._stop()
        elif action == "restart":
            await self._restart()
        elif action == "exit":
            await self._stop()
            self.on_give_up(e.key, status.reason or "the engine is down")
        elif status.state in SERVING:
            self._maybe_probe(now)
        return action

    def _maybe_probe(self, now: float) -> None:
        """A suspect engine (a request ended without output) gets a one-token probe at once. An idle engine's
        regular probe is the controller's timing probe (``probes.IdleProber``), which goes through this
        wrapper: a probe that gets no output shows here as a stall."""
        e, p = self.engine, self.policy
        if (self._probe is not None and not self._probe.done()) or e.active:
            return
        if e.unanswered_since is not None:
            self._probe = asyncio.create_task(probe(e, p.stall_s))

    async def _stop(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        try:
            await asyncio.wait_for(self.engine.inner.stop(), 60)
        except Exception as exc:  # noqa: BLE001 - a dead engine may fail to stop cleanly; it is replaced anyway
            log.warning("engine %s: stop failed: %s", self.engine.key, exc)

    async def _restart(self) -> None:
        e = self.engine
        self.on_restart(e.key, e.status.cause or "died")
        t0 = time.monotonic()
        error = None
        try:
            await asyncio.wait_for(e.inner.start(), self.policy.start_timeout_s)
        except Exception as exc:  # noqa: BLE001 - the reason goes into the status and the log
            error = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if error is None:
            e.start_s = now - t0
            e.reset_progress()
            log.info("engine %s restarted in %.1f s", e.key, e.start_s)
            self.on_started()
        status, action = on_restarted(e.status, error, now, self.policy)
        self._set(status)
        if action in ("stop", "exit"):
            await self._stop()
        if action == "exit":
            self.on_give_up(e.key, status.reason or "restart failed")

    async def run(self) -> None:
        while self.engine.status.state != "failed":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.engine.wake.wait(), self.policy.poll_s)
            self.engine.wake.clear()
            try:
                await self.step()
            except Exception:  # the supervisor must outlive a surprise; the next poll retries
                log.exception("engine %s: supervision step failed", self.engine.key)

    def report(self, now: float | None = None) -> dict[str, Any]:
        s = self.engine.status
        now = time.monotonic() if now is None else now
        return {
            "state": s.state,
            "reason": s.reason,
            "for_s": round(now - s.since, 1),
            "restarts": len(s.restarts),
        }


class Supervision:
    """The supervised engines of a server and their supervisor tasks (``engine.supervise``; off: the engines as
    they are, never restarted, and health reports no engine state)."""

    def __init__(
        self,
        engines: dict[str, Engine],
        policy: Policy,
        metrics: Any,
        *,
        enabled: bool = True,
        start_s: float = 30.0,
        on_give_up: Callable[[str, str], None] = lambda key, reason: None,
        on_started: Callable[[], None] = lambda: None,
    ):
        self.enabled = enabled
        self.supervisors: dict[str, EngineSupervisor] = {}
        self.engines: dict[str, Any] = dict(engines)
        self._tasks: list[asyncio.Task] = []
        if not enabled:
            return

        def state(key: str, status: Status) -> None:
            metrics.engine_up.labels(key).set(1 if status.state in SERVING else 0)

        def restart(key: str, cause: str) -> None:
            metrics.engine_restarts.labels(key, cause).inc()

        for key, engine in engines.items():
            wrapped = SupervisedEngine(key, engine, policy, start_s)
            self.engines[key] = wrapped
            self.supervisors[key] = EngineSupervisor(wrapped, on_give_up, state, restart, on_started)
            state(key, wrapped.status)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(s.run(), name=f"supervise-{k}") for k, s in self.supervisors.items()]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        for s in self.supervisors.values():
            if s._probe is not None:
                s._probe.cancel()

    def report(self) -> dict[str, dict[str, Any]] | None:
        """Each engine's state (None when supervision is off)."""
        if not self.enabled:
            return None
        now = time.monotonic()
        return {k: s.report(now) for k, s in self.supervisors.items()}

    def check_ready(self) -> None:
        """Raise the 503 (``engine_unavailable``, ``Retry-After``) that ``/health`` answers while an engine the
        config needs is not ok (stalled, dead, restarting, failed)."""
        down = {k: s.engine for k, s in self.supervisors.items() if s.engine.status.state != "ok"}
        if not down:
            return
        now = time.monotonic()
        wait = max(retry_after(e.status, now, e.start_s, e.policy) for e in down.values())
        what = "; ".join(f"engine {k!r} {e.status.state}: {e.status.reason}" for k, e in down.items())
        raise engine_unavailable(f"not ready: {what}", wait, {"reason": "engine_unavailable",
                                                              "engines": self.report()})  # fmt: skip
