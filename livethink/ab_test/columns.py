"""An experiment's events as columns: exposed viewers, their outcomes and the replies, read from the store.

Units: the viewer (the unit of randomisation) for conversion and GMV metrics; the reply for latency, tokens and
other guardrails. A viewer's arm is the arm of their first exposure. Outcomes count from the viewer's first
exposure on (``ATTRIBUTION_SKEW_S`` tolerates clock skew); earlier outcomes within the CUPED lookback form the
pre-period covariate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from livethink.ab_test.experiment import Experiment
from livethink.ab_test.metrics import METRICS, OUTCOME_TYPES
from livethink.ab_test.store import EventStore

ATTRIBUTION_SKEW_S = 60.0


STATUSES = ("answered", "fallback", "refused", "error")
_STATUS_INDEX = {**{s: i for i, s in enumerate(STATUSES)}, "ok": 0, "rejected": 2}  # with older spellings
_RESP_COLS = ("arm", "latency_ms", "ttft_ms", "first_reply_ms", "first_sentence_ms", "tokens", "deadline_met",
              "correct", "helpful", "forced_end", "cut", "status", "request_id", "ts", "simulated")  # fmt: skip


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
    out_type: np.ndarray  # index into ``out_types``
    out_gmv: np.ndarray
    out_ts: np.ndarray
    resp: dict[str, np.ndarray]  # response columns; "arm" is an index into arms, "status" into STATUSES
    simulated_events: int
    total_events: int
    out_types: tuple[str, ...] = OUTCOME_TYPES
    out_value: np.ndarray = field(default_factory=lambda: np.zeros(0))  # NaN = no value given
    exp_ts: np.ndarray = field(default_factory=lambda: np.zeros(0))  # every exposure's time and arm
    exp_arm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    viewer_unit: np.ndarray | None = None  # the randomisation unit (session, stream) of each viewer's first exposure


def load(store: EventStore, experiment: Experiment) -> RawData:
    """Read one experiment's events from the store into arrays. ``correct`` labels posted as outcomes (by a judge
    or a reviewer, naming the reply's ``request_id``) set the correctness of that reply (the latest label wins)."""
    arms = experiment.arm_names
    arm_index = {a: i for i, a in enumerate(arms)}
    exp_rows = store.fetch(experiment.name, "exposure", ["viewer_id", "arm", "ts", "simulated", "unit_id"])
    first: dict[str, tuple[float, int]] = {}
    unit: dict[str, str] = {}
    multi: set[str] = set()
    exposures = np.zeros(len(arms), dtype=np.int64)
    exp_ts, exp_arm = [], []
    simulated = 0
    for vid, arm, ts, sim, uid in exp_rows:  # ordered by ts
        ai = arm_index.get(arm)
        if ai is None:  # arm removed from the config since: not analysable
            continue
        exposures[ai] += 1
        exp_ts.append(ts)
        exp_arm.append(ai)
        simulated += bool(sim)
        seen = first.get(vid)
        if seen is None:
            first[vid] = (ts, ai)
            unit[vid] = uid or f"viewer:{vid}"  # a viewer without a unit id is a unit of their own
        elif seen[1] != ai:
            multi.add(vid)
    viewer_ids = np.array(list(first), dtype=object)
    vindex = {v: i for i, v in enumerate(first)}
    viewer_first_ts = np.array([first[v][0] for v in first], dtype=float)
    viewer_arm = np.array([first[v][1] for v in first], dtype=np.int64)
    viewer_multi = np.array([v in multi for v in first], dtype=bool)

    out_rows = store.fetch(
        experiment.name, "outcome", ["viewer_id", "outcome_type", "gmv", "ts", "simulated", "value", "request_id"]
    )
    labels = {r[6]: float(r[5]) for r in out_rows if r[1] == "correct" and r[6] is not None and r[5] is not None}
    types = (*OUTCOME_TYPES, *(o.name for o in experiment.outcomes))
    tindex = {t: i for i, t in enumerate(types)}
    out_rows = [r for r in out_rows if r[1] in tindex]  # labels apart; types no longer declared are not analysed
    out_viewer = np.array([vindex.get(r[0], -1) for r in out_rows], dtype=np.int64)
    out_type = np.array([tindex[r[1]] for r in out_rows], dtype=np.int64)
    out_gmv = np.array([r[2] or 0.0 for r in out_rows], dtype=float)
    out_ts = np.array([r[3] for r in out_rows], dtype=float)
    out_value = np.array([np.nan if r[5] is None else r[5] for r in out_rows], dtype=float)
    simulated += sum(bool(r[4]) for r in out_rows)

    resp_rows = [r for r in store.fetch(experiment.name, "response", list(_RESP_COLS)) if r[0] in arm_index]
    simulated += sum(bool(r[-1]) for r in resp_rows)
    ci = {c: i for i, c in enumerate(_RESP_COLS)}

    def col(name: str) -> np.ndarray:
        i = ci[name]
        return np.array([np.nan if r[i] is None else float(r[i]) for r in resp_rows], dtype=float)

    resp = {name: col(name) for name in _RESP_COLS if name not in ("arm", "status", "request_id", "simulated")}
    resp["arm"] = np.array([arm_index[r[0]] for r in resp_rows], dtype=np.int64)
    resp["status"] = np.array([_STATUS_INDEX.get(r[ci["status"]], 3) for r in resp_rows], dtype=np.int64)
    if labels:
        rid = ci["request_id"]
        judged = np.array([labels.get(r[rid], np.nan) for r in resp_rows], dtype=float)
        resp["correct"] = np.where(np.isnan(judged), resp["correct"], judged)
    return RawData(
        arms, viewer_ids, viewer_arm, viewer_first_ts, viewer_multi, exposures, out_viewer, out_type, out_gmv,
        out_ts, resp, simulated, len(exp_rows) + len(out_rows) + len(resp_rows), types, out_value,
        np.array(exp_ts, dtype=float), np.array(exp_arm, dtype=np.int64),
        np.array([unit[v] for v in first], dtype=object) if experiment.unit != "viewer" else None,
    )  # fmt: skip


def cohort(data: RawData, t0: float, t1: float) -> RawData:
    """The viewers first exposed in [t0, t1) with all their outcomes, and the exposures and replies in [t0, t1):
    one phase's randomised cohort."""
    keep = (data.viewer_first_ts >= t0) & (data.viewer_first_ts < t1)
    remap = np.full(len(data.viewer_ids) + 1, -1, dtype=np.int64)
    remap[np.flatnonzero(keep)] = np.arange(int(keep.sum()))
    out_viewer = remap[data.out_viewer]  # index -1 maps to the last slot: -1
    in_t = (data.resp["ts"] >= t0) & (data.resp["ts"] < t1)
    e_in = (data.exp_ts >= t0) & (data.exp_ts < t1)
    return RawData(
        data.arms, data.viewer_ids[keep], data.viewer_arm[keep], data.viewer_first_ts[keep], data.viewer_multi[keep],
        np.bincount(data.exp_arm[e_in], minlength=len(data.arms)), out_viewer, data.out_type, data.out_gmv,
        data.out_ts, {k: v[in_t] for k, v in data.resp.items()}, data.simulated_events, data.total_events,
        data.out_types, data.out_value, data.exp_ts[e_in], data.exp_arm[e_in],
        None if data.viewer_unit is None else data.viewer_unit[keep],
    )  # fmt: skip


def unit_level(data: RawData) -> tuple[np.ndarray, np.ndarray]:
    """(arm, first exposure time) per randomisation unit: per viewer without units, else per session or stream
    (the arm and time of the unit's earliest viewer)."""
    if data.viewer_unit is None:
        return data.viewer_arm, data.viewer_first_ts
    order = np.argsort(data.viewer_first_ts, kind="stable")
    _, first = np.unique(data.viewer_unit[order].astype(str), return_index=True)
    pick = order[first]
    return data.viewer_arm[pick], data.viewer_first_ts[pick]


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
    if not len(data.viewer_first_ts):
        return ok, np.zeros(len(ok))
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


_COLUMN = {"deadline_met_rate": "deadline_met", "correct_rate": "correct", "helpful_rate": "helpful",
           "forced_end_rate": "forced_end", "cut_rate": "cut"}  # fmt: skip
_STATUS_RATE = {"error_rate": 3, "refusal_rate": 2, "fallback_rate": 1}


def response_values(data: RawData, metric: str) -> np.ndarray:
    """Per-request values of a response-level metric, NaN where it is not measured or does not apply: latency,
    tokens, correctness and the other reply measures count answered requests only (a refusal's or a fallback's
    few milliseconds are not a fast reply); the deadline counts every reply (answered or fallback); the
    refusal, fallback and error rates and goodput (answered, correct, within the deadline) every request."""
    status = data.resp["status"]
    answered = status == 0
    if metric in _STATUS_RATE:
        return (status == _STATUS_RATE[metric]).astype(float)
    if metric == "goodput":
        return (answered & (data.resp["correct"] == 1) & (data.resp["deadline_met"] == 1)).astype(float)
    key = _COLUMN.get(metric, metric)
    v = data.resp[key] if key in data.resp else np.full(len(status), np.nan)  # a column not recorded
    mask = (status <= 1) if METRICS[metric].over == "replies" else answered
    return np.where(mask, v, np.nan)


def outcome_metrics(data: RawData, experiment: Experiment, until: float = math.inf) -> dict[str, np.ndarray]:
    """Per-viewer values of each declared outcome metric (NaN = the viewer is left out: ``missing: skip``)."""
    ok, first = _exposed_at(data)
    base = ok & (data.out_ts >= first - ATTRIBUTION_SKEW_S) & (data.out_ts <= until)
    n = len(data.viewer_ids)
    out: dict[str, np.ndarray] = {}
    for decl in experiment.outcomes:
        sel = base & (data.out_type == data.out_types.index(decl.name))
        if decl.window_s is not None:
            sel &= data.out_ts <= first + decl.window_s
        idx = data.out_viewer[sel]
        raw = data.out_value[sel]
        val = np.where(np.isnan(raw), 1.0, raw)  # binary and count default to 1; a scale always has a value
        seen = np.bincount(idx, minlength=n) > 0
        if decl.kind == "binary":
            v = np.zeros(n)
            np.maximum.at(v, idx, val)
        elif decl.kind == "count":
            v = np.bincount(idx, weights=val, minlength=n)
        else:
            total = np.bincount(idx, weights=val, minlength=n)
            v = np.divide(total, np.bincount(idx, minlength=n), out=np.zeros(n), where=seen)
        skip = decl.kind == "scale" or decl.missing == "skip"
        out[decl.name] = np.where(seen | (not skip), v, np.nan)
    return out
