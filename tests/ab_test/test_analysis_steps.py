"""The steps of ``analyze`` on tiny, hand-computed inputs (no store)."""

from __future__ import annotations

import numpy as np
import pytest

from livethink.ab_test.analysis import ViewerPanel, arm_statistics, checkpoint_times, data_summary, srm_check
from livethink.ab_test.columns import ATTRIBUTION_SKEW_S, RawData, pre_period_covariates, viewer_metrics
from livethink.ab_test.experiment import parse_experiment

EXP = parse_experiment(
    {"name": "steps", "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}, {"name": "C", "weight": 0}]}
)
T = 10_000.0
CLICK, CART, ORDER = 0, 1, 2


def raw(out: list[tuple[int, int, float, float]], multi: tuple[bool, ...] = (False, False, False)) -> RawData:
    """Viewers v0 (arm A, first seen T), v1 (B, T + 10), v2 (B, T + 20); ``out``: (viewer, type, gmv, ts)."""
    v, kind, gmv, ts = (np.array(c) for c in zip(*out, strict=True)) if out else ([],) * 4
    nan = np.nan
    resp = {
        "arm": np.array([0, 0, 1]),
        "latency_ms": np.array([100.0, 300.0, 200.0]),
        "ttft_ms": np.array([nan, nan, nan]),
        "tokens": np.array([10.0, 20.0, 30.0]),
        "deadline_met": np.array([1.0, 0.0, nan]),
        "correct": np.array([nan, nan, nan]),
        "helpful": np.array([nan, nan, nan]),
        "status": np.array([0, 1, 0]),  # answered, fallback, answered
    }
    return RawData(
        ("A", "B", "C"), np.array(["v0", "v1", "v2"], dtype=object), np.array([0, 1, 1]),
        np.array([T, T + 10, T + 20]), np.array(multi), np.array([1, 3, 0]), np.asarray(v, dtype=np.int64),
        np.asarray(kind, dtype=np.int64), np.asarray(gmv, dtype=float), np.asarray(ts, dtype=float), resp, 0,
        3 + len(out),
    )  # fmt: skip


OUTCOMES = [
    (0, CLICK, 0.0, T + 5),
    (0, ORDER, 12.5, T + 6),
    (0, ORDER, 7.5, T - ATTRIBUTION_SKEW_S + 1),  # within the clock-skew tolerance: counts after exposure
    (0, ORDER, 40.0, T - 3600),  # an hour before exposure: the CUPED covariate
    (0, ORDER, 99.0, T - 20 * 86400),  # older than the 14-day lookback: neither
    (1, CART, 0.0, T + 500),
    (-1, ORDER, 5.0, T + 1),  # a viewer never exposed
]


def test_viewer_metrics_count_outcomes_from_first_exposure() -> None:
    m = viewer_metrics(raw(OUTCOMES))
    assert m["click_rate"].tolist() == [1.0, 0.0, 0.0]
    assert m["add_to_cart_rate"].tolist() == [0.0, 1.0, 0.0]
    assert m["order_rate"].tolist() == [1.0, 0.0, 0.0]
    assert m["orders_per_viewer"].tolist() == [2.0, 0.0, 0.0]
    assert m["gmv_per_viewer"].tolist() == [20.0, 0.0, 0.0]
    early = viewer_metrics(raw(OUTCOMES), until=T + 5.5)  # a checkpoint between the click and the order
    assert early["click_rate"].tolist() == [1.0, 0.0, 0.0] and early["gmv_per_viewer"].tolist() == [7.5, 0.0, 0.0]


def test_pre_period_covariates_are_the_lookback_before_exposure() -> None:
    x = pre_period_covariates(raw(OUTCOMES), lookback_days=14)
    assert x["order_rate"].tolist() == x["orders_per_viewer"].tolist() == [1.0, 0.0, 0.0]
    assert x["gmv_per_viewer"].tolist() == [40.0, 0.0, 0.0] and x["click_rate"].tolist() == [0.0, 0.0, 0.0]
    assert pre_period_covariates(raw(OUTCOMES), lookback_days=30)["gmv_per_viewer"].tolist() == [139.0, 0, 0]


def test_arm_statistics_by_hand() -> None:
    data = raw(OUTCOMES, multi=(False, False, True))  # v2 saw two arms: counted as a viewer, not analysed
    stats = arm_statistics(EXP, data, ViewerPanel.of(data, 14))
    a, b, c = stats["A"], stats["B"], stats["C"]
    assert (a["viewers"], a["analysed_viewers"], a["exposures"], a["responses"]) == (1, 1, 1, 2)
    assert (b["viewers"], b["analysed_viewers"], b["exposures"], b["responses"]) == (2, 1, 3, 1)
    assert a["order_rate"] == 1.0 and a["gmv_per_viewer"] == 20.0 and b["add_to_cart_rate"] == 1.0
    assert c["order_rate"] is None and c["latency_ms"]["n"] == 0 and c["error_rate"] is None
    # latency over answered replies only: the fallback's 300 ms is not a reply time; the deadline counts it
    assert a["latency_ms"] == {"mean": 100.0, "p50": 100.0, "p95": 100.0, "p99": 100.0, "n": 1}
    assert a["deadline_met_rate"] == 0.5 and a["fallback_rate"] == 0.5 and a["error_rate"] == 0.0
    assert (a["answered"], a["fallback"], a["refused"], a["error"]) == (1, 1, 0, 0)
    assert b["deadline_met_rate"] is None and b["latency_ms"]["n"] == 1
    assert a["correct_rate"] is None  # nothing judged


def test_checkpoints_span_first_exposure_to_last_event() -> None:
    assert checkpoint_times(raw([(1, CLICK, 0.0, T + 40)]), 5) == [T + 10, T + 20, T + 30, T + 40]
    assert checkpoint_times(raw([]), 3) == [T + 10, T + 20]  # the last first exposure ends the range
    assert checkpoint_times(raw([]), 1) == [T + 20]  # at least one look
    empty = RawData((), *(np.zeros(0),) * 9, {}, 0, 0)
    assert checkpoint_times(empty, 24) == [] and data_summary(empty, [])["first_ts"] is None


def test_data_summary_by_hand() -> None:
    d = data_summary(raw(OUTCOMES, multi=(True, False, False)), [T + 1, T + 2])
    assert d == {"events": 10, "simulated_events": 0, "simulated": False, "viewers": 3, "multiple_arm_viewers": 1,
                 "unattributed_outcomes": 1, "first_ts": T, "last_ts": T + 2}  # fmt: skip


def test_srm_leaves_out_zero_weight_arms() -> None:
    even = srm_check(EXP, [500, 500, 0])
    assert even["arms"] == ["A", "B"] and even["p_value"] == pytest.approx(1.0) and not even["flagged"]
    skewed = srm_check(EXP, [600, 400, 0])  # chi2 = (100² + 100²) / 500 = 40 on 1 df
    assert skewed["flagged"] and skewed["p_value"] == pytest.approx(2.5396e-10, rel=1e-3)
