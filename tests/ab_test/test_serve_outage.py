"""The server during an A/B store outage (a real PostgreSQL stopped and restarted): replies keep coming, outcomes
are acknowledged from the spool until it is full (then 503), /health and /metrics say so, and after the
restart every acknowledged event is in the store."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from livethink.ab_test.pg_cluster import LocalPostgres
from livethink.ab_test.store import EventStore
from livethink.serve.api.app import create_app
from tests.support.serve import LIVE_BODY, ServerThread, make_config, tiny_student_dir

EXPERIMENT = """
name: outage_ab
arms:
  - {name: a, weight: 0.5, variant: rft}
  - {name: b, weight: 0.5, variant: rft}
"""


def _metric(text: str, name: str) -> float:
    line = next(x for x in text.splitlines() if x.startswith(name + " "))
    return float(line.split()[1])


def test_store_outage_is_reported_and_nothing_acknowledged_is_lost(
    pg: LocalPostgres, pg_store_url: str, tmp_path: Path
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    config = make_config(
        tiny_student_dir(),
        **{
            "experiment": {
                "file": str(exp),
                "store": pg_store_url,
                "spool_dir": str(tmp_path / "spool"),
                "spool_max_mb": 0.01,
            },  # fmt: skip
            "budget.max_tokens": 16,
            "budget.min_reply_tokens": 4,
            "budget.reply_reserve": 8,
        },
    )
    server = ServerThread(create_app(config))
    http = httpx.Client(base_url=server.url, timeout=30)
    acked: list[str] = []
    try:
        assert http.get("/health").json()["ab"]["degraded"] is False
        pg.stop("fast")
        statuses = []
        for i in range(200):  # outcomes until the 10 KB spool is full
            r = http.post("/v1/ab/outcomes", json={"event_id": f"out-{i}", "viewer_id": f"v{i}",
                                                   "experiment": "outage_ab", "type": "click"})  # fmt: skip
            statuses.append(r.status_code)
            if r.status_code != 200:
                assert r.status_code == 503 and "spool full" in r.json()["error"]["message"], r.text
                break
            assert r.json()["status"] in ("spooled", "stored")
            acked.append(f"out-{i}")
        assert statuses[-1] == 503 and len(acked) > 10
        reply = http.post("/v1/livestream/reply", json={**LIVE_BODY, "viewer_id": "during-outage",
                                                        "deadline_ms": 5000})  # fmt: skip
        assert reply.status_code == 200 and reply.json()["reply"]  # answered all the same
        health = http.get("/health").json()
        assert health["status"] == "degraded" and health["ab"]["degraded"] and health["ab"]["spool"]["full"]
        metrics = http.get("/metrics").text
        assert _metric(metrics, "livethink_ab_spool_full") == 1.0
        assert _metric(metrics, "livethink_ab_store_degraded") == 1.0
        assert _metric(metrics, "livethink_ab_spooled_events_total") >= len(acked)
        assert _metric(metrics, "livethink_ab_spool_rejected_events_total") >= 1
        pg.start()
        end = time.monotonic() + 30
        while http.get("/health").json()["status"] != "ok":
            assert time.monotonic() < end, http.get("/health").json()
            time.sleep(0.2)
        assert _metric(http.get("/metrics").text, "livethink_ab_spool_full") == 0.0
        ok = http.post("/v1/ab/outcomes", json={"event_id": "after", "viewer_id": "v", "experiment": "outage_ab",
                                                "type": "click"})  # fmt: skip
        assert ok.status_code == 200 and ok.json()["status"] == "stored"
    finally:
        http.close()
        server.close()
    with EventStore(pg_store_url) as st:
        wanted = [*acked, "after"]
        assert st.present_ids(wanted) == set(wanted)
        assert len(st.fetch("outage_ab", "outcome", ["event_id"])) == len(wanted)
