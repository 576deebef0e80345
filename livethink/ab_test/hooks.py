"""What the server calls: assignment, exposure/response/outcome logging, live summary.

Typical use in the FastAPI app::

    hooks = open_hooks("configs/ab/experiments.yaml", "sqlite:///runs/ab.db")   # HookSet: name -> ExperimentHooks
    h = hooks["drpo_vs_rft"]
    a = h.assign(viewer_id)                          # Assignment(arm, bucket, in_experiment, ...)
    settings = h.arm_settings(a.arm)                 # ArmSettings: variant + budget overrides (when a.in_experiment)
    h.on_exposure(viewer_id, a, request_id=rid)      # before generating
    ...
    h.on_response(viewer_id, a.arm, ResponseRecord(latency_ms=..., tokens=..., deadline_met=...), request_id=rid)
    # POST /v1/ab/outcomes, body model OutcomeIn (FastAPI answers 422 naming the field):
    ack = await arecord_outcome(hooks, body)         # after commit; UnknownExperimentError -> 404
    # GET /v1/ab/experiments/{name}, computed in a worker process (``summary_worker``), cached max_age_s:
    summary = await h.asummary()                     # or h.summary(); UnknownExperimentError -> 404
    hooks.close()                                    # stop the summary worker, flush the shared writer, close the store

Every ``on_*`` returns a ``Future[Ack]`` that resolves after the event is durably committed (or None when
nothing is logged, e.g. the viewer is not in the experiment). The types the server programs against
(``ArmSettings``, ``ResponseRecord``, ``ExperimentHooksProtocol``) live in ``livethink.ab_test.serving``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from livethink.ab_test.analysis import analyze
from livethink.ab_test.assignment import Assigner, Assignment
from livethink.ab_test.errors import UnknownExperimentError
from livethink.ab_test.events import OutcomeIn, check_declared, validate_outcome
from livethink.ab_test.experiment import Experiment, load_experiments
from livethink.ab_test.serving import (
    SIMULATED_HEADER,
    ArmSettings,
    ExperimentHooksProtocol,
    ResponseRecord,
    SummaryView,
)
from livethink.ab_test.store import Ack, EventStore
from livethink.ab_test.summary_worker import SummaryWorker
from livethink.ab_test.writer import BatchWriter

log = logging.getLogger(__name__)


def _event_id(kind: str, experiment: str, request_id: str) -> str:
    h = hashlib.blake2b(f"{experiment}\0{request_id}".encode(), digest_size=12).hexdigest()
    return f"{kind}-{h}"


def _outcome(payload: OutcomeIn | dict[str, Any]) -> OutcomeIn:
    return payload if isinstance(payload, OutcomeIn) else validate_outcome(payload)


class ExperimentHooks:
    """``ExperimentHooksProtocol`` backed by livethink's event store (SQLite/PostgreSQL).

    ``writer`` and ``summaries`` may be shared by the hooks of several experiments of one store (``open_hooks``);
    by default each hooks object has its own, closed by ``close()``."""

    def __init__(
        self, experiment: Experiment, store: EventStore | str | Path, *, writer: BatchWriter | None = None,
        summaries: SummaryWorker | None = None,
    ):  # fmt: skip
        self.experiment = experiment
        self.name = experiment.name
        self._own_store = not isinstance(store, EventStore)
        self.store = EventStore(store) if self._own_store else store  # type: ignore[arg-type]
        self.store.register_experiment(experiment)
        self._own_writer = writer is None
        self.writer = writer or BatchWriter(self.store)
        self._own_summaries = summaries is None
        self.summaries = summaries or SummaryWorker(
            self.store, compute_summary, views={"full": compute_full_summary}
        )
        self._assigner = Assigner(experiment)

    def assign(self, viewer_id: str, now: float | None = None, *, unit_id: str | None = None) -> Assignment:
        """Sticky arm of the viewer; ``in_experiment`` is False outside coverage/namespace or start/stop. With a
        ``session`` or ``stream`` randomisation unit the unit's id (``unit_id``) is hashed, so everyone in a room
        gets the same arm; without it the viewer is left out of the experiment (never randomised by the wrong
        unit)."""
        if self.experiment.unit != "viewer":
            if not unit_id:
                return Assignment(None, None, False, -1, self.name, self.experiment.hash_version)
            viewer_id = unit_id
        a = self._assigner(viewer_id)
        when = datetime.fromtimestamp(now if now is not None else time.time(), UTC)
        if a.in_experiment and not self.experiment.is_running(when):
            return Assignment(None, a.bucket, False, -1, a.experiment, a.hash_version)
        return a

    def arm_names(self) -> tuple[str, ...]:
        return self.experiment.arm_names

    def arm_settings(self, arm: str) -> ArmSettings:
        """The arm's variant and budget overrides (``UnknownArmError`` for an arm the experiment lacks)."""
        return ArmSettings.of(self.name, self.experiment.arm(arm))

    def _log(
        self, kind: Literal["exposure", "response"], viewer_id: str, arm: str, request_id: str | None,
        ts: float | None, simulated: bool, fields: dict[str, Any],
    ) -> Future[Ack]:  # fmt: skip
        rid = request_id or uuid.uuid4().hex
        return self.writer.submit(
            {
                "kind": kind,
                "event_id": _event_id("exp" if kind == "exposure" else "resp", self.name, rid),
                "experiment": self.name,
                "viewer_id": viewer_id,
                "arm": arm,
                "request_id": rid,
                **fields,
                "ts": time.time() if ts is None else ts,
                "simulated": simulated,
            }
        )

    def on_exposure(
        self, viewer_id: str, assignment: Assignment, *, request_id: str | None = None, ts: float | None = None,
        simulated: bool = False, unit_id: str | None = None,
    ) -> Future[Ack] | None:  # fmt: skip
        if not assignment.in_experiment or assignment.arm is None:
            return None
        fields = {"bucket": assignment.bucket, "hash_version": assignment.hash_version}
        if self.experiment.unit != "viewer":
            fields["unit_id"] = unit_id
        return self._log("exposure", viewer_id, assignment.arm, request_id, ts, simulated, fields)

    def on_response(
        self, viewer_id: str, arm: str | None, record: ResponseRecord, *, request_id: str | None = None,
        ts: float | None = None, simulated: bool = False,
    ) -> Future[Ack] | None:  # fmt: skip
        if arm is None:
            return None
        return self._log("response", viewer_id, arm, request_id, ts, simulated, record.fields())

    def _own(self, outcome: OutcomeIn | dict[str, Any]) -> OutcomeIn:
        body = _outcome(outcome)
        if body.experiment != self.name:
            raise UnknownExperimentError(
                f"experiment: {body.experiment!r} is not handled by hooks of {self.name!r}"
            )
        check_declared(body, {o.name: o.model_dump() for o in self.experiment.outcomes}, self.name)
        return body

    def on_outcome(self, outcome: OutcomeIn | dict[str, Any]) -> Future[Ack]:
        return self.writer.submit(self._own(outcome).to_event())

    async def aon_outcome(self, outcome: OutcomeIn | dict[str, Any]) -> Ack:
        """Async ``on_outcome``: returns the ack once the outcome is committed."""
        return await self.writer.asubmit(self._own(outcome).to_event())

    def summary(self, max_age_s: float = 5.0, view: SummaryView = "compact") -> dict[str, Any]:
        """The live summary (``compact``: ``compact_summary``; ``full``: the whole analysis), computed in the
        summary worker's process and cached ``max_age_s``; blocks this thread (not the interpreter) until it is
        ready. ``SummaryError`` on failure."""
        return self.summaries.submit(self.name, max_age_s, view).result()

    async def asummary(self, max_age_s: float = 5.0, view: SummaryView = "compact") -> dict[str, Any]:
        """Async ``summary``: the event loop awaits the worker's future and does none of the analysis."""
        return await asyncio.wrap_future(self.summaries.submit(self.name, max_age_s, view))

    def close(self) -> None:
        if self._own_summaries:
            self.summaries.close()
        if self._own_writer:
            self.writer.close()
        if self._own_store:
            self.store.close()


class HookSet(dict[str, ExperimentHooksProtocol]):
    """The hooks of several experiments (by name) and the write path and summary worker they share: ``health()``
    reports the write path, ``close()`` closes every hook, then the summary worker, then the shared writer (it
    flushes into the store), then the store."""

    def __init__(
        self, hooks: Iterable[ExperimentHooksProtocol], *, writer: BatchWriter | None = None,
        store: EventStore | None = None, summaries: SummaryWorker | None = None,
    ):  # fmt: skip
        super().__init__((h.name, h) for h in hooks)
        self.writer = writer
        self.store = store
        self.summaries = summaries

    def health(self) -> dict[str, Any] | None:
        """State of the shared write path (degraded store, spool use, replay counts); None without a writer."""
        return None if self.writer is None else self.writer.state()

    def close(self) -> None:
        for h in self.values():
            h.close()
        for part in (self.summaries, self.writer, self.store):
            if part is None:
                continue
            try:
                part.close()
            except Exception as exc:
                log.warning("closing %s failed: %s", type(part).__name__, exc)


def open_hooks(
    experiments: str | Path | Iterable[Experiment], store: EventStore | str | Path, **writer_kwargs: Any
) -> HookSet:
    """Hooks for every experiment of a YAML file (or list), sharing one store, one batching writer and one
    summary worker (one child process computes the live summaries of all of them)."""
    exps = (
        list(load_experiments(experiments).values())
        if isinstance(experiments, str | Path)
        else list(experiments)
    )
    st = store if isinstance(store, EventStore) else EventStore(store)
    writer = BatchWriter(st, **writer_kwargs)
    summaries = SummaryWorker(st, compute_summary, views={"full": compute_full_summary})
    return HookSet(
        (ExperimentHooks(e, st, writer=writer, summaries=summaries) for e in exps),
        writer=writer, store=st, summaries=summaries,
    )  # fmt: skip


def _route(hooks: Mapping[str, ExperimentHooksProtocol], payload: OutcomeIn | dict[str, Any]) -> tuple[
    ExperimentHooksProtocol, OutcomeIn
]:  # fmt: skip
    body = _outcome(payload)
    h = hooks.get(body.experiment)
    if h is None:
        raise UnknownExperimentError(
            f"experiment: unknown experiment {body.experiment!r} (known: {sorted(hooks)})"
        )
    return h, body


def record_outcome(
    hooks: Mapping[str, ExperimentHooksProtocol], payload: OutcomeIn | dict[str, Any]
) -> Future[Ack]:
    """Route a ``POST /v1/ab/outcomes`` body to its experiment's hooks (``UnknownExperimentError`` → 404)."""
    h, body = _route(hooks, payload)
    return h.on_outcome(body)


async def arecord_outcome(hooks: Mapping[str, ExperimentHooksProtocol], payload: OutcomeIn | dict[str, Any]) -> Ack:
    """Async ``record_outcome`` for the FastAPI handler: ``ack = await arecord_outcome(hooks, body)``."""
    h, body = _route(hooks, payload)
    if isinstance(h, ExperimentHooks):
        return await h.aon_outcome(body)
    return await asyncio.wrap_future(h.on_outcome(body))


_cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
_cache_lock = threading.Lock()


def compute_summary(store: EventStore, name: str) -> dict[str, Any]:
    """The live summary of ``name``, computed now (what the summary worker runs); unknown → UnknownExperimentError."""
    return compact_summary(analyze(store, name).summary)


def compute_full_summary(store: EventStore, name: str) -> dict[str, Any]:
    """The whole analysis of ``name`` as JSON-ready data (``GET /v1/ab/experiments/{name}?view=full``: the
    Experiment tab's tables and over-time plot, ``livethink ab analyze``'s report)."""
    return analyze(store, name).summary


def experiment_summary(store: EventStore, name: str, *, max_age_s: float = 5.0) -> dict[str, Any]:
    """Live summary of ``name`` computed in this thread (cached ``max_age_s``); unknown → UnknownExperimentError.
    The server's hooks compute it in a worker process instead (``ExperimentHooks.summary``)."""
    key = (store.url, name)
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and now - hit[0] <= max_age_s:
            return hit[1]
    out = compute_summary(store, name)
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
            "latency_p50_ms": a["latency_ms"]["p50"],  # answered replies only
            "latency_p99_ms": a["latency_ms"]["p99"],
            "first_reply_p50_ms": a["first_reply_ms"]["p50"],
            "requests": a["responses"],
            "goodput": a["goodput"],
            "goodput_ci": a["goodput_ci"],
            "refusal_rate": a["refusal_rate"],
            "fallback_rate": a["fallback_rate"],
            "error_rate": a["error_rate"],
            "deadline_met_rate": a["deadline_met_rate"],
            "correct_rate": a["correct_rate"],
        }
        for name, a in full["arms"].items()
    }
    live = full["regime"]["live"]
    always_valid = live != "fixed-horizon"

    def test(c: dict[str, Any]) -> dict[str, Any]:
        """One regime: always-valid lift interval beside the always-valid p (sequential), else fixed-horizon."""
        seq = c.get("sequential") or {}
        ci = seq.get("lift_ci") if always_valid else c["lift_ci"]
        return {"arm": c["arm"], "control": c["control"], "lift": c["lift"], "lift_ci": ci,
                "p_value": c["decision_p_value"], "decision_p_value": c["decision_p_value"],
                "significant": c["significant"], "regime": live}  # fmt: skip

    tests = [test(c) for c in full["comparisons"] if c["metric"] == primary]
    return {
        "experiment": full["experiment"],
        "generated_at": full["generated_at"],
        "primary_metric": primary,
        "control": full["control"],
        "simulated": full["data"]["simulated"],
        "viewers": full["data"]["viewers"],
        "arms": arms,
        "tests": tests,
        "regime": live,
        "srm": {k: full["srm"][k] for k in ("p_value", "flagged", "observed", "expected")},
        "phase": full["phase"],
        "phases": [{k: p[k] for k in ("index", "start", "weights", "viewers")} | {"srm_p_value": p["srm"]["p_value"],
                   "srm_flagged": p["srm"]["flagged"]} for p in full["phases"]],  # fmt: skip
        "guardrails": [g for g in full["guardrails"] if g["status"] == "breached"],
        "verdict": full["verdict"],
    }


__all__ = [
    "SIMULATED_HEADER",
    "ArmSettings",
    "Assignment",
    "ExperimentHooks",
    "ExperimentHooksProtocol",
    "HookSet",
    "OutcomeIn",
    "ResponseRecord",
    "arecord_outcome",
    "compact_summary",
    "compute_full_summary",
    "compute_summary",
    "experiment_summary",
    "open_hooks",
    "record_outcome",
]
