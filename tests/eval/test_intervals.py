"""The benchmarks' intervals (livethink.eval.intervals) on hand-computed cases and against scipy / statsmodels."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from livethink.eval.intervals import (
    counts_of,
    mcnemar_exact,
    paired_bootstrap,
    pass_rate,
    pooled_rate,
    rate_difference,
    seed_range,
)


def test_pass_rate_is_clopper_pearson():
    # k = 0 and k = n have closed forms: upper 1 − (α/2)^(1/n), lower (α/2)^(1/n)
    none, every = pass_rate(0, 10), pass_rate(10, 10)
    assert (none.estimate, none.low) == (0.0, 0.0) and none.high == pytest.approx(1 - 0.025 ** 0.1, abs=1e-9)
    assert (every.estimate, every.high) == (1.0, 1.0) and every.low == pytest.approx(0.025 ** 0.1, abs=1e-9)
    # otherwise the beta quantiles: Beta(α/2; k, n − k + 1) and Beta(1 − α/2; k + 1, n − k); scipy's exact binomtest agrees
    half = pass_rate(5, 10)
    assert half.low == pytest.approx(stats.beta.ppf(0.025, 5, 6), abs=1e-9)
    assert half.high == pytest.approx(stats.beta.ppf(0.975, 6, 5), abs=1e-9)
    exact = stats.binomtest(222, 500).proportion_ci(0.95, method="exact")
    rft = pass_rate(222, 500)  # the RFT student's 44.4% of 500 test tasks
    assert (rft.low, rft.high) == (pytest.approx(exact.low, abs=1e-9), pytest.approx(exact.high, abs=1e-9))
    assert (round(100 * rft.low, 1), round(100 * rft.high, 1)) == (40.0, 48.9)
    assert pass_rate(1, 5).as_dict(scale=100, digits=1) == {"mean": 20.0, "low": 0.5, "high": 71.6,
                                                            "method": "Clopper-Pearson"}
    with pytest.raises(ValueError, match="0 <= successes <= n"):
        pass_rate(6, 5)


def test_pooled_rate_pools_the_count_over_tasks_and_seeds():
    # seeds at 40% and 60% of 10 tasks: 10 of 20, the same interval as pass_rate(10, 20), never outside [0, 1]
    pooled = pooled_rate([0.4, 0.6], 10)
    assert pooled.estimate == 0.5 and (pooled.low, pooled.high) == (pass_rate(10, 20).low, pass_rate(10, 20).high)
    assert pooled.low == pytest.approx(stats.beta.ppf(0.025, 10, 11), abs=1e-9)
    # the t-interval over these three seeds (0.0, 0.02, 0.3 of 50 tasks) would reach below 0
    low_seeds = pooled_rate([0.0, 0.02, 0.3], 50)
    assert 0.0 <= low_seeds.low <= low_seeds.estimate <= low_seeds.high <= 1.0
    assert counts_of([0.4193], 10_000) == ([4193], [10_000])  # a rate rounded to 4 decimals
    with pytest.raises(ValueError, match="not a share of 10 tasks"):
        pooled_rate([0.45], 10)
    with pytest.raises(ValueError, match="one task count per rate"):
        pooled_rate([0.4, 0.5], [10])


def test_seed_range_describes_the_spread():
    spread = seed_range([80.0, 90.0, 100.0])
    assert (spread.estimate, spread.low, spread.high, spread.method) == (90.0, 80.0, 100.0, "range over seeds")


def test_rate_difference_is_newcombes_hybrid_score_interval():
    """Newcombe (1998), method 10: d − √((p₁ − l₁)² + (u₂ − p₂)²), d + √((u₁ − p₁)² + (p₂ − l₂)²) with Wilson
    intervals (l, u) of each proportion."""
    from statsmodels.stats.proportion import proportion_confint

    diff = rate_difference([0.45, 0.55], 100, [0.4], 100)  # 100 of 200 against 40 of 100
    (l1, u1), (l2, u2) = proportion_confint(100, 200, method="wilson"), proportion_confint(40, 100, method="wilson")
    assert diff.estimate == pytest.approx(0.1)
    assert diff.low == pytest.approx(0.1 - ((0.5 - l1) ** 2 + (u2 - 0.4) ** 2) ** 0.5, abs=1e-9)
    assert diff.high == pytest.approx(0.1 + ((u1 - 0.5) ** 2 + (0.4 - l2) ** 2) ** 0.5, abs=1e-9)


def test_paired_bootstrap_degenerate_cases_by_hand():
    same = paired_bootstrap([1, 0, 1, 1], [1, 0, 1, 1], n_resamples=500)
    assert (same.difference, same.low, same.high, same.excludes_zero) == (0.0, 0.0, 0.0, False)
    # A right on every task, B on none: every resample gives 1
    sure = paired_bootstrap([1, 1, 1], [0, 0, 0], n_resamples=500)
    assert (sure.difference, sure.low, sure.high, sure.excludes_zero) == (1.0, 1.0, 1.0, True)
    assert sure.method == "paired bootstrap over tasks" and (sure.seeds_a, sure.seeds_b, sure.n_tasks) == (1, 1, 3)
    with pytest.raises(ValueError, match="same tasks"):
        paired_bootstrap([1, 0, 1], [1, 0])


def test_paired_bootstrap_with_one_seed_each_is_scipys_paired_bootstrap():
    rng = np.random.default_rng(3)
    b = (rng.random(400) < 0.40).astype(float)
    a = np.where(rng.random(400) < 0.15, 1.0, b)  # A = B, plus some tasks only A gets right
    ours = paired_bootstrap(a, b, n_resamples=20_000, seed=1)
    ref = stats.bootstrap((a, b), lambda x, y, axis: x.mean(axis) - y.mean(axis), paired=True, vectorized=True,
                          n_resamples=20_000, method="percentile", random_state=np.random.default_rng(2))
    assert ours.difference == pytest.approx(a.mean() - b.mean())
    assert ours.low == pytest.approx(ref.confidence_interval.low, abs=0.006)
    assert ours.high == pytest.approx(ref.confidence_interval.high, abs=0.006)
    assert ours.excludes_zero and -1 <= ours.low <= ours.high <= 1


def test_paired_bootstrap_over_seeds_counts_the_seeds_spread():
    rng = np.random.default_rng(0)
    base = (rng.random(300) < 0.4).astype(float)
    b = np.stack([base, base, base])
    # A's three seeds: two like B, one right on 60 more tasks; tasks alone would call the mean gain (+6.7 points) sure
    lucky = base.copy()
    lucky[np.flatnonzero(base == 0)[:60]] = 1.0
    a = np.stack([base, base, lucky])
    over_seeds = paired_bootstrap(a, b, n_resamples=4000)
    assert over_seeds.method == "paired bootstrap over tasks and seeds" and over_seeds.seeds_a == 3
    assert over_seeds.difference == pytest.approx(60 / 900)
    assert over_seeds.low == 0.0 and not over_seeds.excludes_zero  # a resample of A's seeds without the lucky one
    tasks_only = paired_bootstrap(a.mean(axis=0), b.mean(axis=0), n_resamples=4000)
    assert tasks_only.excludes_zero


def test_mcnemar_exact_by_hand():
    # 1 task only A gets right, 5 only B: p = 2 · P(X ≤ 1 | n = 6, ½) = 2 · (1 + 6) / 64
    a = [1, 0, 0, 0, 0, 0, 1, 1, 0]
    b = [0, 1, 1, 1, 1, 1, 1, 1, 0]
    test = mcnemar_exact(a, b)
    assert (test.only_a, test.only_b) == (1, 5)
    assert test.p_value == pytest.approx(14 / 64) and test.difference == pytest.approx(-4 / 9)
    assert mcnemar_exact([1, 0], [1, 0]).p_value == pytest.approx(1.0)
    with pytest.raises(ValueError, match="same tasks"):
        mcnemar_exact([1], [1, 0])
