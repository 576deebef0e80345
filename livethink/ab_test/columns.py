"""An experiment's events as columns: exposed viewers, their outcomes and the replies, read from the store.

Units: the viewer (the unit of randomisation) for conversion and GMV metrics; the reply for latency, tokens and
other guardrails. A viewer's arm is the arm of their first exposure. Outcomes count from the viewer's first
exposure on (``ATTRIBUTION_SKEW_S`` tolerates clock skew); earlier outcomes within the CUPED lookback form the
pre-period covariate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from livethink.ab_test.experiment import Experiment
from livethink.ab_test.metrics import OUTCOME_TYPES
from livethink.ab_test.store import EventStore

ATTRIBUTION_SKEW_S = 60.0


@dataclass
class RawData:
    """Columns of one experiment's events, as numpy arrays."""

    arms: tuple[str, ...]
    viewer_ids: np.ndarray  # unique exposed viewers
    viewer_arm: np.ndarray  # index into arms (first exposure)
    viewer_first_ts: np.ndarray
    viewer_multi: np.ndarray  # bool: exposed to several arms
    exposures_per_arm: np.ndarray
    out_viewer: np.ndarray  # index into viewer_ids, -1 if never exposed
    out_type: np.ndarray  # index into OUTCOME_TYPES
    out_gmv: np.ndarray
    out_ts: np.ndarray
    resp: dict[str, np.ndarray]  # response columns; "arm" is an index into arms
    simulated_events: int
    total_events: int


def load(store: EventStore, experiment: Experiment) -> RawData:
    """Read one experiment's events from the store into arrays."""
    arms = experiment.arm_names
    arm_index = {a: i for i, a in enumerate(arms)}
    exp_rows = store.fetch(experiment.name, "exposure", ["viewer_id", "arm", "ts", "simulated"])
    first: dict[str, tuple[float, int]] = {}
    multi: set[str] = set()
    exposures = np.zeros(len(arms), dtype=np.int64)
    simulated = 0
    for vid, arm, ts, sim in exp_rows:  # ordered by ts
        ai = arm_index.get(arm)
        if ai is None:  # arm removed from the config since: not analysable
            continue
        exposures[ai] += 1
        simulated += bool(sim)
        seen = first.get(vid)
        if seen is None:
            first[vid] = (ts, ai)
        elif seen[1] != ai:
            multi.add(vid)
    viewer_ids = np.array(list(first), dtype=object)
    vindex = {v: i for i, v in enumerate(first)}
    viewer_first_ts = np.array([first[v][0] for v in first], dtype=float)
    viewer_arm = np.array([first[v][1] for v in first], dtype=np.int64)
    viewer_multi = np.array([v in multi for v in first], dtype=bool)

    out_rows = store.fetch(
        experiment.name, "outcome", ["viewer_id", "outcome_type", "gmv", "ts", "simulated"]
    )
    tindex = {t: i for i, t in enumerate(OUTCOME_TYPES)}
    out_viewer = np.array([vindex.get(r[0], -1) for r in out_rows], dtype=np.int64)
    out_type = np.array([tindex[r[1]] for r in out_rows], dtype=np.int64)
    out_gmv = np.array([r[2] or 0.0 for r in out_rows], dtype=float)
    out_ts = np.array([r[3] for r in out_rows], dtype=float)
    simulated += sum(bool(r[4]) for r in out_rows)

    cols = [
        "arm",
        "latency_ms",
        "ttft_ms",
        "tokens",
        "deadline_met",
        "correct",
        "helpful",
        "status",
        "simulated",
    ]
    resp_rows = [r for r in store.fetch(experiment.name, "response", cols) if r[0] in arm_index]
    simulated += sum(bool(r[-1]) for r in resp_rows)

    def col(i: int, conv: Any = float) -> np.ndarray:
        return np.array([np.nan if r[i] is None else conv(r[i]) for r in resp_rows], dtype=float)

    resp = {
        "arm": np.array([arm_index[r[0]] for r in resp_rows], dtype=np.int64),
        "latency_ms": col(1),
        "ttft_ms": col(2),
        "tokens": col(3),
        "deadline_met": col(4),
        "correct": col(5),
        "helpful": col(6),
        "error": np.array([r[7] != "ok" for r in resp_rows], dtype=float),
    }
    return RawData(
        arms, viewer_ids, viewer_arm, viewer_first_ts, viewer_multi, exposures, out_viewer, out_type, out_gmv,
        out_ts, resp, simulated, len(exp_rows) + len(out_rows) + len(resp_rows),
    )  # fmt: skip


def _tally(data: RawData, counted: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """Per viewer, over the outcomes where ``counted``: the count of each outcome type and the order GMV."""
    n = len(data.viewer_ids)
    counts = [np.bincount(data.out_viewer[counted & (data.out_type == k)], minlength=n) for k in range(3)]
    is_order = counted & (data.out_type == 2)
    gmv = np.bincount(data.out_viewer[is_order], weights=data.out_gmv[is_order], minlength=n)
    return counts, gmv


def _exposed_at(data: RawData) -> tuple[np.ndarray, np.ndarray]:
    """(outcome of an exposed viewer, that viewer's first exposure time) per outcome."""
    ok = data.out_viewer >= 0
    return ok, data.viewer_first_ts[np.where(ok, data.out_viewer, 0)]


def viewer_metrics(data: RawData, until: float = math.inf) -> dict[str, np.ndarray]:
    """Per-viewer values of each viewer-level metric, counting outcomes with ts ≤ ``until``."""
    ok, first = _exposed_at(data)
    counts, gmv = _tally(data, ok & (data.out_ts >= first - ATTRIBUTION_SKEW_S) & (data.out_ts <= until))
    return {
        "click_rate": (counts[0] > 0).astype(float),
        "add_to_cart_rate": (counts[1] > 0).astype(float),
        "order_rate": (counts[2] > 0).astype(float),
        "orders_per_viewer": counts[2].astype(float),
        "gmv_per_viewer": gmv,
    }


def pre_period_covariates(data: RawData, lookback_days: float) -> dict[str, np.ndarray]:
    """CUPED covariate X per viewer: pre-exposure counts of the metric's outcome (GMV sum for GMV)."""
    ok, first = _exposed_at(data)
    pre = ok & (data.out_ts < first - ATTRIBUTION_SKEW_S) & (data.out_ts >= first - lookback_days * 86400)
    counts, gmv = _tally(data, pre)
    return {
        "click_rate": counts[0].astype(float),
        "add_to_cart_rate": counts[1].astype(float),
        "order_rate": counts[2].astype(float),
        "orders_per_viewer": counts[2].astype(float),
        "gmv_per_viewer": gmv,
    }


def response_values(data: RawData, metric: str) -> np.ndarray:
    """Per-reply values of a response-level metric (NaN = not measured)."""
    key = {"deadline_met_rate": "deadline_met", "correct_rate": "correct", "helpful_rate": "helpful"}.get(
        metric
    )
    key = key or {"error_rate": "error"}.get(metric, metric)
    return data.resp[key]
