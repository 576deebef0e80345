"""Two ``livethink serve`` replicas on vLLM behind HAProxy, under open-loop load: ``kill -9`` of one replica's
engine core (the process is up but cannot serve). HAProxy takes the replica out (its ``/health`` answers 503),
the survivor answers what is sent meanwhile (a 503 of the dead replica is retried there), and the replica
rejoins once its engine is back.

Judged by acknowledgements, not by timing: every reply and outcome the set acknowledged (before the kill, during
the outage and after) is in the A/B store afterwards; no request is dropped or answered with a server error; the
replica leaves and comes back (HAProxy's log) and acknowledges replies again. Each step waits for the event it
needs; the waits' limits only bound a failing run."""

from __future__ import annotations

import hashlib
import importlib.util
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from livethink.ab_test.store import EventStore
from livethink.replicas import ReplicaSet
from tests.support.serve import LIVE_BODY, engine_core, tiny_student_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.timeout(480),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed"),
]
DEADLINE_MS = 1000
RATE = 2.0  # requests/s, open loop: what one replica of the capped tiny student serves on 2 cores while the
# other restarts its engine
EXPERIMENT_NAME = "engine_kill_ab"
EXPERIMENT = f"""
name: {EXPERIMENT_NAME}
arms:
  - {{name: a, weight: 0.5, variant: rft}}
  - {{name: b, weight: 0.5, variant: rft}}
"""


class Answer(NamedTuple):
    """One request through the front: its number, its phase when sent, what came back and from which replica."""

    i: int
    phase: str
    status: int | None
    replica: str | None
    request_id: str | None


def _exposure_id(request_id: str) -> str:
    """The id ``livethink.ab_test.hooks`` gives the exposure of a request (checked against the store below)."""
    return "exp-" + hashlib.blake2b(f"{EXPERIMENT_NAME}\0{request_id}".encode(), digest_size=12).hexdigest()


class OpenLoop(threading.Thread):
    """Replies at a fixed rate through the front, each in its own thread (arrivals never wait for answers), and an
    outcome after every third one; ``phase`` labels what is sent from now on."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.phase = "before"
        self.answers: list[Answer] = []
        self.outcomes: list[tuple[str, str]] = []  # (phase, event id) of every acknowledged outcome
        self._lock = threading.Lock()

    def acknowledged(self, phase: str | None = None, replica: str | None = None) -> list[Answer]:
        with self._lock:
            return [a for a in self.answers if a.status == 200 and phase in (None, a.phase)
                    and replica in (None, a.replica)]  # fmt: skip

    def _one(self, client: httpx.Client, i: int, phase: str) -> None:
        viewer = f"v{i % 50}"
        try:
            r = client.post(f"{self.url}/v1/livestream/reply", json={**LIVE_BODY, "viewer_id": viewer, "deadline_ms": DEADLINE_MS})
            rid = r.json().get("request_id") if r.status_code == 200 else None
            answer = Answer(i, phase, r.status_code, r.headers.get("x-livethink-replica"), rid)
            outcome = None
            if i % 3 == 0:
                oid = f"o{i}"
                o = client.post(f"{self.url}/v1/ab/outcomes", json={
                    "event_id": oid, "viewer_id": viewer, "experiment": EXPERIMENT_NAME, "type": "click"})
                if o.status_code == 200 and o.json()["status"] in ("stored", "duplicate", "spooled"):
                    outcome = (phase, oid)
        except httpx.HTTPError:
            answer, outcome = Answer(i, phase, None, None, None), None
        with self._lock:
            self.answers.append(answer)
            if outcome is not None:
                self.outcomes.append(outcome)

    def run(self) -> None:
        threads = []
        with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=100)) as client:
            t0, i = time.monotonic(), 0
            while not self.stop.is_set():
                self.stop.wait(max(0.0, t0 + i / RATE - time.monotonic()))
                th = threading.Thread(target=self._one, args=(client, i, self.phase), daemon=True)
                th.start()
                threads.append(th)
                i += 1
            for th in threads:
                th.join(60)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _until(what: str, predicate: Callable[[], bool], limit_s: float) -> None:
    """Wait for an event; the limit only stops a run that went wrong."""
    end = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < end, f"not within {limit_s:.0f} s: {what}"
        time.sleep(0.1)


def test_engine_kill_in_one_of_two_replicas(tmp_path: Path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    config = {
        "models": {"rft": {"path": str(tiny_student_dir())}},
        "default_model": "rft",
        "engine": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1, "max_concurrency": 8,
                   "restart_backoff_s": 0.5},
        "budget": {"max_tokens": 32, "max_thinking_tokens": 16, "reply_reserve": 16, "min_reply_tokens": 4},
        "auth": {"api_key_env": None, "admin_key_env": None},
        "server": {"log_level": "warning"},
        "experiment": {"file": str(exp)},
    }  # fmt: skip
    store = f"sqlite:///{tmp_path / 'ab.db'}"
    with ReplicaSet(config, 2, tmp_path / "set", store=store, env={"VLLM_CPU_KVCACHE_SPACE": "1"}) as rs:
        r0 = rs.replica_url(0)
        load = OpenLoop(rs.url)
        load.start()
        try:
            _until("both replicas acknowledge replies",
                   lambda: load.acknowledged(replica="r0") and load.acknowledged(replica="r1"), 120)
            load.phase = "outage"
            engine_core(rs.replicas[0].proc.pid).kill()
            _until("replica 0 reports its engine down", lambda: not _healthy(r0), 30)
            _until("replica 0's engine is back", lambda: _healthy(r0), 120)
            load.phase = "after"
            _until("replica 0 acknowledges replies again", lambda: load.acknowledged("after", "r0"), 60)
        finally:
            load.stop.set()
            load.join(90)
        log = (tmp_path / "set" / "haproxy.log").read_text()

    answers = load.answers
    statuses = sorted({a.status for a in answers}, key=str)
    acked = load.acknowledged()
    per_phase = {p: (len(load.acknowledged(p)), sum(a.phase == p for a in answers)) for p in ("before", "outage", "after")}
    print(f"acknowledged of sent, by phase: {per_phase}; outcomes acknowledged {len(load.outcomes)}; "
          f"replicas during the outage {sorted({a.replica for a in load.acknowledged('outage')}, key=str)}; "
          f"statuses {statuses}")
    assert None not in statuses and not [s for s in statuses if s >= 500], statuses  # none dropped, no server error
    assert load.acknowledged("outage"), "nothing sent during the outage was acknowledged"
    assert re.search(r"r0 is DOWN", log), log[-2000:]  # HAProxy took the replica out ...
    assert re.search(r"r0 is UP", log), log[-2000:]  # ... and back in once its engine was up

    ids = [_exposure_id(a.request_id) for a in acked] + [oid for _, oid in load.outcomes]
    with EventStore(store) as st:
        missing = set(ids) - st.present_ids(ids)
    before = {_exposure_id(a.request_id) for a in load.acknowledged("before")} | {
        oid for phase, oid in load.outcomes if phase == "before"}
    assert not missing & before, f"{len(missing & before)} events acknowledged before the kill are not in the store"
    assert not missing, f"{len(missing)} acknowledged events are not in the store, e.g. {sorted(missing)[:5]}"
