"""Analysis of one experiment: per-arm statistics, tests, SRM, sequential p-values, CUPED, verdict.

Units: the viewer (the unit of randomisation) for conversion and GMV metrics; the reply for latency, tokens and
other guardrails. A viewer's arm is the arm of their first exposure; viewers exposed to more than one arm
(possible after a weight change) are left out of the viewer-level metrics and counted in
``data.multiple_arm_viewers``. Outcomes count from the viewer's first exposure on (``ATTRIBUTION_SKEW_S``
tolerates clock skew); earlier outcomes within the CUPED lookback form the pre-period covariate; outcomes of
viewers never exposed are counted in ``data.unattributed_outcomes`` and otherwise ignored.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from livethink.ab_test import stats
from livethink.ab_test.experiment import Experiment
from livethink.ab_test.metrics import METRICS, OUTCOME_TYPES, RESPONSE_METRICS, VIEWER_METRICS
from livethink.ab_test.store import EventStore

ATTRIBUTION_SKEW_S = 60.0
CHECKPOINTS = 24


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


def viewer_metrics(data: RawData, until: float = math.inf) -> dict[str, np.ndarray]:
    """Per-viewer values of each viewer-level metric, counting outcomes with ts ≤ ``until``."""
    n = len(data.viewer_ids)
    ok = data.out_viewer >= 0
    vi = np.where(ok, data.out_viewer, 0)
    post = ok & (data.out_ts >= data.viewer_first_ts[vi] - ATTRIBUTION_SKEW_S) & (data.out_ts <= until)
    counts = [np.bincount(data.out_viewer[post & (data.out_type == k)], minlength=n) for k in range(3)]
    is_order = post & (data.out_type == 2)
    gmv = np.bincount(data.out_viewer[is_order], weights=data.out_gmv[is_order], minlength=n)
    return {
        "click_rate": (counts[0] > 0).astype(float),
        "add_to_cart_rate": (counts[1] > 0).astype(float),
        "order_rate": (counts[2] > 0).astype(float),
        "orders_per_viewer": counts[2].astype(float),
        "gmv_per_viewer": gmv,
    }


def pre_period_covariates(data: RawData, lookback_days: float) -> dict[str, np.ndarray]:
    """CUPED covariate X per viewer: pre-exposure counts of the metric's outcome (GMV sum for GMV)."""
    n = len(data.viewer_ids)
    ok = data.out_viewer >= 0
    vi = np.where(ok, data.out_viewer, 0)
    first = data.viewer_first_ts[vi]
    pre = ok & (data.out_ts < first - ATTRIBUTION_SKEW_S) & (data.out_ts >= first - lookback_days * 86400)
    counts = [
        np.bincount(data.out_viewer[pre & (data.out_type == k)], minlength=n).astype(float) for k in range(3)
    ]
    is_order = pre & (data.out_type == 2)
    gmv = np.bincount(data.out_viewer[is_order], weights=data.out_gmv[is_order], minlength=n)
    return {
        "click_rate": counts[0],
        "add_to_cart_rate": counts[1],
        "order_rate": counts[2],
        "orders_per_viewer": counts[2],
        "gmv_per_viewer": gmv,
    }


def _response_values(data: RawData, metric: str) -> np.ndarray:
    key = {"deadline_met_rate": "deadline_met", "correct_rate": "correct", "helpful_rate": "helpful"}.get(
        metric
    )
    key = key or {"error_rate": "error"}.get(metric, metric)
    return data.resp[key]


def _clean(x: Any) -> Any:
    """JSON-safe: numpy → python, NaN/inf → None."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _percentiles(v: np.ndarray) -> dict[str, float | None]:
    v = v[~np.isnan(v)]
    if not len(v):
        return {"mean": None, "p50": None, "p95": None, "p99": None, "n": 0}
    p50, p95, p99 = np.percentile(v, [50, 95, 99])
    return {
        "mean": float(v.mean()),
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "n": int(len(v)),
    }


def _compare(
    metric: str,
    y: np.ndarray,
    arm: np.ndarray,
    ci: int,
    ti: int,
    alpha: float,
    x: np.ndarray | None = None,
) -> tuple[stats.TestResult | None, dict | None, float]:
    """Test treatment ti vs control ci on values y (NaN = not measured). Returns (result, cuped info, V)."""
    keep = ~np.isnan(y)
    yc, yt = y[keep & (arm == ci)], y[keep & (arm == ti)]
    if len(yc) < 2 or len(yt) < 2:
        return None, None, math.nan
    cuped = None
    if x is not None:
        sel = keep & ((arm == ci) | (arm == ti))
        theta = stats.cuped_theta(y[sel], x[sel])
        x_mean = float(x[sel].mean())
        adj = stats.cuped_adjust(y, x, theta, x_mean)
        ac, at = adj[keep & (arm == ci)], adj[keep & (arm == ti)]
        raw_var = float(np.var(np.concatenate([yc, yt])))
        adj_var = float(np.var(np.concatenate([ac, at])))
        cuped = {"theta": theta, "variance_reduction": 1 - adj_var / raw_var if raw_var > 0 else 0.0}
        res = dataclasses.replace(stats.welch_ttest(ac, at, alpha), test="welch+cuped")
        return res, cuped, float(ac.var(ddof=1) / len(ac) + at.var(ddof=1) / len(at))
    if METRICS[metric].kind == "binary":
        res = stats.two_proportion_ztest(int(yc.sum()), len(yc), int(yt.sum()), len(yt), alpha)
        v = res.mean_control * (1 - res.mean_control) / len(yc) + res.mean_treatment * (
            1 - res.mean_treatment
        ) / len(yt)
        return res, None, v
    res = stats.welch_ttest(yc, yt, alpha)
    return res, None, float(yc.var(ddof=1) / len(yc) + yt.var(ddof=1) / len(yt))


@dataclass
class Analysis:
    """Result of ``analyze``: a JSON-safe ``summary`` plus arrays the report plots."""

    summary: dict[str, Any]
    viewer_values: dict[str, np.ndarray] = field(default_factory=dict)
    viewer_arm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    responses: dict[str, np.ndarray] = field(default_factory=dict)


def analyze(
    store: EventStore,
    experiment: Experiment | str,
    *,
    cuped: bool | None = None,
    checkpoints: int = CHECKPOINTS,
) -> Analysis:
    """Analyse one experiment (a registered name or an ``Experiment``); ``cuped`` overrides the config."""
    exp = store.experiment(experiment) if isinstance(experiment, str) else experiment
    data = load(store, exp)
    use_cuped = exp.cuped.enabled if cuped is None else cuped
    arms, k = exp.arm_names, len(exp.arm_names)
    ci = arms.index(exp.control_arm)
    treatments = [i for i in range(k) if i != ci]
    alpha_adj = exp.alpha / max(1, len(treatments))  # Bonferroni over treatments

    single = ~data.viewer_multi
    vals_all = viewer_metrics(data)
    vals = {m: v[single] for m, v in vals_all.items()}
    varm = data.viewer_arm[single]
    covs = {m: v[single] for m, v in pre_period_covariates(data, exp.cuped.lookback_days).items()}

    # -- per-arm descriptive stats
    arm_stats: dict[str, Any] = {}
    for i, name in enumerate(arms):
        in_arm = varm == i
        r_in = data.resp["arm"] == i
        entry: dict[str, Any] = {
            "weight": exp.arms[i].weight,
            "variant": exp.arms[i].variant,
            "viewers": int((data.viewer_arm == i).sum()),
            "analysed_viewers": int(in_arm.sum()),
            "exposures": int(data.exposures_per_arm[i]),
            "responses": int(r_in.sum()),
        }
        for m in VIEWER_METRICS:
            entry[m] = float(vals[m][in_arm].mean()) if in_arm.any() else None
        for m in RESPONSE_METRICS:
            v = _response_values(data, m)[r_in]
            if METRICS[m].kind == "continuous":
                entry[m] = _percentiles(v)
            else:
                v = v[~np.isnan(v)]
                entry[m] = float(v.mean()) if len(v) else None
        arm_stats[name] = entry

    # -- SRM on viewers by first-exposure arm
    viewers_per_arm = [arm_stats[a]["viewers"] for a in arms]
    positive = [i for i in range(k) if exp.arms[i].weight > 0]
    srm = stats.srm_test(
        [viewers_per_arm[i] for i in positive], [exp.arms[i].weight for i in positive], exp.srm_threshold
    )

    # -- time checkpoints (for the plot and the sequential test)
    if len(data.viewer_first_ts):
        t0, t1 = (
            float(data.viewer_first_ts.min()),
            float(max(data.viewer_first_ts.max(), data.out_ts.max(initial=0))),
        )
        cps = list(np.linspace(t0, t1, max(2, checkpoints))[1:]) if t1 > t0 else [t1]
    else:
        cps = []
    first_single = data.viewer_first_ts[single]
    cp_values = [{m: v[single] for m, v in viewer_metrics(data, until=t).items()} for t in cps]

    comparisons: list[dict[str, Any]] = []
    timeseries: dict[str, Any] = {"metric": exp.primary_metric, "checkpoints": cps, "arms": {}, "lift": {}}
    for ti in treatments:
        for m in VIEWER_METRICS:
            res, cinfo, _ = _compare(m, vals[m], varm, ci, ti, exp.alpha, covs[m] if use_cuped else None)
            if res is None:
                continue
            seq = _sequential(
                exp, cp_values, first_single, varm, covs[m] if use_cuped else None, m, ci, ti, cps
            )
            if m == exp.primary_metric:
                timeseries["lift"][arms[ti]] = seq.pop("series")
            else:
                seq.pop("series")
            comparisons.append(_comparison_entry(exp, m, "viewer", arms, ci, ti, res, cinfo, seq, alpha_adj))
        for m in RESPONSE_METRICS:
            res, _, _ = _compare(m, _response_values(data, m), data.resp["arm"], ci, ti, exp.alpha)
            if res is not None:
                comparisons.append(
                    _comparison_entry(exp, m, "response", arms, ci, ti, res, None, None, alpha_adj)
                )
    for i, name in enumerate(arms):
        timeseries["arms"][name] = _arm_series(
            cp_values, first_single, varm, exp.primary_metric, i, cps, exp.alpha
        )

    guardrails = _guardrails(exp, comparisons)
    summary = {
        "experiment": exp.name,
        "config_digest": exp.digest(),
        "generated_at": time.time(),
        "control": exp.control_arm,
        "primary_metric": exp.primary_metric,
        "alpha": exp.alpha,
        "sequential": exp.sequential.enabled,
        "cuped": use_cuped,
        "data": {
            "events": data.total_events,
            "simulated_events": data.simulated_events,
            "simulated": data.simulated_events > 0,
            "viewers": int(len(data.viewer_ids)),
            "multiple_arm_viewers": int(data.viewer_multi.sum()),
            "unattributed_outcomes": int((data.out_viewer < 0).sum()),
            "first_ts": float(data.viewer_first_ts.min()) if len(data.viewer_first_ts) else None,
            "last_ts": cps[-1] if cps else None,
        },
        "arms": arm_stats,
        "srm": srm.to_dict() | {"arms": [arms[i] for i in positive]},
        "comparisons": comparisons,
        "guardrails": guardrails,
        "timeseries": timeseries,
    }
    summary["verdict"] = verdict(exp, summary)
    resp = {k2: v for k2, v in data.resp.items()}
    return Analysis(_clean(summary), vals, varm, resp)


def _comparison_entry(
    exp: Experiment,
    metric: str,
    level: str,
    arms: tuple[str, ...],
    ci: int,
    ti: int,
    res: stats.TestResult,
    cuped: dict | None,
    seq: dict | None,
    alpha_adj: float,
) -> dict[str, Any]:
    p = seq["p_value"] if (seq and exp.sequential.enabled) else res.p_value
    significant = p < alpha_adj
    better = None
    if significant:
        better = (res.diff > 0) == METRICS[metric].higher_is_better
    return {
        "metric": metric,
        "level": level,
        "arm": arms[ti],
        "control": arms[ci],
        **res.to_dict(),
        "cuped": cuped,
        "sequential": seq,
        "decision_p_value": p,
        "alpha_adjusted": alpha_adj,
        "significant": significant,
        "better": better,
    }


def _sequential(
    exp: Experiment,
    cp_values: list[dict[str, np.ndarray]],
    first_single: np.ndarray,
    varm: np.ndarray,
    x: np.ndarray | None,
    metric: str,
    ci: int,
    ti: int,
    cps: list[float],
) -> dict[str, Any]:
    """mSPRT over the time checkpoints: always-valid p (running min of 1/Λ) and CIs at each look."""
    series: dict[str, list] = {
        k: [] for k in ("lift", "ci_low", "ci_high", "seq_ci_low", "seq_ci_high", "seq_p")
    }
    state, last = stats.SequentialState(), {}
    for t, values in zip(cps, cp_values, strict=True):
        y = np.where(first_single <= t, values[metric], np.nan)
        res, _, v = _compare(metric, y, varm, ci, ti, exp.alpha, x)
        if res is None or not v > 0:
            for key in series:
                series[key].append(None if key != "seq_p" else state.p_value)
            continue
        n_total = res.n_control + res.n_treatment
        state = stats.msprt_update(state, res.diff, v, n_total, exp.sequential.tuning, exp.alpha)
        lo, hi = state.ci
        c = res.mean_control
        series["lift"].append(res.lift)
        series["ci_low"].append(res.lift_ci[0] if res.lift_ci else None)
        series["ci_high"].append(res.lift_ci[1] if res.lift_ci else None)
        series["seq_ci_low"].append(lo / c if c else None)
        series["seq_ci_high"].append(hi / c if c else None)
        series["seq_p"].append(state.p_value)
        last = {"ci": state.ci, "lift_ci": (lo / c, hi / c) if c else None}
    return {"p_value": state.p_value, "looks": len(cps), **last, "series": series}


def _arm_series(
    cp_values: list[dict[str, np.ndarray]], first_single: np.ndarray, varm: np.ndarray, metric: str, i: int,
    cps: list[float], alpha: float,
) -> dict[str, list]:  # fmt: skip
    out: dict[str, list] = {"n": [], "value": [], "ci_low": [], "ci_high": []}
    z = stats.z_crit(alpha)
    for t, values in zip(cps, cp_values, strict=True):
        y = values[metric][(first_single <= t) & (varm == i)]
        n = len(y)
        mean = float(y.mean()) if n else None
        se = float(y.std(ddof=1) / math.sqrt(n)) if n > 1 else None
        out["n"].append(n)
        out["value"].append(mean)
        out["ci_low"].append(mean - z * se if se is not None else None)
        out["ci_high"].append(mean + z * se if se is not None else None)
    return out


def _guardrails(exp: Experiment, comparisons: list[dict]) -> list[dict[str, Any]]:
    out = []
    for g in exp.guardrails:
        for c in comparisons:
            if c["metric"] != g:
                continue
            worse = c["p_value"] < exp.alpha and ((c["diff"] > 0) != METRICS[g].higher_is_better)
            out.append(
                {
                    "metric": g,
                    "arm": c["arm"],
                    "control": c["control"],
                    "mean_control": c["mean_control"],
                    "mean_treatment": c["mean_treatment"],
                    "diff": c["diff"],
                    "lift": c["lift"],
                    "p_value": c["p_value"],
                    "status": "breached" if worse else "ok",
                }
            )
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f}%"


def verdict(exp: Experiment, summary: dict[str, Any]) -> dict[str, Any]:
    """One line: winner / no difference yet / SRM — do not trust (or no data yet)."""
    arms = summary["arms"]
    if summary["data"]["viewers"] == 0:
        return {"kind": "no_data", "arm": None, "line": "no data yet: no exposures logged"}
    srm = summary["srm"]
    if srm["flagged"]:
        obs = ", ".join(f"{a}={o}" for a, o in zip(srm["arms"], srm["observed"], strict=True))
        return {
            "kind": "srm",
            "arm": None,
            "line": f"SRM — do not trust: viewers {obs} vs weights {[arms[a]['weight'] for a in srm['arms']]} "
            f"(chi-square p={srm['p_value']:.2g} < {srm['threshold']})",
        }
    smallest = min(a["analysed_viewers"] for a in arms.values())
    if smallest < exp.min_viewers_per_arm:
        return {
            "kind": "no_difference",
            "arm": None,
            "line": f"no difference yet: {smallest} viewers in the smallest arm (< {exp.min_viewers_per_arm})",
        }
    primary = [c for c in summary["comparisons"] if c["metric"] == exp.primary_metric]
    kind_p = "always-valid p" if exp.sequential.enabled else "p"
    good = [c for c in primary if c["significant"] and c["better"]]
    bad = [c for c in primary if c["significant"] and c["better"] is False]
    breached = {(g["arm"], g["metric"]) for g in summary["guardrails"] if g["status"] == "breached"}
    if good:
        c = max(good, key=lambda c: c["lift"] if c["lift"] is not None else c["diff"])
        lo, hi = (
            (c["lift_ci"] or (None, None))
            if not exp.sequential.enabled
            else (c["sequential"].get("lift_ci") or (None, None))
        )
        line = (
            f"winner: {c['arm']} ({_pct(c['lift'])} {exp.primary_metric} vs {c['control']}, "
            f"CI [{_pct(lo)}, {_pct(hi)}], {kind_p}={c['decision_p_value']:.2g})"
        )
        gb = sorted(m for a, m in breached if a == c["arm"])
        if gb:
            line += f" — but guardrail(s) breached: {', '.join(gb)}"
        return {"kind": "winner", "arm": c["arm"], "line": line, "guardrails_breached": gb}
    if bad and len(bad) == len(primary):
        worst = ", ".join(f"{c['arm']} {_pct(c['lift'])}" for c in bad)
        return {
            "kind": "winner",
            "arm": exp.control_arm,
            "line": f"winner: {exp.control_arm} (control); {exp.primary_metric} worse in {worst} ({kind_p} < {bad[0]['alpha_adjusted']:.3g})",
            "guardrails_breached": [],
        }
    ps = ", ".join(f"{c['arm']} {_pct(c['lift'])} ({kind_p}={c['decision_p_value']:.2g})" for c in primary)
    return {"kind": "no_difference", "arm": None, "line": f"no difference yet on {exp.primary_metric}: {ps}"}
