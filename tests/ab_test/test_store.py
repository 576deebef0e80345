"""Event store on a real SQLite file and a real PostgreSQL server: acks, idempotency, conflicts, validation,
group commit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from livethink.ab_test.errors import (
    EventConflictError,
    EventValidationError,
    UnknownExperimentError,
)
from livethink.ab_test.events import validate_outcome
from livethink.ab_test.experiment import parse_experiment
from livethink.ab_test.store import EventStore, normalize_url
from livethink.ab_test.writer import BatchWriter

EXP = parse_experiment({"name": "e1", "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}]})


@pytest.fixture
def store(store_url: str):
    s = EventStore(store_url)
    s.register_experiment(EXP)
    yield s
    s.close()


def _exposure(i: int, arm: str = "A", **kw: object) -> dict:
    return {"kind": "exposure", "event_id": f"x{i}", "experiment": "e1", "viewer_id": f"v{i}", "arm": arm,
            "ts": time.time(), **kw}  # fmt: skip


def _outcome(i: int, **kw: object) -> dict:
    return {"kind": "outcome", "event_id": f"o{i}", "experiment": "e1", "viewer_id": f"v{i}", "type": "order",
            "gmv": 12.5, "ts": time.time(), **kw}  # fmt: skip


def test_sqlite_wal_and_durable_settings(tmp_path: Path) -> None:
    store = EventStore(tmp_path / "ab.db")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    assert normalize_url(tmp_path / "x.db").startswith("sqlite:////")
    assert normalize_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    store.close()


def test_append_ack_and_reopen(store: EventStore, store_url: str) -> None:
    acks = store.append([_exposure(i) for i in range(10)] + [_outcome(1)])
    assert [a.status for a in acks] == ["stored"] * 11
    store.close()
    again = EventStore(store_url)
    assert again.dialect == ("sqlite" if "://" not in store_url else "postgresql")
    assert again.count("e1") == 11
    assert again.experiment("e1") == EXP
    row = again.fetch("e1", "outcome", ["viewer_id", "outcome_type", "gmv"])
    assert row == [("v1", "order", 12.5)]
    again.close()


def test_duplicates_are_idempotent(store: EventStore) -> None:
    first = _exposure(1)
    store.append([first])
    acks = store.append([first, first, _exposure(2)])
    assert [a.status for a in acks] == ["duplicate", "duplicate", "stored"]
    retried = store.append([{**first, "ts": first["ts"] + 5}])  # a retry stamped later: same event
    assert retried[0].status == "duplicate"
    assert store.fetch("e1", "exposure", ["ts"])[0][0] == first["ts"]  # the first time is kept
    assert store.count("e1") == 2


def test_conflicting_id_writes_nothing(store: EventStore) -> None:
    store.append([_exposure(1, arm="A")])
    with pytest.raises(EventConflictError, match="x1"):
        store.append([_exposure(2), _exposure(1, arm="B")])
    assert store.present_ids(["x1", "x2"]) == {"x1"}  # batch rolled back
    acks = store.append([_exposure(2), _exposure(1, arm="B")], on_conflict="report")
    assert [a.status for a in acks] == ["stored", "conflict"]
    with pytest.raises(EventConflictError):  # same id twice in one batch with different content
        store.append([_exposure(5, arm="A"), _exposure(5, arm="B")])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (_outcome(9, gmv=-1.0), r"events\[1\]\.gmv"),
        (_outcome(9, type="click", gmv=5.0), "only orders carry GMV"),
        (_outcome(9, type="refund"), r"events\[1\]\.type"),
        (_exposure(9, arm="C"), r"events\[1\]\.arm: unknown arm 'C'"),
        (_exposure(9, ts=time.time() + 3600), r"events\[1\]\.ts: .* in the future"),
        (_exposure(9, ts=12345.0), r"events\[1\]\.ts: .* before 2000"),
        (_exposure(9, event_id="has space"), r"events\[1\]\.event_id"),
        (_exposure(9, viewer_id=""), r"events\[1\]\.viewer_id"),
        ({**_exposure(9), "kind": "bogus"}, r"events\[1\]\.kind"),
        ({k: v for k, v in _outcome(9).items() if k != "ts"}, r"events\[1\]\.ts: Field required"),
        (
            {
                "kind": "response",
                **{k: v for k, v in _exposure(9).items() if k != "kind"},
                "latency_ms": float("nan"),
            },
            r"events\[1\]\.latency_ms",
        ),
        ("not a dict", r"events\[1\]\.event: expected a mapping"),
    ],
)
def test_bad_events_rejected_and_nothing_written(store: EventStore, bad: object, message: str) -> None:
    with pytest.raises(EventValidationError, match=message):
        store.append([_exposure(1), bad])  # type: ignore[list-item]
    assert store.count("e1") == 0


def test_unknown_experiment(store: EventStore) -> None:
    with pytest.raises(UnknownExperimentError, match="experiment: 'nope'"):
        store.append([{**_exposure(1), "experiment": "nope"}])
    with pytest.raises(UnknownExperimentError, match="nope"):
        store.experiment("nope")


def test_out_of_order_events_accepted_and_read_in_time_order(store: EventStore) -> None:
    now = time.time()
    store.append([_exposure(1, ts=now - 10), _exposure(2, ts=now - 100), _exposure(3, ts=now - 50)])
    assert [r[0] for r in store.fetch("e1", "exposure", ["viewer_id"])] == ["v2", "v3", "v1"]


def test_experiment_versions(store: EventStore) -> None:
    changed = parse_experiment(
        {"name": "e1", "arms": [{"name": "A", "weight": 0.6}, {"name": "B", "weight": 0.4}]}
    )
    assert store.register_experiment(changed) is True
    assert store.register_experiment(changed) is False
    assert [e.weights for e in store.experiment_history("e1")] == [(0.5, 0.5), (0.6, 0.4)]
    assert store.experiment("e1").weights == (0.6, 0.4)


def test_outcome_payload_validation() -> None:
    ok = validate_outcome(
        {"event_id": "a1", "viewer_id": "v", "experiment": "e1", "type": "order", "gmv": 10}
    )
    assert ok.gmv == 10.0 and ok.to_event(now=time.time()).kind == "outcome"
    for payload, field in [
        ({"event_id": "a1", "viewer_id": "v", "experiment": "e1", "type": "order", "gmv": -3}, "gmv"),
        ({"event_id": "a1", "viewer_id": "v", "experiment": "e1", "type": "order", "gmv": "3"}, "gmv"),
        ({"event_id": "a1", "viewer_id": "v", "experiment": "e1", "type": "Buy now"}, "type"),
        ({"event_id": "a1", "viewer_id": "v", "experiment": "e1", "type": "correct", "value": 1.0}, "request_id"),
        ({"viewer_id": "v", "experiment": "e1", "type": "click"}, "event_id"),
        ({"event_id": "a1", "viewer_id": "v", "experiment": "e1", "type": "click", "extra": 1}, "extra"),
    ]:
        with pytest.raises(EventValidationError, match=f"^{field}:"):
            validate_outcome(payload)


def test_batch_writer_acks_after_commit(store: EventStore, store_url: str) -> None:
    with BatchWriter(store, max_batch=64) as w:
        events = [_exposure(i) for i in range(500)]
        futures = [w.submit(e) for e in events]
        acks = [f.result(timeout=30) for f in futures]
        assert {a.status for a in acks} == {"stored"}
        with EventStore(store_url) as other:  # an acked event is visible to an independent connection
            assert other.count("e1") == 500
        dup = w.submit(events[3]).result(timeout=30)
        assert dup.status == "duplicate"
        conflict = w.submit({**events[4], "arm": "B"})
        with pytest.raises(EventConflictError):
            conflict.result(timeout=30)
        with pytest.raises(EventValidationError, match="gmv"):
            w.submit(_outcome(1, gmv=-5.0))
        w.flush(timeout=30)
        assert w.batches < 500  # grouped
    with pytest.raises(RuntimeError, match="closed"):
        w.submit(_exposure(999))


def test_batch_writer_asubmit(store: EventStore) -> None:
    import asyncio

    async def run(w: BatchWriter) -> list:
        events = [_exposure(i) for i in range(200)]
        acks = await asyncio.gather(*(w.asubmit(e) for e in events))
        dup = await w.asubmit(events[0])
        with pytest.raises(EventConflictError):
            await w.asubmit({**events[1], "arm": "B"})
        return [*acks, dup]

    with BatchWriter(store) as w:
        acks = asyncio.run(run(w))
    assert [a.status for a in acks] == ["stored"] * 200 + ["duplicate"]
    assert store.count("e1") == 200


def test_a_new_sqlite_store_waits_for_a_writer_instead_of_failing_at_the_wal_switch(tmp_path):
    """Replicas opening one new store together: while another connection holds a write lock in rollback mode,
    SQLite refuses the switch to WAL at once ("database is locked", no busy wait). The store waits for the lock
    instead of failing the replica's start; a lock held past the busy timeout still raises."""
    import sqlite3
    import threading

    from sqlalchemy.exc import OperationalError

    path = tmp_path / "ab.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE other_writer (x)")
    with pytest.raises(OperationalError, match="locked"):
        EventStore(path, busy_timeout_s=0.2)
    released = threading.Timer(0.5, lambda: other.execute("COMMIT"))
    released.start()
    t0 = time.monotonic()
    with EventStore(path, busy_timeout_s=10) as st:
        waited = time.monotonic() - t0
        assert st.engine.connect().exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    released.join()
    other.close()
    assert waited > 0.4  # it waited for the writer
