"""Analysis, verdicts, report and CLI on real SQLite files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from livethink.ab_test import stats
from livethink.ab_test.analysis import analyze
from livethink.ab_test.cli import main as ab_main
from livethink.ab_test.experiment import parse_experiment
from livethink.ab_test.report import write_report
from livethink.ab_test.simulate import ArmProfile, OutcomeModel, SimulationConfig, simulate_offline
from livethink.ab_test.store import EventStore

EXP = parse_experiment(
    {
        "name": "e1",
        "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}],
        "min_viewers_per_arm": 2,
    }
)


def _ev(kind: str, eid: str, vid: str, ts: float, **kw: object) -> dict:
    return {"kind": kind, "event_id": eid, "experiment": "e1", "viewer_id": vid, "ts": ts, **kw}


@pytest.fixture
def hand_store(tmp_path: Path):
    """10 viewers per arm; known conversions, GMV, a pre-exposure order, a 2-arm viewer, an unexposed buyer."""
    s = EventStore(tmp_path / "hand.db")
    s.register_experiment(EXP)
    t0 = time.time() - 7200
    ev = []
    for arm, buyers in (("A", 2), ("B", 5)):
        for i in range(10):
            vid = f"{arm}{i}"
            ev.append(_ev("exposure", f"x-{vid}", vid, t0 + i, arm=arm))
            ev.append(_ev("response", f"r-{vid}", vid, t0 + i + 1, arm=arm, latency_ms=100.0 * (i + 1),
                          tokens=50, deadline_met=i < 9, correct=i % 2 == 0, status="ok"))  # fmt: skip
            if i < buyers:
                ev.append(_ev("outcome", f"o-{vid}", vid, t0 + 100 + i, type="order", gmv=10.0 * (i + 1)))
    ev.append(_ev("outcome", "pre-A5", "A5", t0 - 86400, type="order", gmv=99.0))  # before exposure
    ev.append(_ev("exposure", "x-A0-again", "A0", t0 + 50, arm="B"))  # A0 now seen in B: left out
    ev.append(_ev("outcome", "o-ghost", "ghost", t0 + 10, type="order", gmv=5.0))  # never exposed
    s.append(ev)
    yield s
    s.close()


def test_hand_computed_analysis(hand_store: EventStore) -> None:
    s = analyze(hand_store, "e1").summary
    a, b = s["arms"]["A"], s["arms"]["B"]
    assert s["data"]["multiple_arm_viewers"] == 1 and s["data"]["unattributed_outcomes"] == 1
    assert a["viewers"] == 10 and a["analysed_viewers"] == 9 and b["analysed_viewers"] == 10
    assert a["order_rate"] == pytest.approx(1 / 9)  # A1 bought; A0 excluded; A5's order is pre-exposure
    assert b["order_rate"] == pytest.approx(5 / 10)
    assert b["gmv_per_viewer"] == pytest.approx((10 + 20 + 30 + 40 + 50) / 10)
    assert a["latency_ms"]["p50"] == pytest.approx(np.percentile([100.0 * (i + 1) for i in range(10)], 50))
    assert a["deadline_met_rate"] == pytest.approx(0.9) and a["correct_rate"] == pytest.approx(0.5)
    order = next(c for c in s["comparisons"] if c["metric"] == "order_rate")
    ref = stats.two_proportion_ztest(1, 9, 5, 10)
    assert order["p_value"] == pytest.approx(ref.p_value, abs=1e-12) and order["test"] == "z"
    gmv = next(c for c in s["comparisons"] if c["metric"] == "gmv_per_viewer")
    assert gmv["test"] == "welch"
    # CUPED: the pre-exposure order of A5 is the covariate; results differ from the unadjusted test
    cup = analyze(hand_store, "e1", cuped=True).summary
    c_order = next(c for c in cup["comparisons"] if c["metric"] == "order_rate")
    assert c_order["test"] == "welch+cuped" and c_order["cuped"]["theta"] != 0
    json.dumps(s)  # JSON-safe


def test_srm_verdict(tmp_path: Path) -> None:
    s = EventStore(tmp_path / "srm.db")
    s.register_experiment(EXP)
    t = time.time() - 100
    s.append([_ev("exposure", f"x{i}", f"v{i}", t, arm="A" if i < 600 else "B") for i in range(1000)])
    v = analyze(s, "e1").summary["verdict"]
    assert v["kind"] == "srm" and v["line"].startswith("SRM — do not trust")


def test_no_data_verdict(tmp_path: Path) -> None:
    s = EventStore(tmp_path / "empty.db")
    s.register_experiment(EXP)
    summary = analyze(s, "e1").summary
    assert summary["verdict"]["kind"] == "no_data"


@pytest.fixture(scope="module")
def sim_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "sim.db"
    exp = parse_experiment(
        {
            "name": "sim1",
            "arms": [
                {"name": "rft", "weight": 0.5, "variant": "rft"},
                {"name": "drpo", "weight": 0.5, "variant": "drpo"},
            ],
            "sequential": {"tuning": 3000},
        }  # fmt: skip
    )
    cfg = SimulationConfig(
        outcome_model=OutcomeModel(propensity_sigma=1.0, pre_period_clicks=3.0, pre_period_orders=1.0),
        arms={"rft": ArmProfile(latency_ms=900), "drpo": ArmProfile(latency_ms=350, order_lift=1.0)},
    )
    kw = {"viewers": 6000, "seed": 3, "config": cfg, "run_id": "t", "end_ts": time.time() - 600}
    with EventStore(path) as store:
        info = simulate_offline(exp, store, **kw)
        again = simulate_offline(exp, store, **kw)  # same run: all duplicates
    assert info["events_stored"] > 12000 and again["events_stored"] == 0
    return path


def test_simulated_winner_and_cuped(sim_db: Path) -> None:
    with EventStore(sim_db) as store:
        plain = analyze(store, "sim1", cuped=False).summary
        cuped = analyze(store, "sim1", cuped=True).summary
    assert plain["data"]["simulated"] and plain["srm"]["flagged"] is False
    assert plain["verdict"]["kind"] == "winner" and plain["verdict"]["arm"] == "drpo"
    lat = next(g for g in plain["guardrails"] if g["metric"] == "latency_ms")
    assert lat["status"] == "ok" and lat["diff"] < 0
    c = next(c for c in cuped["comparisons"] if c["metric"] == "click_rate")
    p = next(c for c in plain["comparisons"] if c["metric"] == "click_rate")
    assert c["cuped"]["variance_reduction"] > 0.05
    width = lambda r: r["ci"][1] - r["ci"][0]  # noqa: E731
    assert width(c) < width(p)
    seq = next(c for c in plain["comparisons"] if c["metric"] == "order_rate")["sequential"]
    assert seq["looks"] >= 10 and seq["p_value"] >= 0 and seq["ci"][0] > 0


def test_cli_analyze_and_report(sim_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert ab_main(["analyze", "--db", str(sim_db), "--experiment", "sim1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["experiment"] == "sim1" and set(out["arms"]) == {"rft", "drpo"}
    assert ab_main(["analyze", "--db", str(sim_db), "--experiment", "nope"]) == 2
    assert "'nope' is not registered" in capsys.readouterr().err
    missing = tmp_path / "missing.db"
    assert ab_main(["analyze", "--db", str(missing), "--experiment", "sim1"]) == 2
    assert "does not exist" in capsys.readouterr().err and not missing.exists()
    out_dir = tmp_path / "report"
    assert ab_main(["report", "--db", str(sim_db), "--experiment", "sim1", "--out", str(out_dir)]) == 0
    files = {p.name for p in out_dir.iterdir()}
    assert files == {
        "report.md",
        "report.html",
        "analysis.json",
        "metric_over_time.png",
        "distributions.png",
        "latency.png",
    }
    for png in ("metric_over_time.png", "distributions.png", "latency.png"):
        assert (out_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out_dir / "report.md").read_text()
    assert "**Verdict: winner: drpo" in md and "SIMULATED DATA" in md
    assert "Verdict: winner: drpo" in (out_dir / "report.html").read_text()


def test_report_is_written_atomically(sim_db: Path, tmp_path: Path) -> None:
    with EventStore(sim_db) as store:
        analysis = analyze(store, "sim1")
    paths = write_report(analysis, tmp_path / "r")
    assert not list((tmp_path / "r").glob("*.tmp"))
    assert all(p.stat().st_size > 0 for p in paths.values())
