"""Two ``livethink serve`` replicas on vLLM behind HAProxy, under open-loop load: ``kill -9`` of one replica's
engine core (the process is up but cannot serve). HAProxy takes the replica out (its ``/health`` answers 503),
the survivor answers what is sent meanwhile (a 503 of the dead replica is retried there), and the replica
rejoins once its engine is back."""

from __future__ import annotations

import importlib.util
import re
import threading
import time
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

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
EXPERIMENT = """
name: engine_kill_ab
arms:
  - {name: a, weight: 0.5, variant: rft}
  - {name: b, weight: 0.5, variant: rft}
"""


class Sent(NamedTuple):
    sent: float
    status: int | None
    client_ms: float
    replica: str | None


class OpenLoop(threading.Thread):
    """Requests at a fixed rate through the front, each in its own thread (arrivals never wait for replies)."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.stop = threading.Event()
        self.rows: list[Sent] = []
        self._lock = threading.Lock()

    def _one(self, client: httpx.Client, i: int) -> None:
        t = time.monotonic()
        try:
            r = client.post(f"{self.url}/v1/livestream/reply",
                            json={**LIVE_BODY, "viewer_id": f"v{i % 50}", "deadline_ms": DEADLINE_MS})
            row = Sent(t, r.status_code, (time.monotonic() - t) * 1000, r.headers.get("x-livethink-replica"))
        except httpx.HTTPError:
            row = Sent(t, None, (time.monotonic() - t) * 1000, None)
        with self._lock:
            self.rows.append(row)

    def run(self) -> None:
        threads = []
        with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=100)) as client:
            t0, i = time.monotonic(), 0
            while not self.stop.is_set():
                self.stop.wait(max(0.0, t0 + i / RATE - time.monotonic()))
                th = threading.Thread(target=self._one, args=(client, i), daemon=True)
                th.start()
                threads.append(th)
                i += 1
            for th in threads:
                th.join(30)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


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
            time.sleep(8)
            engine_core(rs.replicas[0].proc.pid).kill()
            killed = time.monotonic()
            down = None
            while time.monotonic() < killed + 10 and down is None:
                if not _healthy(r0):
                    down = time.monotonic() - killed
                time.sleep(0.1)
            back = None
            while time.monotonic() < killed + 90:
                if _healthy(r0):
                    back = time.monotonic()
                    break
                time.sleep(0.2)
            assert back is not None, "replica 0's engine did not come back within 90 s"
            rejoined = None
            while time.monotonic() < back + 20:
                with load._lock:
                    if any(r.replica == "r0" and r.sent > back for r in load.rows):
                        rejoined = time.monotonic() - back
                        break
                time.sleep(0.2)
        finally:
            load.stop.set()
            load.join(60)
        log = (tmp_path / "set" / "haproxy.log").read_text()
    rows = load.rows
    during = [r for r in rows if killed <= r.sent <= back]
    ok = [r for r in during if r.status == 200 and r.client_ms <= DEADLINE_MS]
    codes = sorted({r.status for r in rows}, key=str)
    print(f"/health of r0 non-200 {down:.2f} s after the engine kill, 200 again after {back - killed:.1f} s; "
          f"rejoined {rejoined} s later; during the outage {len(ok)} of {len(during)} answered in the deadline "
          f"(replicas {sorted({r.replica for r in during}, key=str)}); statuses over the run {codes}")
    assert down is not None and down <= 2.0
    assert during and len(ok) / len(during) >= 0.99, [r for r in during if r not in ok][:5]
    assert 500 not in codes and None not in codes
    assert re.search(r"r0 is DOWN", log), log[-2000:]  # HAProxy took the replica out ...
    assert re.search(r"r0 is UP", log) and rejoined is not None  # ... and back in once its engine was up
