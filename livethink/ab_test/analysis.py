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

from livethink.ab_test import stats
from livethink.ab_test.columns import RawData, load, pre_period_covariates, response_values, viewer_metrics
from livethink.ab_test.comparisons import arm_series, compare, comparison_entry, sequential
from livethink.ab_test.experiment import Experiment
from livethink.ab_test.metrics import METRICS, RESPONSE_METRICS, VIEWER_METRICS
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

    @classmethod
    def of(cls, data: RawData, lookback_days: float) -> ViewerPanel:
        single = ~data.viewer_multi
        values = {m: v[single] for m, v in viewer_metrics(data).items()}
        covariates = {m: v[single] for m, v in pre_period_covariates(data, lookback_days).items()}
        return cls(data.viewer_arm[single], data.viewer_first_ts[single], values, covariates)

    def at(self, data: RawData, until: float) -> dict[str, np.ndarray]:
        """The values counting outcomes up to ``until`` (a checkpoint)."""
        return {m: v[~data.viewer_multi] for m, v in viewer_metrics(data, until=until).items()}


def arm_statistics(exp: Experiment, data: RawData, panel: ViewerPanel) -> dict[str, dict[str, Any]]:
    """Per arm: weight, variant, counts, the mean of each viewer metric, and each response metric (mean for
    a rate, percentiles for a continuous one)."""
    out: dict[str, dict[str, Any]] = {}
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
        }
        for m in VIEWER_METRICS:
            entry[m] = float(panel.values[m][in_arm].mean()) if in_arm.any() else None
        for m in RESPONSE_METRICS:
            v = response_values(data, m)[r_in]
            entry[m] = _percentiles(v) if METRICS[m].kind == "continuous" else _rate(v)
        out[arm.name] = entry
    return out


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
        for m in VIEWER_METRICS:
            x = panel.covariates[m] if use_cuped else None
            res, cinfo, _ = compare(m, panel.values[m], panel.arm, ci, ti, exp.alpha, x)
            if res is None:
                continue
            seq = sequential(exp, cp_values, panel.first_ts, panel.arm, x, m, ci, ti, cps)
            series = seq.pop("series")
            if m == exp.primary_metric:
                timeseries["lift"][arms[ti]] = series
            comparisons.append(comparison_entry(exp, m, "viewer", arms, ci, ti, res, cinfo, seq, alpha_adj))
        for m in RESPONSE_METRICS:
            res, _, _ = compare(m, response_values(data, m), data.resp["arm"], ci, ti, exp.alpha)
            if res is not None:
                comparisons.append(comparison_entry(exp, m, "response", arms, ci, ti, res, None, None, alpha_adj))
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
    data = load(store, exp)
    use_cuped = exp.cuped.enabled if cuped is None else cuped
    panel = ViewerPanel.of(data, exp.cuped.lookback_days)
    arms = arm_statistics(exp, data, panel)
    cps = checkpoint_times(data, checkpoints)
    comparisons, timeseries = compare_arms(exp, data, panel, cps, use_cuped)
    summary = {
        "experiment": exp.name,
        "config_digest": exp.digest(),
        "generated_at": time.time(),
        "control": exp.control_arm,
        "primary_metric": exp.primary_metric,
        "alpha": exp.alpha,
        "sequential": exp.sequential.enabled,
        "cuped": use_cuped,
        "data": data_summary(data, cps),
        "arms": arms,
        "srm": srm_check(exp, [a["viewers"] for a in arms.values()]),
        "comparisons": comparisons,
        "guardrails": guardrails(exp, comparisons),
        "timeseries": timeseries,
    }
    summary["verdict"] = verdict(exp, summary)
    return Analysis(_clean(summary), panel.values, panel.arm, dict(data.resp))
