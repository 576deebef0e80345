"""Phases: a weight change starts a phase; SRM per phase against that phase's weights; effects pooled only as a
phase-stratified estimate and only when no phase is flagged. Hand-computed numbers."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as sps

from livethink.ab_test.analysis import analyze
from livethink.ab_test.experiment import parse_experiment
from livethink.ab_test.hooks import compact_summary
from livethink.ab_test.phases import combined_srm, phase_srm, phases_of, srm_by_phase, stratified
from livethink.ab_test.store import EventStore


def _exp(w: float, **kw: object):
    return parse_experiment({"name": "ramp", "arms": [{"name": "A", "weight": 1 - w}, {"name": "B", "weight": w}],
                             "min_viewers_per_arm": 1, "srm_threshold": 0.01, **kw})  # fmt: skip


def test_phases_start_at_weight_changes_only() -> None:
    v1, v1b, v2 = _exp(0.1), _exp(0.1, description="same weights"), _exp(0.5)
    ph = phases_of([(100.0, v1), (150.0, v1b), (200.0, v2)], v2)
    assert [(p.start, p.end, p.weights) for p in ph] == [(-math.inf, 200.0, (0.9, 0.1)), (200.0, math.inf, (0.5, 0.5))]
    assert [p.index for p in phases_of([], v2)] == [0]


def test_srm_per_phase_against_its_own_weights() -> None:
    # phase 0 (90/10): 900/100 viewers; phase 1 (50/50): 500/500. Pooled, 1400/600 against 50/50 is a mismatch
    # (chi2 = 2·400²/1000 = 320), against 90/10 too; per phase both are exact.
    v1, v2 = _exp(0.1), _exp(0.5)
    phases = phases_of([(100.0, v1), (200.0, v2)], v2)
    arm = np.array([0] * 900 + [1] * 100 + [0] * 500 + [1] * 500)
    first = np.array([150.0] * 1000 + [250.0] * 1000)
    per = srm_by_phase(phases, arm, first, 2, 0.01)
    assert [p["viewers"] for p in per] == [1000, 1000]
    assert [p["srm"]["p_value"] for p in per] == [pytest.approx(1.0), pytest.approx(1.0)]
    both = combined_srm(per, 0.01)
    assert not both["flagged"] and both["observed"] == [1400, 600] and both["expected"] == [1400.0, 600.0]
    # 25 of B's 500 served A in phase 1: chi2 = 2·25²/500 = 2.5, not flagged; 50 of them: chi2 = 10, flagged
    small = srm_by_phase(phases, np.array([0] * 900 + [1] * 100 + [0] * 525 + [1] * 475), first, 2, 0.01)
    assert small[1]["srm"]["chi2"] == pytest.approx(2.5) and not combined_srm(small, 0.01)["flagged"]
    per = srm_by_phase(phases, np.array([0] * 900 + [1] * 100 + [0] * 550 + [1] * 450), first, 2, 0.01)
    assert per[1]["srm"]["p_value"] == pytest.approx(sps.chi2.sf(10, 1))
    flagged = combined_srm(per, 0.01)
    assert flagged["flagged"] and flagged["flagged_phases"] == [1] and flagged["p_value"] == per[1]["srm"]["p_value"]
    # an arm at weight 0 that still gets viewers is a mismatch by itself
    assert phase_srm([10, 5], [1.0, 0.0], 0.01)["flagged"]


def test_stratified_effect_by_hand() -> None:
    # diffs 0.1 (var 0.01) and 0.4 (var 0.04): weights 100, 25 → (10 + 10) / 125 = 0.16, se = 1/√125
    r = stratified([0.1, 0.4], [0.01, 0.04], 0.05)
    assert r["diff"] == pytest.approx(0.16) and r["se"] == pytest.approx(1 / math.sqrt(125))
    assert r["p_value"] == pytest.approx(2 * sps.norm.sf(0.16 * math.sqrt(125)))
    assert r["ci"][0] == pytest.approx(0.16 - 1.959963984540054 / math.sqrt(125))
    assert stratified([1.0], [0.0], 0.05) is None


@pytest.fixture
def ramp_store(tmp_path: Path):
    """A 90/10 canary (1,000 viewers: 900/100) ramped to 50/50 (1,000 viewers: 500/500); B converts more."""
    s = EventStore(tmp_path / "ramp.db")
    now = time.time()
    t0, t1 = now - 7200, now - 3600
    s.register_experiment(_exp(0.1), effective_at=t0)
    s.register_experiment(_exp(0.5), effective_at=t1)
    ev = []
    for start, n_a, n_b in ((t0, 900, 100), (t1, 500, 500)):
        for arm, n, buyers in (("A", n_a, 0.1), ("B", n_b, 0.2)):
            for i in range(n):
                vid = f"{arm}-{int(start)}-{i}"
                ts = start + 1 + i * 3
                ev.append({"kind": "exposure", "event_id": f"x{vid}", "experiment": "ramp", "viewer_id": vid,
                           "ts": ts, "arm": arm})  # fmt: skip
                if i < n * buyers:
                    ev.append({"kind": "outcome", "event_id": f"o{vid}", "experiment": "ramp", "viewer_id": vid,
                               "ts": ts + 5, "type": "order", "gmv": 10.0})  # fmt: skip
    s.append(ev)
    yield s
    s.close()


def test_a_ramp_is_not_a_sample_ratio_mismatch(ramp_store: EventStore) -> None:
    s = analyze(ramp_store, "ramp").summary
    assert not s["srm"]["flagged"] and not s["verdict"]["line"].startswith("SRM")
    assert s["phase"] == {"current": 1, "count": 2, "tests_on": "current phase"}
    assert [p["weights"] for p in s["phases"]] == [[0.9, 0.1], [0.5, 0.5]]
    assert [p["srm"]["observed"] for p in s["phases"]] == [[900, 100], [500, 500]]
    # the tests are the current phase's cohort: 500 vs 500, order rate 0.1 vs 0.2
    primary = next(c for c in s["comparisons"] if c["metric"] == "order_rate")
    assert (primary["n_control"], primary["n_treatment"]) == (500, 500) and primary["diff"] == pytest.approx(0.1)
    # per phase the diff is 0.1 both times, so the stratified estimate is exactly 0.1
    assert [p["tests"]["B"]["diff"] for p in s["phases"]] == [pytest.approx(0.1), pytest.approx(0.1)]
    assert s["pooled"]["valid"] and s["pooled"]["arms"]["B"]["diff"] == pytest.approx(0.1)
    live = compact_summary(s)
    assert live["phase"]["count"] == 2 and [p["srm_flagged"] for p in live["phases"]] == [False, False]


def test_pooling_against_the_latest_weights_would_flag(ramp_store: EventStore) -> None:
    """What the analysis did before phases: every viewer against the latest weights (50/50) is a false alarm."""
    from livethink.ab_test.analysis import srm_check

    assert srm_check(_exp(0.5), [1400, 600])["flagged"]
