"""A/B hooks on the request path: what the server needs from an experimentation system.

``ServeHooks`` is the interface (a platform may plug in its own): ``assign(viewer_id) -> ArmChoice`` (arm,
model variant, budget overrides), ``on_exposure``, ``on_response``, ``on_outcome``, ``summary``, ``arms``,
``health``, ``close``; what a client should see as an error is raised as ``APIError``.
``NoExperiment`` is the default (everyone gets the default model, nothing is logged). ``ABTestHooks`` adapts
``livethink.ab_test`` (a ``HookSet`` of ``ExperimentHooksProtocol``, one per experiment of a YAML file, sharing
one event store); a viewer is in at most one experiment of a file (namespaces make them disjoint), the first
that takes them wins. ``client_errors`` is the one place where A/B errors become HTTP answers.
Logging never blocks a reply: the ``on_*`` futures resolve after the store commits, failures are counted.
With a spool (``ExperimentConfig.spool_dir``) every event is written ahead to local disk before ``on_*`` returns,
so an exposure logged before a reply survives a ``kill -9`` of the server; ``health()`` and
``SpoolCollector`` report the write path (degraded store, spool bytes, a full spool).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from livethink.ab_test.errors import (
    EventConflictError,
    EventValidationError,
    SpoolFullError,
    UnknownArmError,
    UnknownExperimentError,
)
from livethink.ab_test.serving import ArmSettings, ResponseRecord, SummaryView
from livethink.serve.errors import APIError

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from livethink.ab_test.assignment import Assignment
    from livethink.ab_test.events import OutcomeIn
    from livethink.ab_test.hooks import HookSet
    from livethink.ab_test.serving import ExperimentHooksProtocol
    from livethink.ab_test.store import Ack

log = logging.getLogger(__name__)


@contextlib.contextmanager
def client_errors(experiment_param: str = "experiment") -> Iterator[None]:
    """The one place where A/B errors become the client's ``APIError``: 404 for an unknown arm or experiment
    (``experiment_param`` names the field that named it), 409 for a reused event id, 400 for a malformed
    outcome, 503 while the store is down and the spool is full."""
    try:
        yield
    except UnknownArmError as exc:
        raise APIError(404, str(exc), "not_found_error", "arm", "arm_not_found") from None
    except UnknownExperimentError as exc:
        raise APIError(404, str(exc), "not_found_error", experiment_param) from None
    except EventConflictError as exc:
        raise APIError(409, str(exc), "conflict_error", "event_id") from None
    except EventValidationError as exc:
        raise APIError(400, str(exc), "invalid_request_error", str(exc).split(":", 1)[0] or None) from None
    except SpoolFullError as exc:
        raise APIError(503, str(exc), "unavailable_error") from None


@dataclass(frozen=True)
class ArmChoice(ArmSettings):
    """Which arm serves a request and what it changes (all None = the server's default, no experiment)."""

    forced: bool = False  # chosen by the request (QA), not by assignment: no exposure is logged
    assignment: Assignment | None = None  # the experiment's own record, handed back to on_exposure
    unit_id: str | None = None  # the session or stream hashed, for an experiment randomised by one

    @classmethod
    def of(cls, settings: ArmSettings, assignment: Assignment | None, unit_id: str | None = None) -> ArmChoice:
        """The choice of an assigned viewer, or of a request that forced the arm (no ``assignment``)."""
        return cls(**dataclasses.asdict(settings), forced=assignment is None, assignment=assignment, unit_id=unit_id)


@runtime_checkable
class ServeHooks(Protocol):
    def assign(
        self, viewer_id: str | None, forced_arm: str | None = None, *, session_id: str | None = None,
        stream_id: str | None = None,
    ) -> ArmChoice: ...  # fmt: skip

    def on_exposure(
        self, viewer_id: str, choice: ArmChoice, request_id: str, simulated: bool = False
    ) -> None: ...

    def on_response(
        self, viewer_id: str, choice: ArmChoice, request_id: str, record: ResponseRecord, simulated: bool = False
    ) -> None: ...

    async def on_outcome(self, payload: OutcomeIn | dict[str, Any]) -> dict[str, str]: ...

    def summary(self, name: str, view: SummaryView = "compact") -> dict[str, Any]: ...

    def arms(self) -> dict[str, list[str]]: ...

    def health(self) -> dict[str, Any] | None: ...

    def close(self) -> None: ...


class NoExperiment:
    """Default hooks: no experiment, everyone gets the default model, nothing is logged."""

    def assign(
        self, viewer_id: str | None, forced_arm: str | None = None, *, session_id: str | None = None,
        stream_id: str | None = None,
    ) -> ArmChoice:  # fmt: skip
        if forced_arm is not None:
            with client_errors():
                raise UnknownArmError(f"arm: no experiment is configured, so arm {forced_arm!r} does not exist")
        return ArmChoice()

    def on_exposure(
        self, viewer_id: str, choice: ArmChoice, request_id: str, simulated: bool = False
    ) -> None:
        return None

    def on_response(
        self, viewer_id: str, choice: ArmChoice, request_id: str, record: ResponseRecord, simulated: bool = False
    ) -> None:
        return None

    async def on_outcome(self, payload: OutcomeIn | dict[str, Any]) -> dict[str, str]:
        with client_errors():
            raise UnknownExperimentError("experiment: no experiment is configured on this server")

    def summary(self, name: str, view: SummaryView = "compact") -> dict[str, Any]:
        with client_errors("name"):
            raise UnknownExperimentError(f"experiment: unknown experiment {name!r} (no experiment is configured)")

    def arms(self) -> dict[str, list[str]]:
        return {}

    def health(self) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        return None


class ABTestHooks:
    """``ServeHooks`` over ``livethink.ab_test``: the ``HookSet`` of a file's experiments."""

    def __init__(self, experiments: HookSet, on_error: Callable[[str], None] | None = None):
        self.experiments = experiments
        self._on_error = on_error  # counts logging failures by kind

    @classmethod
    def open(
        cls,
        experiments_file: str,
        store: str,
        known_variants: set[str] | None = None,
        on_error: Callable[[str], None] | None = None,
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
        return self.experiments.health()

    def assign(
        self, viewer_id: str | None, forced_arm: str | None = None, *, session_id: str | None = None,
        stream_id: str | None = None,
    ) -> ArmChoice:  # fmt: skip
        """The viewer's arm in the first experiment that takes them. An experiment randomised by ``session`` or
        ``stream`` hashes that id (a request without it is left out of such an experiment)."""
        if forced_arm is not None:
            with client_errors():
                return self._forced(forced_arm)
        if not viewer_id:
            return ArmChoice()
        units = {"session": session_id, "stream": stream_id}
        for h in self.experiments.values():
            unit = getattr(getattr(h, "experiment", None), "unit", "viewer")
            if unit == "viewer":
                a = h.assign(viewer_id)
                unit_id = None
            else:
                unit_id = units.get(unit)
                a = h.assign(viewer_id, unit_id=unit_id)  # type: ignore[call-arg]
            if a.in_experiment and a.arm is not None:
                return ArmChoice.of(h.arm_settings(a.arm), a, unit_id)
        return ArmChoice()

    def _forced(self, arm: str) -> ArmChoice:
        for h in self.experiments.values():
            if arm in h.arm_names():
                return ArmChoice.of(h.arm_settings(arm), None)
        raise UnknownArmError(f"arm: unknown arm {arm!r} (arms: {self.arms()})")

    def _log_event(self, kind: str, send: Callable[[], Future[Ack] | None]) -> None:
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

        def done(f: Future[Ack]) -> None:
            exc = f.exception()
            if exc is not None:
                log.warning("A/B %s event not stored: %s", kind, exc)
                self._failed(kind)

        fut.add_done_callback(done)

    def _failed(self, kind: str) -> None:
        if self._on_error is not None:
            self._on_error(kind)

    def on_exposure(
        self, viewer_id: str, choice: ArmChoice, request_id: str, simulated: bool = False
    ) -> None:
        if choice.experiment is None or choice.forced or choice.assignment is None:
            return
        h, assignment = self.experiments[choice.experiment], choice.assignment
        self._log_event(
            "exposure",
            lambda: h.on_exposure(viewer_id, assignment, request_id=request_id, simulated=simulated,
                                  **({"unit_id": choice.unit_id} if choice.unit_id else {})),
        )

    def on_response(
        self, viewer_id: str, choice: ArmChoice, request_id: str, record: ResponseRecord, simulated: bool = False
    ) -> None:
        if choice.experiment is None or choice.forced:
            return
        h = self.experiments[choice.experiment]
        self._log_event(
            "response",
            lambda: h.on_response(viewer_id, choice.arm, record, request_id=request_id, simulated=simulated),
        )

    async def on_outcome(self, payload: OutcomeIn | dict[str, Any]) -> dict[str, str]:
        from livethink.ab_test.hooks import arecord_outcome

        with client_errors():
            ack = await arecord_outcome(self.experiments, payload)
        return {"event_id": ack.event_id, "status": ack.status}

    def summary(self, name: str, view: SummaryView = "compact") -> dict[str, Any]:
        with client_errors("name"):
            return self._experiment(name).summary(view=view)

    async def asummary(self, name: str, view: SummaryView = "compact") -> dict[str, Any]:
        """Async ``summary``: awaits an experiment's ``asummary`` (computed in a worker process, nothing on the
        event loop); an experiment without one is summarised in a thread."""
        with client_errors("name"):
            h = self._experiment(name)
            if hasattr(h, "asummary"):
                return await h.asummary(view=view)
        return await asyncio.to_thread(self.summary, name, view)

    def _experiment(self, name: str) -> ExperimentHooksProtocol:
        h = self.experiments.get(name)
        if h is None:
            known = sorted(self.experiments)
            raise UnknownExperimentError(f"experiment: unknown experiment {name!r} (known: {known})")
        return h

    def arms(self) -> dict[str, list[str]]:
        return {name: list(h.arm_names()) for name, h in self.experiments.items()}

    def close(self) -> None:
        """Close every experiment's hooks, then the writer and store they share."""
        self.experiments.close()


class SpoolCollector:
    """Prometheus collector of ``hooks.health()`` (read at scrape time): register it on the server's registry."""

    def __init__(self, hooks: ServeHooks):
        self.hooks = hooks

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        state = self.hooks.health()
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
