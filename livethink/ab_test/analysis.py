"""Analysis of one experiment: per-arm statistics, tests, SRM, sequential p-values, CUPED, verdict.

Units: the viewer (the unit of randomisation) for conversion and GMV metrics; the reply for latency, tokens and
other guardrails. A viewer's arm is the arm of their first exposure; viewers exposed to more than one arm
(possible after a weight change) are left out of the viewer-level metrics and counted in
``data.multiple_arm_viewers``. Outcomes count from the viewer's first exposure on (``ATTRIBUTION_SKEW_S``
tolerates clock skew); earlier outcomes within the CUPED lookback form the pre-period covariate; outcomes of
viewers never exposed are counted in ``data.unattributed_outcomes`` and otherwise ignored.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from statsmodels.stats.proportion import proportion_confint

from livethink.ab_test import stats
from livethink.ab_test.columns import (
    STATUSES,
    RawData,
    cohort,
    load,
    outcome_metrics,
    pre_period_covariates,
    response_values,
    unit_level,
    viewer_metrics,
)
from livethink.ab_test.comparisons import arm_series, compare, comparison_entry, sequential
from livethink.ab_test.errors import UnknownExperimentError
from livethink.ab_test.experiment import Experiment
from livethink.ab_test.metrics import METRICS, RESPONSE_METRICS
from livethink.ab_test.phases import Phase, combined_srm, phases_of, srm_by_phase, stratified
from livethink.ab_test.store import EventStore
from livethink.ab_test.verdict import guardrails, verdict

CHECKPOINTS = 24


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


@dataclass
class Analysis:
    """Result of ``analyze``: a JSON-safe ``summary`` plus arrays the report plots."""

    summary: dict[str, Any]
    viewer_values: dict[str, np.ndarray] = field(default_factory=dict)
    viewer_arm: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    responses: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ViewerPanel:
    """The viewers that count for viewer-level tests (exposed to one arm only) and their per-metric values."""

    arm: np.ndarray  # index into the experiment's arms
    first_ts: np.ndarray
    values: dict[str, np.ndarray]
    covariates: dict[str, np.ndarray]  # CUPED's pre-period value per metric

    exp: Experiment | None = None
    groups: np.ndarray | None = None  # each viewer's randomisation unit (session, stream); None: the viewer

    @classmethod
    def of(cls, data: RawData, lookback_days: float, exp: Experiment | None = None) -> ViewerPanel:
        single = ~data.viewer_multi
        values = {m: v[single] for m, v in _all_viewer_metrics(data, exp).items()}
        covariates = {m: v[single] for m, v in pre_period_covariates(data, lookback_days).items()}
        groups = None if data.viewer_unit is None else data.viewer_unit[single].astype(str)
        return cls(data.viewer_arm[single], data.viewer_first_ts[single], values, covariates, exp, groups)

    def at(self, data: RawData, until: float) -> dict[str, np.ndarray]:
        """The values counting outcomes up to ``until`` (a checkpoint)."""
        return {m: v[~data.viewer_multi] for m, v in _all_viewer_metrics(data, self.exp, until).items()}


def _all_viewer_metrics(data: RawData, exp: Experiment | None, until: float = math.inf) -> dict[str, np.ndarray]:
    out = viewer_metrics(data, until=until)
    if exp is not None and exp.outcomes:
        out.update(outcome_metrics(data, exp, until=until))
    return out


def arm_statistics(exp: Experiment, data: RawData, panel: ViewerPanel) -> dict[str, dict[str, Any]]:
    """Per arm: weight, variant, counts, the mean of each viewer metric, and each response metric (mean for
    a rate, percentiles for a continuous one)."""
    out: dict[str, dict[str, Any]] = {}
    unit_arm, _ = unit_level(data)
    for i, arm in enumerate(exp.arms):
        in_arm = panel.arm == i
        r_in = data.resp["arm"] == i
        entry: dict[str, Any] = {
            "weight": arm.weight,
            "variant": arm.variant,
            "viewers": int((data.viewer_arm == i).sum()),
            "analysed_viewers": int(in_arm.sum()),
            "exposures": int(data.exposures_per_arm[i]),
            "responses": int(r_in.sum()),
            "units": int((unit_arm == i).sum()),  # randomisation units: viewers, sessions or streams
        }
        status = np.bincount(data.resp["status"][r_in], minlength=len(STATUSES))
        entry.update({s: int(status[k]) for k, s in enumerate(STATUSES)})
        for m in exp.viewer_metrics:
            entry[m] = _rate(panel.values[m][in_arm])
        for m in RESPONSE_METRICS:
            v = response_values(data, m)[r_in]
            entry[m] = _percentiles(v) if METRICS[m].kind == "continuous" else _rate(v)
        good = int(np.nansum(response_values(data, "goodput")[r_in]))
        entry["good"] = good
        entry["goodput_ci"] = goodput_interval(good, int(r_in.sum()), exp.alpha)
        out[arm.name] = entry
    return out


def goodput_interval(good: int, sent: int, alpha: float = 0.05) -> list[float] | None:
    """Wilson score interval of an arm's goodput (good replies of the requests sent), statsmodels
    ``proportion_confint(method="wilson")``; None before any request."""
    if sent == 0:
        return None
    lo, hi = proportion_confint(good, sent, alpha=alpha, method="wilson")
    return [float(lo), float(hi)]


def _rate(v: np.ndarray) -> float | None:
    v = v[~np.isnan(v)]
    return float(v.mean()) if len(v) else None


def srm_check(exp: Experiment, viewers_per_arm: list[int]) -> dict[str, Any]:
    """Sample-ratio mismatch: chi-square of viewers (by first-exposure arm) against the arms' positive weights."""
    positive = [i for i, a in enumerate(exp.arms) if a.weight > 0]
    srm = stats.srm_test(
        [viewers_per_arm[i] for i in positive], [exp.arms[i].weight for i in positive], exp.srm_threshold
    )
    return srm.to_dict() | {"arms": [exp.arms[i].name for i in positive]}


def phase_analysis(
    exp: Experiment, data: RawData, phases: list[Phase], use_cuped: bool
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """SRM per phase (each against its own weights) and combined; the primary metric's test per phase and the
    phase-stratified pooled effect of each treatment (only when no phase is flagged)."""
    unit_arm, unit_first = unit_level(data)  # SRM counts randomisation units (viewers, sessions or streams)
    per_phase = srm_by_phase(phases, unit_arm, unit_first, len(exp.arms), exp.srm_threshold)
    srm = combined_srm(per_phase, exp.srm_threshold) | {"arms": list(exp.arm_names)}
    arms = exp.arm_names
    ci = arms.index(exp.control_arm)
    pooled: dict[str, Any] = {"metric": exp.primary_metric, "valid": not srm["flagged"], "arms": {}}
    if srm["flagged"]:
        pooled["reason"] = f"SRM in phase(s) {srm['flagged_phases']}: phases are not pooled"
    for ph, entry in zip(phases, per_phase, strict=True):
        part = cohort(data, ph.start, ph.end)
        panel = ViewerPanel.of(part, exp.cuped.lookback_days, exp)
        entry["tests"] = {}
        for ti in range(len(arms)):
            if ti == ci or ph.weights[ti] <= 0 or ph.weights[ci] <= 0:
                continue
            m = exp.primary_metric
            x = panel.covariates.get(m) if use_cuped else None
            res, _, v = compare(m, panel.values[m], panel.arm, ci, ti, exp.alpha, x, panel.groups)
            if res is not None:
                entry["tests"][arms[ti]] = {"diff": res.diff, "var": v, "lift": res.lift, "p_value": res.p_value,
                                            "n_control": res.n_control, "n_treatment": res.n_treatment}  # fmt: skip
    for ti in range(len(arms)):
        if ti == ci:
            continue
        rows = [e["tests"][arms[ti]] for e in per_phase if arms[ti] in e["tests"]]
        est = stratified([r["diff"] for r in rows], [r["var"] for r in rows], exp.alpha) if rows else None
        pooled["arms"][arms[ti]] = est if pooled["valid"] else None
    return srm, per_phase, pooled


def checkpoint_times(data: RawData, n: int) -> list[float]:
    """``n - 1`` evenly spaced looks after the first exposure up to the last event (one look if they coincide)."""
    if not len(data.viewer_first_ts):
        return []
    t0 = float(data.viewer_first_ts.min())
    t1 = float(max(data.viewer_first_ts.max(), data.out_ts.max(initial=0)))
    return list(np.linspace(t0, t1, max(2, n))[1:]) if t1 > t0 else [t1]


def compare_arms(
    exp: Experiment, data: RawData, panel: ViewerPanel, cps: list[float], use_cuped: bool
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every treatment against the control on every metric (Bonferroni over treatments), and the primary
    metric's time series (lift per treatment, value per arm) over the checkpoints."""
    arms = exp.arm_names
    ci = arms.index(exp.control_arm)
    treatments = [i for i in range(len(arms)) if i != ci]
    alpha_adj = exp.alpha / max(1, len(treatments))
    cp_values = [panel.at(data, t) for t in cps]
    comparisons: list[dict[str, Any]] = []
    timeseries: dict[str, Any] = {"metric": exp.primary_metric, "checkpoints": cps, "arms": {}, "lift": {}}
    for ti in treatments:
        for m in exp.viewer_metrics:
            x = panel.covariates.get(m) if use_cuped else None
            res, cinfo, _ = compare(m, panel.values[m], panel.arm, ci, ti, exp.alpha, x, panel.groups)
            if res is None:
                continue
            seq = sequential(exp, cp_values, panel.first_ts, panel.arm, x, m, ci, ti, cps, panel.groups)
            series = seq.pop("series")
            if m == exp.primary_metric:
                timeseries["lift"][arms[ti]] = series
            comparisons.append(comparison_entry(exp, m, "viewer", arms, ci, ti, res, cinfo, seq, alpha_adj))
        for m in RESPONSE_METRICS:
            values = response_values(data, m)
            res, _, _ = compare(m, values, data.resp["arm"], ci, ti, exp.alpha)
            if res is None:
                continue
            seq = None
            if exp.sequential.enabled and m in exp.guardrails and cps:  # sequential guardrails: safe to watch
                looks = [*cps[:-1], math.inf]  # the last look takes every reply, even one after the last outcome
                seq = sequential(exp, [{m: values}] * len(looks), data.resp["ts"], data.resp["arm"], None, m, ci,
                                 ti, looks)  # fmt: skip
                seq.pop("series")
            comparisons.append(comparison_entry(exp, m, "response", arms, ci, ti, res, None, seq, alpha_adj))
    for i, name in enumerate(arms):
        timeseries["arms"][name] = arm_series(cp_values, panel.first_ts, panel.arm, exp.primary_metric, i, cps,
                                              exp.alpha)  # fmt: skip
    return comparisons, timeseries


def data_summary(data: RawData, cps: list[float]) -> dict[str, Any]:
    """What was analysed: event counts, simulated share, viewers left out, time range."""
    return {
        "events": data.total_events,
        "simulated_events": data.simulated_events,
        "simulated": data.simulated_events > 0,
        "viewers": int(len(data.viewer_ids)),
        "multiple_arm_viewers": int(data.viewer_multi.sum()),
        "unattributed_outcomes": int((data.out_viewer < 0).sum()),
        "first_ts": float(data.viewer_first_ts.min()) if len(data.viewer_first_ts) else None,
        "last_ts": cps[-1] if cps else None,
    }


def analyze(
    store: EventStore,
    experiment: Experiment | str,
    *,
    cuped: bool | None = None,
    checkpoints: int = CHECKPOINTS,
) -> Analysis:
    """Analyse one experiment (a registered name or an ``Experiment``); ``cuped`` overrides the config."""
    exp = store.experiment(experiment) if isinstance(experiment, str) else experiment
    try:
        versions = store.experiment_versions(exp.name)
    except UnknownExperimentError:
        versions = []
    phases = phases_of(versions, exp)
    data = load(store, exp)
    use_cuped = exp.cuped.enabled if cuped is None else cuped
    panel = ViewerPanel.of(data, exp.cuped.lookback_days, exp)
    arms = arm_statistics(exp, data, panel)
    srm, per_phase, pooled = phase_analysis(exp, data, phases, use_cuped)
    # the tests and the verdict: the current phase's randomised cohort (all data when there is one phase)
    current = data if len(phases) == 1 else cohort(data, phases[-1].start, phases[-1].end)
    cur_panel = panel if current is data else ViewerPanel.of(current, exp.cuped.lookback_days, exp)
    cps = checkpoint_times(current, checkpoints)
    comparisons, timeseries = compare_arms(exp, current, cur_panel, cps, use_cuped)
    summary = {
        "experiment": exp.name,
        "config_digest": exp.digest(),
        "generated_at": time.time(),
        "control": exp.control_arm,
        "primary_metric": exp.primary_metric,
        "alpha": exp.alpha,
        "sequential": exp.sequential.enabled,
        "cuped": use_cuped,
        "unit": exp.unit,
        # one regime per view: the live view decides with always-valid p-values and intervals (safe to watch
        # continuously); the fixed-horizon numbers are for the end-of-test report only
        "regime": {"live": "always-valid (mSPRT)" if exp.sequential.enabled else "fixed-horizon",
                   "fixed_horizon": "end-of-test report only" if exp.sequential.enabled else "live"},  # fmt: skip
        "data": data_summary(data, cps),
        "arms": arms,
        "srm": srm,
        "phase": {"current": phases[-1].index, "count": len(phases), "tests_on": "current phase"
                  if len(phases) > 1 else "all viewers"},  # fmt: skip
        "phases": per_phase,
        "pooled": pooled,
        "comparisons": comparisons,
        "guardrails": guardrails(exp, comparisons),
        "timeseries": timeseries,
    }
    summary["verdict"] = verdict(exp, summary)
    responses = dict(data.resp) | {"latency_ms": response_values(data, "latency_ms")}  # answered replies only
    return Analysis(_clean(summary), panel.values, panel.arm, responses)
