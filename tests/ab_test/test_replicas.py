"""Two ``livethink serve`` replicas behind HAProxy sharing one A/B store (SQLite file or PostgreSQL server):
kill -9 of one mid-load loses no acknowledged exposure or outcome, the other keeps serving, the killed one
rejoins (replaying its spool); viewers keep their arm whichever replica answers; both report the same summary.

The replicas run the tiny embedded student on the transformers engine: it starts in seconds, where a vLLM
engine takes 25-40 s per replica on this CPU, and what is under test here is the shared store, not the engine.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import time
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from livethink.replicas import ReplicaSet
from tests.support.serve import LIVE_BODY, tiny_student_dir

EXPERIMENT = """
name: replicas_ab
arms:
  - {name: think, weight: 0.5, variant: rft, budget: {thinking_budget: 16}}
  - {name: nothink, weight: 0.5, variant: rft, budget: {thinking_budget: 0}}
min_viewers_per_arm: 2
"""


def _exposure_id(experiment: str, request_id: str) -> str:
    """The id ``livethink.ab_test.hooks`` gives the exposure of a request (checked against the store below)."""
    return "exp-" + hashlib.blake2b(f"{experiment}\0{request_id}".encode(), digest_size=12).hexdigest()


class Reply(NamedTuple):
    """A reply the client got: when its request was sent and answered (monotonic s), and who answered it."""

    sent: float
    received: float
    viewer: str
    arm: str
    request_id: str
    replica: str


class Load(threading.Thread):
    """A client through the front: replies for 60 viewers in turn, an outcome after every third reply."""

    def __init__(self, url: str, name: str):
        super().__init__(daemon=True)
        self.url, self.name = url, name
        self.stop = threading.Event()
        self.replies: list[Reply] = []
        self.outcomes: list[str] = []  # acknowledged outcome ids
        self.failures: collections.Counter[str] = collections.Counter()  # unacknowledged requests, by cause

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            i = 0
            while not self.stop.is_set():
                viewer = f"viewer-{i % 60}"
                body = {**LIVE_BODY, "viewer_id": viewer, "deadline_ms": 5000}
                try:
                    sent = time.monotonic()
                    r = client.post(f"{self.url}/v1/livestream/reply", json=body)
                    if r.status_code == 200:
                        d = r.json()
                        replica = r.headers.get("x-livethink-replica", "?")
                        self.replies.append(
                            Reply(sent, time.monotonic(), viewer, d["arm"], d["request_id"], replica)
                        )
                    else:
                        self.failures[f"reply {r.status_code}"] += 1
                    if i % 3 == 0:
                        oid = f"{self.name}-o{i}"
                        o = client.post(
                            f"{self.url}/v1/ab/outcomes",
                            json={
                                "event_id": oid,
                                "viewer_id": viewer,
                                "experiment": "replicas_ab",
                                "type": "click",
                            },
                        )
                        if o.status_code == 200 and o.json()["status"] in ("stored", "duplicate", "spooled"):
                            self.outcomes.append(oid)
                        else:
                            self.failures[f"outcome {o.status_code}"] += 1
                except httpx.HTTPError as exc:  # e.g. a request on the killed replica: not acknowledged
                    self.failures[type(exc).__name__] += 1
                i += 1


def _wait(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow
@pytest.mark.timing  # servers under load: with the engines (tests/conftest.py)
def test_kill_9_of_a_replica_mid_load(store_url: str, tmp_path: Path) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    store = store_url if "://" in store_url else f"sqlite:///{store_url}"
    config = {
        "models": {"rft": {"path": str(tiny_student_dir())}},
        "default_model": "rft",
        "engine": {"kind": "transformers", "max_model_len": 1024, "warmup": False},
        "budget": {"max_tokens": 24, "reply_reserve": 8, "min_reply_tokens": 4, "max_thinking_tokens": 16},
        "auth": {"api_key_env": None, "admin_key_env": None},
        "experiment": {"file": str(exp)},
    }
    t0 = time.monotonic()
    with ReplicaSet(config, 2, tmp_path / "set", store=store, env={"OMP_NUM_THREADS": "1"}) as rs:
        started = time.monotonic() - t0
        loads = [Load(rs.url, f"c{k}") for k in range(3)]
        for load in loads:
            load.start()
        try:
            assert _wait(lambda: sum(len(x.replies) for x in loads) >= 15, 120)
            rs.kill(0)  # mid-load: requests are in flight on it
            killed_at = time.monotonic()
            n = sum(len(x.replies) for x in loads)
            assert _wait(lambda: sum(len(x.replies) for x in loads) >= n + 10, 60), (
                "the survivor stopped serving"
            )
            restart_began = time.monotonic()
            restart_s = rs.restart(0)
            restarted_at = time.monotonic()
            assert _wait(lambda: any(r.sent > restarted_at and r.replica == "r0" for x in loads for r in x.replies),
                         60), "the restarted replica got no traffic"  # fmt: skip
        finally:
            for load in loads:
                load.stop.set()
            for load in loads:
                load.join(60)
        replies = [r for x in loads for r in x.replies]
        outcomes = [o for x in loads for o in x.outcomes]
        # sent after the kill and answered before the restart began: only the survivor can have served them
        # (a reply r0 wrote just before the kill may reach the client after it; the restarted r0 serves again)
        after_kill = [r for r in replies if r.sent > killed_at and r.received < restart_began]
        assert after_kill and {r.replica for r in after_kill} == {"r1"}
        assert {r.replica for r in replies} == {"r0", "r1"}
        arms: dict[str, set[str]] = {}
        for r in replies:
            arms.setdefault(r.viewer, set()).add(r.arm)
        assert all(len(a) == 1 for a in arms.values()), "a viewer changed arm between replicas"
        assert {a for s in arms.values() for a in s} == {"think", "nothink"}
        time.sleep(1.5)  # the writers commit within milliseconds; then both read the same store
        summaries = [httpx.get(f"{rs.replica_url(i)}/v1/ab/experiments/replicas_ab", timeout=30).json()
                     for i in range(2)]  # fmt: skip
        for s in summaries:
            s.pop("generated_at")
        assert summaries[0] == summaries[1]
        health = httpx.get(f"{rs.replica_url(0)}/health", timeout=10).json()
        # the A/B write path is healthy again; a restarted replica that refused requests under this 2-core
        # contention may still report those refusals in its window (/health's other reason), which is not this test's
        assert health["ab"]["degraded"] is False, health
        assert health["status"] == "ok" or "A/B event store" not in health["reason"], health
        assert "livethink_ab_spool_full 0.0" in httpx.get(f"{rs.replica_url(0)}/metrics", timeout=10).text

    from livethink.ab_test.store import EventStore

    with EventStore(store) as st:
        exposures = [_exposure_id("replicas_ab", r.request_id) for r in replies]
        missing = (set(exposures) | set(outcomes)) - st.present_ids([*exposures, *outcomes])
        assert not missing, f"{len(missing)} acknowledged events lost, e.g. {sorted(missing)[:5]}"
        stored_outcomes = st.fetch("replicas_ab", "outcome", ["viewer_id"])
        assert len(stored_outcomes) >= len(set(outcomes))
    assert not list((tmp_path / "set" / "spool").rglob("seg-*.jsonl")), "a spool was left unreplayed"
    failures = sum((x.failures for x in loads), collections.Counter())
    print(
        f"set up in {started:.1f} s, restart in {restart_s:.1f} s; replies {len(replies)} ({len(after_kill)} "
        f"while r0 was down), outcomes {len(outcomes)}, unacknowledged requests {dict(failures)}"
    )


def test_a_front_port_taken_while_the_replicas_start_is_chosen_again(tmp_path: Path, monkeypatch) -> None:
    """The front port is chosen before the replicas start; a process that binds it meanwhile (an engine's own
    socket) makes HAProxy exit with "Address already in use". A chosen port is chosen again; a port the user asked
    for is refused by name."""
    import socket

    import livethink.replicas as replicas

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    calls = iter(range(1_000))
    real_free_port = replicas.free_port
    monkeypatch.setattr(replicas, "free_port", lambda: taken if next(calls) == 1 else real_free_port())
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    config = {
        "models": {"rft": {"path": str(tiny_student_dir())}},
        "default_model": "rft",
        "engine": {"kind": "transformers", "max_model_len": 1024, "warmup": False},
        "auth": {"api_key_env": None, "admin_key_env": None},
        "experiment": {"file": str(exp)},
    }
    store = f"sqlite:///{tmp_path / 'ab.db'}"
    try:
        with ReplicaSet(config, 1, tmp_path / "set", store=store, env={"OMP_NUM_THREADS": "1"}) as rs:
            assert rs.front_port != taken
            assert httpx.get(rs.url + "/health", timeout=10).status_code == 200
        with pytest.raises(RuntimeError, match=rf"haproxy did not come up: port {taken} is in use"):
            ReplicaSet(config, 1, tmp_path / "asked", store=store, port=taken, env={"OMP_NUM_THREADS": "1"})
    finally:
        held.close()
