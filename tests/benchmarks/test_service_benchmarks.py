"""The service benchmarks' own arithmetic on hand-made rows: the refusing arm's latency gap and its target
(``ab_latency_truth``), failed / late / lost counts over a rolling restart (``rolling_restart``), the other
viewers' goodput under a flood (``viewer_flood``) and the engine-statistics cost (``engine_stats_cost``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # the scripts import their helpers by name
import ab_latency_truth  # noqa: E402
import engine_stats_cost  # noqa: E402
import rolling_restart  # noqa: E402
import viewer_flood  # noqa: E402
from serve_load_client import Outcome  # noqa: E402


def _log(refused: int, p50: float | None) -> dict:
    return {"responses": 10, "answered": 10 - refused, "fallback": 0, "refused": refused, "error": 0, "good": 1,
            "latency_ms": {"p50": p50}, "goodput": 0.1}  # fmt: skip


def _client(refused: int, p50: float | None) -> dict:
    return {"sent": 10, "answered": 10 - refused, "fallback": 0, "refused": refused, "errors": 0, "good": 1,
            "answered_p50_ms": p50, "goodput": 0.1}  # fmt: skip


def test_the_refusing_arm_gap_and_its_target():
    arm = ab_latency_truth.compare_arm(_log(6, 300.0), _client(6, 303.5), [5.0, 6.0, 300.0])
    assert arm["gap_ms"] == 3.5 and arm["counts_equal"] and arm["unfiltered_p50_ms"] == 6.0
    met = ab_latency_truth.targets({"busy": arm})
    assert met[0].startswith("busy (refused 6 of 10)") and met[0].endswith(": met")
    late = ab_latency_truth.targets({"busy": ab_latency_truth.compare_arm(_log(6, 300.0), _client(6, 306.0), [])})
    assert late[0].endswith("MISSED")  # 6 ms > 5 ms
    calm = ab_latency_truth.targets({"calm": ab_latency_truth.compare_arm(_log(0, 300.0), _client(0, 300.0), [])})
    assert "not exercised" in calm[0]  # no arm refused: the target was not tried, and it says so


def test_rolling_restart_counts_failed_late_and_lost():
    rows = [{"i": 0, "request_id": "a", "status": 200, "client_ms": 900.0, "outcome_status": 200},
            {"i": 1, "request_id": "b", "status": 200, "client_ms": 1001.0, "outcome_status": 503},
            {"i": 2, "request_id": "c", "status": 429, "client_ms": 3.0},
            {"i": 3, "request_id": "d", "status": 0, "client_ms": 20.0},
            {"i": 4, "request_id": "e", "status": 503, "client_ms": 20.0}]  # fmt: skip
    s = rolling_restart.summarize(rows, 1000, missing_responses={"c"}, missing_outcomes={"rr-0-click"},
                                  allowed=(200, 429))  # a restart: a 503 reaching the client failed
    assert (s["requests"], s["answered"], s["refused_429"], s["failed"], s["late"]) == (5, 2, 1, 2, 1)
    assert (s["outcomes_acknowledged"], s["outcomes_not_acknowledged"]) == (1, 1)
    assert (s["responses_lost"], s["outcomes_lost"]) == (1, 1)
    assert (s["refused_503"], s["held_past_deadline"], s["held_max_ms"]) == (1, 1, 1001.0)
    frozen = rolling_restart.summarize([*rows, {"i": 5, "request_id": "f", "status": 503, "client_ms": 1004.0}], 1000,
                                       missing_responses=set(), missing_outcomes=set(), allowed=(200, 429, 503))
    assert (frozen["failed"], frozen["refused_503"], frozen["late"]) == (1, 2, 1)  # a frozen replica: 503 allowed
    assert frozen["held_past_deadline"] == 2  # but a 503 after the deadline was held too long, like a late 200


def test_flood_goodput_counts_only_correct_answers_in_time():
    outs = [Outcome(200, 900.0, correct=True), Outcome(200, 1100.0, correct=True),
            Outcome(200, 500.0, correct=False), Outcome(200, 500.0, correct=True, fallback=True),
            Outcome(429, 2.0)]  # fmt: skip
    o = viewer_flood.others(outs, 1000)
    assert o["good_flags"] == [1, 0, 0, 0, 0] and o["goodput"] == 0.2
    assert (o["answered"], o["in_time"], o["refused"], o["errors"]) == (4, 3, 1, 0)


def test_engine_stats_cost_difference():
    a = engine_stats_cost.analyse([10.0, 10.2, 10.4, 10.6], [11.0, 11.2, 11.4, 11.6])
    assert a["on_median_ms"] == pytest.approx(10.3) and a["off_median_ms"] == pytest.approx(11.3)
    assert a["difference_ms"] == pytest.approx(-1.0) and a["difference_ci_ms"][0] <= -1.0 <= a["difference_ci_ms"][1]
