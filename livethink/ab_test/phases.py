"""Phases of an experiment: a change of the arms' weights (or coverage, or arms) starts a new phase.

A ramp (90/10 → 50/50) changes the probability of each arm over time, so viewers pooled across phases are not one
randomised sample: the share of each arm differs between phases and so may the traffic (Simpson's paradox). As in
GrowthBook (``docs/statistics/srm.mdx``; "Experiment phases") and Statsig, each phase is analysed as its own
randomised cohort — the viewers first exposed in it — with SRM tested against *that phase's* weights, and
effects are pooled only as a phase-stratified estimate (inverse-variance weighted per-phase differences), and
only where every phase passed the SRM check.

Pure functions; ``analysis.analyze`` feeds them the store's registered versions (``EventStore.experiment_versions``:
the time each version took effect).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.stats as sps

from livethink.ab_test import stats
from livethink.ab_test.experiment import Experiment


@dataclass(frozen=True)
class Phase:
    """One phase: [start, end) in Unix seconds (the first starts at −∞, the last ends at +∞) and the weight of
    each arm of the current config (0 for an arm the phase's version lacks)."""

    index: int
    start: float
    end: float
    weights: tuple[float, ...]
    coverage: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "start": self.start if math.isfinite(self.start) else None,
            "end": self.end if math.isfinite(self.end) else None,
            "weights": list(self.weights),
            "coverage": self.coverage,
        }


def _layout(exp: Experiment, arms: Sequence[str]) -> tuple[tuple[float, ...], float]:
    by_name = {a.name: a.weight for a in exp.arms}
    return tuple(by_name.get(a, 0.0) for a in arms), exp.coverage


def phases_of(versions: Sequence[tuple[float, Experiment]], current: Experiment) -> list[Phase]:
    """The phases of an experiment from its registered versions ``(effective time, config)``, oldest first: a
    version whose weights, arms or coverage differ from the one before starts a phase at its effective time
    (other changes — a description, a guardrail — do not). Without versions: one phase of ``current``."""
    arms = current.arm_names
    starts: list[tuple[float, tuple[float, ...], float]] = []
    for at, exp in versions:
        layout = _layout(exp, arms)
        if not starts or layout != starts[-1][1:]:
            starts.append((at, *layout))
    if not starts:
        starts = [(-math.inf, *_layout(current, arms))]
    out = []
    for i, (at, weights, coverage) in enumerate(starts):
        start = -math.inf if i == 0 else at
        end = starts[i + 1][0] if i + 1 < len(starts) else math.inf
        out.append(Phase(i, start, end, weights, coverage))
    return out


def phase_srm(observed: Sequence[int], weights: Sequence[float], threshold: float) -> dict[str, Any]:
    """SRM of one phase: chi-square of viewers per arm (by first exposure in the phase) against the phase's
    positive weights (an arm at weight 0 must have no viewers: any is reported as ``unexpected``)."""
    positive = [i for i, w in enumerate(weights) if w > 0]
    unexpected = int(sum(observed[i] for i in range(len(weights)) if weights[i] <= 0))
    if len(positive) < 2:
        return {"p_value": None, "flagged": unexpected > 0, "observed": list(observed), "expected": None,
                "unexpected": unexpected, "arms_tested": positive}  # fmt: skip
    res = stats.srm_test([observed[i] for i in positive], [weights[i] for i in positive], threshold)
    return res.to_dict() | {"flagged": res.flagged or unexpected > 0, "unexpected": unexpected,
                            "arms_tested": positive}  # fmt: skip


def srm_by_phase(
    phases: Sequence[Phase], viewer_arm: np.ndarray, viewer_first_ts: np.ndarray, n_arms: int, threshold: float
) -> list[dict[str, Any]]:
    """Per phase: viewers first exposed in it, per arm, and their SRM test against the phase's weights."""
    out = []
    for ph in phases:
        sel = (viewer_first_ts >= ph.start) & (viewer_first_ts < ph.end)
        observed = np.bincount(viewer_arm[sel], minlength=n_arms).tolist()
        out.append(ph.to_dict() | {"viewers": int(sel.sum()), "srm": phase_srm(observed, ph.weights, threshold)})
    return out


def combined_srm(per_phase: Sequence[dict[str, Any]], threshold: float) -> dict[str, Any]:
    """The experiment's SRM from its phases: flagged when any phase is; p the smallest phase p (each phase is
    tested against its own weights); observed and expected summed over phases (expected from each phase's own
    weights, so a ramp is not a mismatch)."""
    tested = [p["srm"] for p in per_phase if p["srm"].get("p_value") is not None]
    n_arms = len(per_phase[0]["weights"]) if per_phase else 0
    observed = np.zeros(n_arms)
    expected = np.zeros(n_arms)
    for p in per_phase:
        observed += p["srm"]["observed"] if len(p["srm"]["observed"]) == n_arms else 0
        if p["srm"].get("expected") is not None:
            for j, i in enumerate(p["srm"]["arms_tested"]):
                expected[i] += p["srm"]["expected"][j]
    return {
        "p_value": min((s["p_value"] for s in tested), default=1.0),
        "flagged": any(p["srm"]["flagged"] for p in per_phase),
        "observed": [int(x) for x in observed],
        "expected": [float(x) for x in expected],
        "threshold": threshold,
        "phases": len(per_phase),
        "flagged_phases": [p["index"] for p in per_phase if p["srm"]["flagged"]],
    }


def stratified(diffs: Sequence[float], variances: Sequence[float], alpha: float) -> dict[str, Any] | None:
    """Phase-stratified effect: the inverse-variance weighted mean of per-phase differences, its standard
    error, normal CI and two-sided p. None when no phase has a finite positive variance."""
    d = np.asarray(diffs, dtype=float)
    v = np.asarray(variances, dtype=float)
    ok = np.isfinite(d) & np.isfinite(v) & (v > 0)
    if not ok.any():
        return None
    w = 1 / v[ok]
    est = float((w * d[ok]).sum() / w.sum())
    se = float(math.sqrt(1 / w.sum()))
    z = stats.z_crit(alpha)
    return {
        "diff": est,
        "se": se,
        "ci": (est - z * se, est + z * se),
        "p_value": float(2 * sps.norm.sf(abs(est / se))),
        "phases_used": int(ok.sum()),
    }
