"""A/B hooks on the request path: what the server needs from an experimentation system.

``ServeHooks`` is the interface (a platform may plug in its own): ``assign(viewer_id) -> ArmChoice`` (arm,
model variant, budget overrides), ``on_exposure``, ``on_response``, ``on_outcome``, ``summary``.
``NoExperiment`` is the default (everyone gets the default model, nothing is logged). ``ABTestHooks`` adapts
``livethink.ab_test`` (``ExperimentHooks`` per experiment of a YAML file, one event store); a viewer is in
at most one experiment of a file (namespaces make them disjoint), the first that takes them wins.
Logging never blocks a reply: the ``on_*`` futures resolve after the store commits, failures are counted.
With a spool (``ExperimentConfig.spool_dir``) every event is written ahead to local disk before ``on_*`` returns,
so an exposure logged before a reply survives a ``kill -9`` of the server; ``health()`` and
``SpoolCollector`` report the write path (degraded store, spool bytes, a full spool).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger(__name__)


class UnknownArmError(LookupError):
    """A forced arm that no experiment has."""


class NotFoundError(LookupError):
    """Unknown experiment (→ 404)."""


class ConflictError(ValueError):
    """An outcome event id reused for different content (→ 409)."""


class PayloadError(ValueError):
    """A malformed outcome payload (→ 400)."""


class UnavailableError(RuntimeError):
    """The event could not be recorded now (store down and spool full) (→ 503)."""


@dataclass(frozen=True)
class ArmChoice:
    """Which arm serves a request and what it changes (None = server default)."""

    experiment: str | None = None
    arm: str | None = None
    variant: str | None = None
    deadline_ms: int | None = None
    thinking_budget: int | None = None
    reply_reserve: int | None = None
    max_tokens: int | None = None
    forced: bool = False  # chosen by the request (QA), not by assignment: no exposure is logged
    assignment: Any = None  # the experimentation system's own record, handed back to on_exposure


@dataclass(frozen=True)
class ResponseRecord:
    latency_ms: float
    ttft_ms: float | None
    tokens: int
    deadline_met: bool
    status: str  # ok | rejected | error


@runtime_checkable
class ServeHooks(Protocol):
    def assign(self, viewer_id: str | None, forced_arm: str | None = None) -> ArmChoice: ...

    def on_exposure(
        self, viewer_id: str, choice: ArmChoice, request_id: str, simulated: bool = False
    ) -> None: ...

    def on_response(
        self,
        viewer_id: str,
        choice: ArmChoice,
        request_id: str,
        record: ResponseRecord,
        simulated: bool = False,
    ) -> None: ...

    async def on_outcome(self, payload: Any) -> dict[str, Any]: ...

    def summary(self, name: str) -> dict[str, Any]: ...

    def arms(self) -> dict[str, list[str]]: ...

    def close(self) -> None: ...


class NoExperiment:
    """Default hooks: no experiment, everyone gets the default model, nothing is logged."""

    def assign(self, viewer_id: str | None, forced_arm: str | None = None) -> ArmChoice:
        if forced_arm is not None:
            raise UnknownArmError(f"arm: no experiment is configured, so arm {forced_arm!r} does not exist")
        return ArmChoice()

    def on_exposure(
        self, viewer_id: str, choice: ArmChoice, request_id: str, simulated: bool = False
    ) -> None:
        return None

    def on_response(
        self,
        viewer_id: str,
        choice: ArmChoice,
        request_id: str,
        record: ResponseRecord,
        simulated: bool = False,
    ) -> None:
        return None

    async def on_outcome(self, payload: Any) -> dict[str, Any]:
        raise NotFoundError("experiment: no experiment is configured on this server")

    def summary(self, name: str) -> dict[str, Any]:
        raise NotFoundError(f"experiment: unknown experiment {name!r} (no experiment is configured)")

    def arms(self) -> dict[str, list[str]]:
        return {}

    def close(self) -> None:
        return None


class ABTestHooks:
    """``ServeHooks`` over ``livethink.ab_test`` hooks (``ExperimentHooksProtocol`` per experiment)."""

    def __init__(self, hooks: Mapping[str, Any], on_error: Any = None):
        self.hooks = dict(hooks)
        self._on_error = on_error  # callable(kind) counting logging failures

    @classmethod
    def open(
        cls,
        experiments_file: str,
        store: str,
        known_variants: set[str] | None = None,
        on_error: Any = None,
        spool_dir: str | None = None,
        spool_max_mb: float = 256.0,
    ) -> ABTestHooks:
        from livethink.ab_test.experiment import load_experiments
        from livethink.ab_test.hooks import open_hooks
        from livethink.ab_test.spool import Spool

        experiments = load_experiments(experiments_file, known_variants=known_variants)
        spool = None if spool_dir is None else Spool(spool_dir, max_bytes=int(spool_max_mb * (1 << 20)))
        return cls(open_hooks(list(experiments.values()), store, spool=spool), on_error)

    def health(self) -> dict[str, Any] | None:
        """State of the event write path (one writer is shared by all experiments): degraded, spool use."""
        writers = {id(w): w for h in self.hooks.values() if (w := getattr(h, "writer", None)) is not None}
        states = [w.state() for w in writers.values() if hasattr(w, "state")]
        return states[0] if len(states) == 1 else ({"writers": states} if states else None)

    def _choice(self, name: str, h: Any, arm: str, assignment: Any, forced: bool) -> ArmChoice:
        settings = h.arm_settings(arm)
        budget = getattr(settings, "budget", None)
        return ArmChoice(
            experiment=name,
            arm=arm,
            variant=getattr(settings, "variant", None),
            deadline_ms=getattr(budget, "deadline_ms", None),
            thinking_budget=getattr(budget, "thinking_budget", None),
            reply_reserve=getattr(budget, "reply_reserve", None),
            max_tokens=getattr(budget, "max_tokens", None),
            forced=forced,
            assignment=assignment,
        )

    def assign(self, viewer_id: str | None, forced_arm: str | None = None) -> ArmChoice:
        if forced_arm is not None:
            for name, h in self.hooks.items():
                try:
                    h.arm_settings(forced_arm)
                except KeyError:
                    continue
                return self._choice(name, h, forced_arm, None, True)
            raise UnknownArmError(f"arm: unknown arm {forced_arm!r} (arms: {self.arms()})")
        if not viewer_id:
            return ArmChoice()
        for name, h in self.hooks.items():
            a = h.assign(viewer_id)
            if a.in_experiment and a.arm is not None:
                return self._choice(name, h, a.arm, a, False)
        return ArmChoice()

    def _failed(self, kind: str) -> None:
        if self._on_error is not None:
            self._on_error(kind)

    def _log_event(self, kind: str, send: Callable[[], Any]) -> None:
        """``send()`` hands one event to the store (a future, or None); a failure, now or when the future
        resolves, is logged and counted, never raised: logging must never fail a reply."""
        try:
            fut = send()
        except Exception as exc:
            log.warning("A/B %s not logged: %s", kind, exc)
            self._failed(kind)
            return
        if fut is None:
            return

        def done(f: Any) -> None:
            exc = f.exception()
            if exc is not None:
                log.warning("A/B %s event not stored: %s", kind, exc)
                self._failed(kind)

        fut.add_done_callback(done)

    def on_exposure(
        self, viewer_id: str, choice: ArmChoice, request_id: str, simulated: bool = False
    ) -> None:
        if choice.experiment is None or choice.forced or choice.assignment is None:
            return
        self._log_event(
            "exposure",
            lambda: self.hooks[choice.experiment].on_exposure(
                viewer_id, choice.assignment, request_id=request_id, simulated=simulated
            ),
        )

    def on_response(
        self,
        viewer_id: str,
        choice: ArmChoice,
        request_id: str,
        record: ResponseRecord,
        simulated: bool = False,
    ) -> None:
        if choice.experiment is None or choice.forced:
            return
        self._log_event(
            "response",
            lambda: self.hooks[choice.experiment].on_response(
                viewer_id,
                choice.arm,
                request_id=request_id,
                latency_ms=record.latency_ms,
                ttft_ms=record.ttft_ms,
                tokens=record.tokens,
                deadline_met=record.deadline_met,
                status=record.status,
                simulated=simulated,
            ),
        )

    async def on_outcome(self, payload: Any) -> dict[str, Any]:
        from livethink.ab_test.errors import (
            EventConflictError,
            EventValidationError,
            SpoolFullError,
            UnknownExperimentError,
        )
        from livethink.ab_test.hooks import record_outcome

        try:
            ack = await asyncio.wrap_future(record_outcome(self.hooks, payload))
        except SpoolFullError as exc:
            raise UnavailableError(str(exc)) from None
        except UnknownExperimentError as exc:
            raise NotFoundError(str(exc)) from None
        except EventConflictError as exc:
            raise ConflictError(str(exc)) from None
        except EventValidationError as exc:
            raise PayloadError(str(exc)) from None
        return {"event_id": ack.event_id, "status": ack.status}

    def summary(self, name: str) -> dict[str, Any]:
        from livethink.ab_test.errors import UnknownExperimentError

        h = self.hooks.get(name)
        if h is None or not hasattr(h, "summary"):
            raise NotFoundError(f"experiment: unknown experiment {name!r} (known: {sorted(self.hooks)})")
        try:
            return h.summary()
        except UnknownExperimentError as exc:
            raise NotFoundError(str(exc)) from None

    def arms(self) -> dict[str, list[str]]:
        out = {}
        for name, h in self.hooks.items():
            exp = getattr(h, "experiment", None)
            out[name] = [a.name for a in exp.arms] if exp is not None else []
        return out

    def close(self) -> None:
        """Close every hook, then the writers and stores they share (``open_hooks`` shares one of each)."""
        shared: list[Any] = []
        for h in self.hooks.values():
            close = getattr(h, "close", None)
            if close is not None:
                close()
            for attr in ("writer", "store"):
                obj = getattr(h, attr, None)
                if obj is not None and all(obj is not o for o in shared):
                    shared.append(obj)
        for obj in shared:  # writers first (they flush into the stores)
            try:
                obj.close()
            except Exception as exc:
                log.warning("closing %s failed: %s", type(obj).__name__, exc)


class SpoolCollector:
    """Prometheus collector of ``hooks.health()`` (read at scrape time): register it on the server's registry."""

    def __init__(self, hooks: Any):
        self.hooks = hooks

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        state = getattr(self.hooks, "health", lambda: None)()
        if not state or "writers" in state:
            return
        spool = state.get("spool") or {}
        yield GaugeMetricFamily("livethink_ab_store_degraded", "1 while the A/B store fails and events are spooled",
                                value=int(state["degraded"]))  # fmt: skip
        yield GaugeMetricFamily(
            "livethink_ab_spool_bytes", "Bytes in the A/B spool", value=spool.get("bytes", 0)
        )
        yield GaugeMetricFamily("livethink_ab_spool_max_bytes", "Bound of the A/B spool",
                                value=spool.get("max_bytes", 0))  # fmt: skip
        yield GaugeMetricFamily("livethink_ab_spool_full", "1 while the A/B spool refuses events",
                                value=int(bool(spool.get("full"))))  # fmt: skip
        yield CounterMetricFamily("livethink_ab_spooled_events", "A/B events acknowledged from the spool",
                                  value=state["spooled_events"])  # fmt: skip
        yield CounterMetricFamily("livethink_ab_replayed_events", "Spooled A/B events stored by a replay",
                                  value=state["replayed_events"])  # fmt: skip
        yield CounterMetricFamily("livethink_ab_spool_rejected_events", "A/B events refused by a full spool",
                                  value=spool.get("rejected_events", 0))  # fmt: skip
