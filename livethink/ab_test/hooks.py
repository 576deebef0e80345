"""What the server calls: assignment, exposure/response/outcome logging, live summary.

Typical use in the FastAPI app::

    hooks = open_hooks("configs/ab/experiments.yaml", "sqlite:///runs/ab.db")   # name -> ExperimentHooks
    h = hooks["drpo_vs_rft"]
    a = h.assign(viewer_id)                          # Assignment(arm, bucket, in_experiment, ...)
    settings = h.arm_settings(a.arm)                 # Arm: variant + budget overrides (None if not in it)
    h.on_exposure(viewer_id, a, request_id=rid)      # before generating
    ...
    h.on_response(viewer_id, a.arm, request_id=rid, latency_ms=..., tokens=..., deadline_met=...)
    # POST /v1/ab/outcomes, body model OutcomeIn (FastAPI answers 422 naming the field):
    ack = await arecord_outcome(hooks, body)         # after commit; UnknownExperimentError -> 404
    # GET /v1/ab/experiments/{name}:
    experiment_summary(store, name)                  # UnknownExperimentError -> 404

Every ``on_*`` returns a ``Future[Ack]`` that resolves after the event is durably committed (or None when
nothing is logged, e.g. the viewer is not in the experiment).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from livethink.ab_test.analysis import analyze
from livethink.ab_test.assignment import Assigner, Assignment
from livethink.ab_test.errors import EventValidationError, UnknownExperimentError
from livethink.ab_test.events import OutcomeIn, validate_outcome
from livethink.ab_test.experiment import Arm, Experiment, load_experiments
from livethink.ab_test.store import Ack, EventStore
from livethink.ab_test.writer import BatchWriter

SIMULATED_HEADER = "X-Livethink-Simulated"


@runtime_checkable
class ExperimentHooksProtocol(Protocol):
    """Interface the server needs; a platform can plug in its own (e.g. backed by its experimentation SDK)."""

    name: str

    def assign(self, viewer_id: str) -> Assignment: ...

    def arm_settings(self, arm: str | None) -> Arm | None: ...

    def on_exposure(
        self, viewer_id: str, assignment: Assignment, *, request_id: str | None = None, ts: float | None = None,
        simulated: bool = False,
    ) -> Future[Ack] | None: ...  # fmt: skip

    def on_response(
        self, viewer_id: str, arm: str | None, *, request_id: str | None = None, latency_ms: float,
        ttft_ms: float | None = None, tokens: int | None = None, deadline_met: bool | None = None,
        correct: bool | None = None, helpful: bool | None = None, status: str = "ok", ts: float | None = None,
        simulated: bool = False,
    ) -> Future[Ack] | None: ...  # fmt: skip

    def on_outcome(self, outcome: OutcomeIn | dict) -> Future[Ack]: ...


def _event_id(kind: str, experiment: str, request_id: str) -> str:
    h = hashlib.blake2b(f"{experiment}\0{request_id}".encode(), digest_size=12).hexdigest()
    return f"{kind}-{h}"


class ExperimentHooks:
    """``ExperimentHooksProtocol`` backed by livethink's event store (SQLite/PostgreSQL)."""

    def __init__(
        self, experiment: Experiment, store: EventStore | str | Path, *, writer: BatchWriter | None = None
    ):
        self.experiment = experiment
        self.name = experiment.name
        self._own_store = not isinstance(store, EventStore)
        self.store = EventStore(store) if self._own_store else store  # type: ignore[arg-type]
        self.store.register_experiment(experiment)
        self._own_writer = writer is None
        self.writer = writer or BatchWriter(self.store)
        self._assigner = Assigner(experiment)

    def assign(self, viewer_id: str, now: float | None = None) -> Assignment:
        """Sticky arm of the viewer; ``in_experiment`` is False outside coverage/namespace or start/stop."""
        a = self._assigner(viewer_id)
        when = datetime.fromtimestamp(now if now is not None else time.time(), UTC)
        if a.in_experiment and not self.experiment.is_running(when):
            return Assignment(None, a.bucket, False, -1, a.experiment, a.hash_version)
        return a

    def arm_settings(self, arm: str | None) -> Arm | None:
        """The arm's variant and budget overrides (None for viewers outside the experiment)."""
        return None if arm is None else self.experiment.arm(arm)

    def on_exposure(
        self,
        viewer_id: str,
        assignment: Assignment,
        *,
        request_id: str | None = None,
        ts: float | None = None,
        simulated: bool = False,
    ) -> Future[Ack] | None:
        if not assignment.in_experiment or assignment.arm is None:
            return None
        rid = request_id or uuid.uuid4().hex
        return self.writer.submit(
            {
                "kind": "exposure",
                "event_id": _event_id("exp", self.name, rid),
                "experiment": self.name,
                "viewer_id": viewer_id,
                "arm": assignment.arm,
                "request_id": rid,
                "bucket": assignment.bucket,
                "hash_version": assignment.hash_version,
                "ts": time.time() if ts is None else ts,
                "simulated": simulated,
            }
        )

    def on_response(
        self,
        viewer_id: str,
        arm: str | None,
        *,
        request_id: str | None = None,
        latency_ms: float,
        ttft_ms: float | None = None,
        tokens: int | None = None,
        deadline_met: bool | None = None,
        correct: bool | None = None,
        helpful: bool | None = None,
        status: str = "ok",
        ts: float | None = None,
        simulated: bool = False,
    ) -> Future[Ack] | None:
        if arm is None:
            return None
        rid = request_id or uuid.uuid4().hex
        return self.writer.submit(
            {
                "kind": "response",
                "event_id": _event_id("resp", self.name, rid),
                "experiment": self.name,
                "viewer_id": viewer_id,
                "arm": arm,
                "request_id": rid,
                "latency_ms": float(latency_ms),
                "ttft_ms": None if ttft_ms is None else float(ttft_ms),
                "tokens": tokens,
                "deadline_met": deadline_met,
                "correct": correct,
                "helpful": helpful,
                "status": status,
                "ts": time.time() if ts is None else ts,
                "simulated": simulated,
            }
        )

    def on_outcome(self, outcome: OutcomeIn | dict) -> Future[Ack]:
        body = outcome if isinstance(outcome, OutcomeIn) else validate_outcome(outcome)
        if body.experiment != self.name:
            raise UnknownExperimentError(
                f"experiment: {body.experiment!r} is not handled by hooks of {self.name!r}"
            )
        return self.writer.submit(body.to_event())

    async def aon_outcome(self, outcome: OutcomeIn | dict) -> Ack:
        """Async ``on_outcome``: returns the ack once the outcome is committed."""
        body = outcome if isinstance(outcome, OutcomeIn) else validate_outcome(outcome)
        if body.experiment != self.name:
            raise UnknownExperimentError(
                f"experiment: {body.experiment!r} is not handled by hooks of {self.name!r}"
            )
        return await self.writer.asubmit(body.to_event())

    def summary(self, max_age_s: float = 5.0) -> dict[str, Any]:
        return experiment_summary(self.store, self.name, max_age_s=max_age_s)

    def close(self) -> None:
        if self._own_writer:
            self.writer.close()
        if self._own_store:
            self.store.close()


def open_hooks(
    experiments: str | Path | Iterable[Experiment], store: EventStore | str | Path, **writer_kwargs: Any
) -> dict[str, ExperimentHooks]:
    """Hooks for every experiment of a YAML file (or list), sharing one store and one batching writer."""
    exps = (
        list(load_experiments(experiments).values())
        if isinstance(experiments, str | Path)
        else list(experiments)
    )
    st = store if isinstance(store, EventStore) else EventStore(store)
    writer = BatchWriter(st, **writer_kwargs)
    return {e.name: ExperimentHooks(e, st, writer=writer) for e in exps}


def close_hooks(hooks: Mapping[str, ExperimentHooks]) -> None:
    """Flush and close what ``open_hooks`` opened (shared writers first, then stores)."""
    writers = {id(h.writer): h.writer for h in hooks.values()}
    stores = {id(h.store): h.store for h in hooks.values()}
    for w in writers.values():
        w.close()
    for st in stores.values():
        st.close()


def record_outcome(hooks: Mapping[str, ExperimentHooksProtocol], payload: OutcomeIn | dict) -> Future[Ack]:
    """Route a ``POST /v1/ab/outcomes`` body to its experiment's hooks (``UnknownExperimentError`` → 404)."""
    body = payload if isinstance(payload, OutcomeIn) else validate_outcome(payload)
    h = hooks.get(body.experiment)
    if h is None:
        raise UnknownExperimentError(
            f"experiment: unknown experiment {body.experiment!r} (known: {sorted(hooks)})"
        )
    return h.on_outcome(body)


async def arecord_outcome(hooks: Mapping[str, ExperimentHooksProtocol], payload: OutcomeIn | dict) -> Ack:
    """Async ``record_outcome`` for the FastAPI handler: ``ack = await arecord_outcome(hooks, body)``."""
    body = payload if isinstance(payload, OutcomeIn) else validate_outcome(payload)
    h = hooks.get(body.experiment)
    if h is None:
        raise UnknownExperimentError(
            f"experiment: unknown experiment {body.experiment!r} (known: {sorted(hooks)})"
        )
    if isinstance(h, ExperimentHooks):
        return await h.aon_outcome(body)
    return await asyncio.wrap_future(h.on_outcome(body))


_cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
_cache_lock = threading.Lock()


def experiment_summary(store: EventStore, name: str, *, max_age_s: float = 5.0) -> dict[str, Any]:
    """Live summary for ``GET /v1/ab/experiments/{name}`` (cached ``max_age_s``); unknown → UnknownExperimentError."""
    key = (store.url, name)
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and now - hit[0] <= max_age_s:
            return hit[1]
    full = analyze(store, name).summary
    out = compact_summary(full)
    with _cache_lock:
        _cache[key] = (now, out)
    return out


def compact_summary(full: dict[str, Any]) -> dict[str, Any]:
    """The live-summary view of an analysis: per-arm headline numbers, primary tests, SRM, verdict."""
    primary = full["primary_metric"]
    arms = {
        name: {
            "weight": a["weight"],
            "viewers": a["viewers"],
            "exposures": a["exposures"],
            primary: a[primary],
            "gmv_per_viewer": a["gmv_per_viewer"],
            "latency_p50_ms": a["latency_ms"]["p50"],
            "latency_p99_ms": a["latency_ms"]["p99"],
            "error_rate": a["error_rate"],
        }
        for name, a in full["arms"].items()
    }
    tests = [
        {k: c[k] for k in ("arm", "control", "lift", "lift_ci", "p_value", "decision_p_value", "significant")}
        for c in full["comparisons"]
        if c["metric"] == primary
    ]
    return {
        "experiment": full["experiment"],
        "generated_at": full["generated_at"],
        "primary_metric": primary,
        "control": full["control"],
        "simulated": full["data"]["simulated"],
        "viewers": full["data"]["viewers"],
        "arms": arms,
        "tests": tests,
        "srm": {k: full["srm"][k] for k in ("p_value", "flagged", "observed", "expected")},
        "guardrails": [g for g in full["guardrails"] if g["status"] == "breached"],
        "verdict": full["verdict"],
    }


__all__ = [
    "SIMULATED_HEADER",
    "Assignment",
    "EventValidationError",
    "ExperimentHooks",
    "ExperimentHooksProtocol",
    "OutcomeIn",
    "compact_summary",
    "experiment_summary",
    "arecord_outcome",
    "close_hooks",
    "open_hooks",
    "record_outcome",
]
