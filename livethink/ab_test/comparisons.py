"""Comparisons of a treatment arm with the control: the test of one metric (z, Welch or Welch after CUPED),
the mSPRT always-valid p-value over time checkpoints, and an arm's running mean with its confidence band."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from livethink.ab_test import stats
from livethink.ab_test.experiment import Experiment
from livethink.ab_test.metrics import METRICS


def compare(
    metric: str,
    y: np.ndarray,
    arm: np.ndarray,
    ci: int,
    ti: int,
    alpha: float,
    x: np.ndarray | None = None,
    groups: np.ndarray | None = None,
) -> tuple[stats.TestResult | None, dict | None, float]:
    """Test treatment ti vs control ci on values y (NaN = not measured). Returns (result, cuped info, V).
    ``groups``: each unit's cluster (its session or stream) when the randomisation unit is a cluster: the test
    is then cluster-robust (``stats.cluster_ztest``), after CUPED when ``x`` is given."""
    keep = ~np.isnan(y)
    yc, yt = y[keep & (arm == ci)], y[keep & (arm == ti)]
    if len(yc) < 2 or len(yt) < 2:
        return None, None, math.nan
    if groups is not None:
        info = None
        if x is not None:
            sel = keep & ((arm == ci) | (arm == ti))
            theta = stats.cuped_theta(y[sel], x[sel])
            y = stats.cuped_adjust(y, x, theta, float(x[sel].mean()))
            info = {"theta": theta, "variance_reduction": None}
        mc, mt = keep & (arm == ci), keep & (arm == ti)
        res = stats.cluster_ztest(y[mc], groups[mc], y[mt], groups[mt], alpha)
        se = (res.ci[1] - res.diff) / stats.z_crit(alpha)
        return res, info, se * se
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
    if metric in METRICS and METRICS[metric].kind == "binary":
        res = stats.two_proportion_ztest(int(yc.sum()), len(yc), int(yt.sum()), len(yt), alpha)
        v = res.mean_control * (1 - res.mean_control) / len(yc) + res.mean_treatment * (
            1 - res.mean_treatment
        ) / len(yt)
        return res, None, v
    res = stats.welch_ttest(yc, yt, alpha)
    return res, None, float(yc.var(ddof=1) / len(yc) + yt.var(ddof=1) / len(yt))


def comparison_entry(
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
        better = (res.diff > 0) == exp.higher_is_better(metric)
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


def sequential(
    exp: Experiment,
    cp_values: list[dict[str, np.ndarray]],
    first_single: np.ndarray,
    varm: np.ndarray,
    x: np.ndarray | None,
    metric: str,
    ci: int,
    ti: int,
    cps: list[float],
    groups: np.ndarray | None = None,
) -> dict[str, Any]:
    """mSPRT over the time checkpoints: always-valid p (running min of 1/Λ) and CIs at each look."""
    series: dict[str, list] = {
        k: [] for k in ("lift", "ci_low", "ci_high", "seq_ci_low", "seq_ci_high", "seq_p")
    }
    state, last = stats.SequentialState(), {}
    for t, values in zip(cps, cp_values, strict=True):
        y = np.where(first_single <= t, values[metric], np.nan)
        res, _, v = compare(metric, y, varm, ci, ti, exp.alpha, x, groups)
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


def arm_series(
    cp_values: list[dict[str, np.ndarray]], first_single: np.ndarray, varm: np.ndarray, metric: str, i: int,
    cps: list[float], alpha: float,
) -> dict[str, list]:  # fmt: skip
    out: dict[str, list] = {"n": [], "value": [], "ci_low": [], "ci_high": []}
    z = stats.z_crit(alpha)
    for t, values in zip(cps, cp_values, strict=True):
        y = values[metric][(first_single <= t) & (varm == i)]
        y = y[~np.isnan(y)]
        n = len(y)
        mean = float(y.mean()) if n else None
        se = float(y.std(ddof=1) / math.sqrt(n)) if n > 1 else None
        out["n"].append(n)
        out["value"].append(mean)
        out["ci_low"].append(mean - z * se if se is not None else None)
        out["ci_high"].append(mean + z * se if se is not None else None)
    return out
