"""What each viewer got: response statuses, answered-only latency, refusal/fallback rates, goodput with its
interval, correctness labels, declared outcome types and the migration of an older store (SQLite and PostgreSQL).
Every expected number is computed by hand."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sqlalchemy import Boolean, Column, Float, Integer, MetaData, String, Table, create_engine, inspect, text
from statsmodels.stats.proportion import proportion_confint

from livethink.ab_test.analysis import analyze, goodput_interval
from livethink.ab_test.errors import EventValidationError, ExperimentConfigError
from livethink.ab_test.events import parse_event
from livethink.ab_test.experiment import parse_experiment
from livethink.ab_test.store import EventStore
from livethink.ab_test.tables import event_row
from livethink.eval.goodput import wilson_interval

EXP = parse_experiment(
    {
        "name": "st1",
        "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}],
        "min_viewers_per_arm": 1,
        "guardrails": ["latency_ms", "refusal_rate", "fallback_rate", "goodput"],
        "outcomes": [
            {"name": "thumbs", "kind": "binary", "missing": "skip"},
            {"name": "reask", "kind": "binary", "window_s": 60, "higher_is_better": False},
            {"name": "satisfaction", "kind": "scale", "min": 1, "max": 5},
        ],
    }
)


def _ev(kind: str, eid: str, vid: str, ts: float, **kw: object) -> dict:
    return {"kind": kind, "event_id": eid, "experiment": "st1", "viewer_id": vid, "ts": ts, **kw}


# arm A, 8 requests: 4 answered (100..400 ms; correct 1,1,0,label; in the deadline but the 4th), 2 refused in a
# few ms, 1 fallback at the deadline, 1 error. Arm B: 2 answered (600, 800 ms), both correct and in time.
A_ROWS = [
    ("answered", 100.0, True, True), ("answered", 200.0, True, True), ("answered", 300.0, False, True),
    ("answered", 400.0, None, False), ("refused", 3.0, None, None), ("refused", 5.0, None, None),
    ("fallback", 1000.0, None, True), ("error", 50.0, None, None),
]  # fmt: skip
B_ROWS = [("answered", 600.0, True, True), ("answered", 800.0, True, True)]


@pytest.fixture
def store(store_url: str):
    s = EventStore(store_url)
    s.register_experiment(EXP)
    t0 = time.time() - 3600
    ev = []
    for arm, rows in (("A", A_ROWS), ("B", B_ROWS)):
        for i, (status, latency, correct, met) in enumerate(rows):
            vid = f"{arm}{i}"
            ev.append(_ev("exposure", f"x-{vid}", vid, t0 + i, arm=arm, request_id=f"q-{vid}"))
            ev.append(_ev("response", f"r-{vid}", vid, t0 + i + 1, arm=arm, request_id=f"q-{vid}", status=status,
                          latency_ms=latency, deadline_met=met, correct=correct,
                          first_reply_ms=latency / 2 if status == "answered" else None,
                          forced_end=i == 1 if status == "answered" else None))  # fmt: skip
    # a reviewer labels A3's reply correct later: it becomes good (answered, correct, but late: not good)
    ev.append(_ev("outcome", "lab-A3", "A3", t0 + 100, type="correct", value=1.0, request_id="q-A3"))
    ev.append(_ev("outcome", "lab-A2", "A2", t0 + 101, type="correct", value=1.0, request_id="q-A2"))  # fixes A2
    # declared outcomes: thumbs (A0 up, A1 down), a re-ask within 60 s (A0) and one after (A1), satisfaction
    ev += [
        _ev("outcome", "th-A0", "A0", t0 + 10, type="thumbs", value=1.0),
        _ev("outcome", "th-A1", "A1", t0 + 11, type="thumbs", value=0.0),
        _ev("outcome", "ra-A0", "A0", t0 + 30, type="reask"),
        _ev("outcome", "ra-A1", "A1", t0 + 1 + 90, type="reask"),
        _ev("outcome", "sa-B0", "B0", t0 + 20, type="satisfaction", value=5.0),
        _ev("outcome", "sa-B0b", "B0", t0 + 21, type="satisfaction", value=2.0),
        _ev("outcome", "sa-B1", "B1", t0 + 22, type="satisfaction", value=4.0),
    ]
    s.append(ev)
    yield s
    s.close()


def test_status_metrics_by_hand(store: EventStore) -> None:
    s = analyze(store, "st1").summary
    a, b = s["arms"]["A"], s["arms"]["B"]
    assert (a["responses"], a["answered"], a["fallback"], a["refused"], a["error"]) == (8, 4, 1, 2, 1)
    # latency over the 4 answered replies only: the refusals' 3-5 ms and the fallback's 1,000 ms are not in it
    assert a["latency_ms"]["n"] == 4 and a["latency_ms"]["p50"] == 250.0 and a["latency_ms"]["mean"] == 250.0
    assert a["first_reply_ms"]["p50"] == 125.0
    assert a["refusal_rate"] == 2 / 8 and a["fallback_rate"] == 1 / 8 and a["error_rate"] == 1 / 8
    assert a["deadline_met_rate"] == 4 / 5  # the 5 replies (4 answered + the fallback), one late
    assert a["correct_rate"] == 1.0  # A0, A1 judged; A2's judgement overruled by a label; A3 labelled
    assert a["forced_end_rate"] == 1 / 4
    # goodput: answered, correct, in the deadline, of the requests sent: A0, A1, A2 (A3 is late) = 3 of 8
    assert a["good"] == 3 and a["goodput"] == 3 / 8 and b["goodput"] == 1.0
    lo, hi = proportion_confint(3, 8, alpha=0.05, method="wilson")
    assert a["goodput_ci"] == pytest.approx([lo, hi], abs=1e-12)
    assert a["goodput_ci"] == pytest.approx(list(wilson_interval(3, 8)), abs=1e-9)  # eval's own definition
    goodput = next(c for c in s["comparisons"] if c["metric"] == "goodput")
    assert goodput["mean_control"] == 3 / 8 and goodput["mean_treatment"] == 1.0
    # declared outcomes: thumbs skips viewers without one; re-ask counts only within 60 s; satisfaction: mean
    assert a["thumbs"] == 0.5 and a["reask"] == 1 / 8 and b["satisfaction"] == pytest.approx((3.5 + 4.0) / 2)
    assert a["satisfaction"] is None and b["thumbs"] is None and b["reask"] == 0.0
    assert {g["metric"] for g in s["guardrails"]} == {"latency_ms", "refusal_rate", "fallback_rate", "goodput"}


def test_goodput_interval_edges() -> None:
    assert goodput_interval(0, 0) is None
    lo, hi = goodput_interval(0, 20)
    assert lo == pytest.approx(0.0, abs=1e-12) and 0 < hi < 0.2  # Wilson: no zero-width interval at 0


def test_undeclared_and_bad_outcomes_are_named(store: EventStore) -> None:
    t = time.time()
    cases = [
        (_ev("outcome", "u1", "A0", t, type="refund"), r"events\[0\]\.type: outcome type 'refund' is not declared "
                                                       r"by experiment 'st1' \(declared: click, .*satisfaction\)"),
        (_ev("outcome", "u2", "A0", t, type="satisfaction", value=7.0), r"events\[0\]\.value: .*\[1, 5\], got 7"),
        (_ev("outcome", "u3", "A0", t, type="satisfaction"), r"events\[0\]\.value"),
        (_ev("outcome", "u4", "A0", t, type="thumbs", value=0.5), r"events\[0\]\.value: 'thumbs' is binary"),
        (_ev("outcome", "u5", "A0", t, type="correct", value=1.0), r"events\[0\]\.request_id"),
        (_ev("outcome", "u6", "A0", t, type="correct", request_id="q"), r"events\[0\]\.value"),
        (_ev("outcome", "u7", "A0", t, type="Bad Type"), r"events\[0\]\.type"),
        (_ev("response", "u8", "A0", t, arm="A", latency_ms=1.0, status="late"), r"events\[0\]\.status"),
    ]
    for bad, message in cases:
        with pytest.raises(EventValidationError, match=message):
            store.append([bad])
    with pytest.raises(ExperimentConfigError, match="outcomes.0: a scale needs min < max"):
        parse_experiment({**EXP.to_dict(), "outcomes": [{"name": "nps", "kind": "scale"}]})
    with pytest.raises(ExperimentConfigError, match=r"outcomes: \['order'\] clash"):
        parse_experiment({**EXP.to_dict(), "outcomes": [{"name": "order", "kind": "count"}]})
    with pytest.raises(ExperimentConfigError, match="primary_metric: unknown viewer-level metric 'nps'"):
        parse_experiment({**EXP.to_dict(), "primary_metric": "nps"})
    assert parse_experiment({**EXP.to_dict(), "primary_metric": "satisfaction"}).primary_metric == "satisfaction"


def test_old_statuses_read_as_new_and_old_events_stay_duplicates() -> None:
    t = time.time()
    base = {"kind": "response", "event_id": "r1", "experiment": "st1", "viewer_id": "v", "ts": t, "arm": "A",
            "latency_ms": 5.0}  # fmt: skip
    assert parse_event({**base, "status": "ok"}).status == "answered"
    assert parse_event({**base, "status": "rejected"}).status == "refused"
    # a digest as an old store computed it: the new fields unset and the old spelling of the status
    new = event_row(parse_event({**base, "status": "refused"}), t)["digest"]
    assert new == event_row(parse_event({**base, "status": "rejected"}), t)["digest"]
    assert new != event_row(parse_event({**base, "status": "refused", "cut": True}), t)["digest"]


OLD_COLUMNS = (
    ("event_id", String(128)), ("experiment", String(64)), ("kind", String(16)), ("viewer_id", String(256)),
    ("arm", String(64)), ("ts", Float), ("received_at", Float), ("request_id", String(128)), ("bucket", Float),
    ("hash_version", Integer), ("latency_ms", Float), ("ttft_ms", Float), ("tokens", Integer),
    ("deadline_met", Boolean), ("correct", Boolean), ("helpful", Boolean), ("status", String(16)),
    ("outcome_type", String(16)), ("gmv", Float), ("simulated", Boolean), ("digest", String(32)),
)  # fmt: skip


def test_an_older_store_is_migrated(store_url: str) -> None:
    """A store written before the statuses (no value/first_reply_ms/... columns, status ok/rejected) opens, gains
    the columns, keeps its rows and analyses them with the new meaning."""
    url = store_url if "://" in store_url else f"sqlite:///{store_url}"
    engine = create_engine(url)
    old = Table("ab_events", MetaData(), *(Column(n, t, primary_key=n == "event_id") for n, t in OLD_COLUMNS))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS ab_events"))
        old.create(conn)
    with EventStore(store_url) as s:
        s.register_experiment(EXP)
        t0 = time.time() - 600
        exposures = [
            {"event_id": f"x{i}", "experiment": "st1", "kind": "exposure", "viewer_id": f"v{i}", "arm": "A",
             "ts": t0 + i, "received_at": t0, "simulated": False, "digest": "-"} for i in range(3)
        ]  # fmt: skip
        responses = [
            {"event_id": f"r{i}", "experiment": "st1", "kind": "response", "viewer_id": f"v{i}", "arm": "A",
             "ts": t0 + i, "received_at": t0, "latency_ms": lat, "status": st, "simulated": False, "digest": "-"}
            for i, (lat, st) in enumerate(((100.0, "ok"), (300.0, "ok"), (4.0, "rejected")))
        ]  # fmt: skip
        with engine.begin() as conn:
            conn.execute(old.insert(), exposures)
            conn.execute(old.insert(), responses)
    with EventStore(store_url) as s:  # reopening migrates
        cols = {c["name"] for c in inspect(engine).get_columns("ab_events")}
        assert {"value", "first_reply_ms", "first_sentence_ms", "forced_end", "cut"} <= cols
        a = analyze(s, "st1").summary["arms"]["A"]
        assert (a["answered"], a["refused"]) == (2, 1) and a["latency_ms"]["p50"] == 200.0
        s.append([_ev("response", "r9", "v9", time.time(), arm="A", latency_ms=1.0, status="refused", cut=False)])
        assert s.fetch("st1", "response", ["cut"])[-1] == (False,)
    engine.dispose()


def test_offline_simulator_writes_statuses(tmp_path) -> None:
    from livethink.ab_test.simulate import ArmProfile, SimulationConfig, simulate_offline

    cfg = SimulationConfig(arms={"A": ArmProfile(p_refused=0.3, p_fallback=0.1), "B": ArmProfile()})
    with EventStore(tmp_path / "sim.db") as s:
        out = simulate_offline(EXP, s, viewers=400, seed=3, config=cfg)
        a = analyze(s, "st1").summary["arms"]
        for arm in ("A", "B"):  # the simulator's own goodput count equals the log's, request for request
            assert a[arm]["good"] == out["goodput"][arm]
        assert 0.2 < a["A"]["refusal_rate"] < 0.4 and a["B"]["refusal_rate"] == 0.0
        assert np.isclose(a["A"]["latency_ms"]["p50"], a["B"]["latency_ms"]["p50"], rtol=0.25)


def test_one_regime_per_view_and_sequential_guardrails(store: EventStore) -> None:
    from livethink.ab_test.hooks import compact_summary

    full = analyze(store, "st1").summary
    assert full["regime"] == {"live": "always-valid (mSPRT)", "fixed_horizon": "end-of-test report only"}
    for g in full["guardrails"]:  # guardrails decide on the always-valid p: safe under a 10 s auto-refresh
        c = next(c for c in full["comparisons"] if c["metric"] == g["metric"] and c["arm"] == g["arm"])
        assert g["sequential"] and g["p_value"] == c["sequential"]["p_value"] == c["decision_p_value"]
    live = compact_summary(full)
    assert live["regime"] == "always-valid (mSPRT)"
    for t in live["tests"]:  # the live view pairs the always-valid interval with the always-valid p
        c = next(c for c in full["comparisons"] if c["metric"] == full["primary_metric"] and c["arm"] == t["arm"])
        assert t["p_value"] == c["sequential"]["p_value"] and t["lift_ci"] == c["sequential"].get("lift_ci")
    fixed = analyze(store, parse_experiment({**EXP.to_dict(), "sequential": {"enabled": False}})).summary
    assert compact_summary(fixed)["regime"] == "fixed-horizon" and not any(g["sequential"] for g in fixed["guardrails"])
