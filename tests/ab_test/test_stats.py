"""Statistics: hand-computed cases and agreement with scipy / statsmodels to 1e-6."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.proportion import (
    confint_proportions_2indep,
    proportions_ztest,
    samplesize_proportions_2indep_onetail,
)

from livethink.ab_test import stats

TOL = 1e-6


def test_two_proportion_z_by_hand() -> None:
    r = stats.two_proportion_ztest(100, 1000, 130, 1000)
    pooled = 230 / 2000  # 0.115
    se0 = math.sqrt(pooled * (1 - pooled) * (2 / 1000))
    assert r.statistic == pytest.approx(0.03 / se0, abs=1e-12)
    assert r.statistic == pytest.approx(2.1027, abs=1e-4)
    assert r.diff == pytest.approx(0.03)
    half = 1.959963985 * math.sqrt(0.1 * 0.9 / 1000 + 0.13 * 0.87 / 1000)
    assert r.ci == pytest.approx((0.03 - half, 0.03 + half), abs=1e-9)
    # delta-method lift: var = v_t/p_c² + p_t² v_c/p_c⁴ = 0.01131 + 0.01521
    assert r.lift == pytest.approx(0.3)
    se_lift = math.sqrt(0.01131 + 0.01521)
    assert r.lift_ci == pytest.approx((0.3 - 1.959963985 * se_lift, 0.3 + 1.959963985 * se_lift), abs=1e-8)


@pytest.mark.parametrize(
    ("x_c", "n_c", "x_t", "n_t"), [(120, 2000, 150, 2010), (5, 80, 1, 95), (4000, 50000, 4400, 49000)]
)
def test_two_proportion_z_matches_statsmodels(x_c: int, n_c: int, x_t: int, n_t: int) -> None:
    r = stats.two_proportion_ztest(x_c, n_c, x_t, n_t)
    z, p = proportions_ztest([x_t, x_c], [n_t, n_c])
    assert r.statistic == pytest.approx(z, abs=TOL) and r.p_value == pytest.approx(p, abs=TOL)
    lo, hi = confint_proportions_2indep(x_t, n_t, x_c, n_c, method="wald", compare="diff")
    assert r.ci[0] == pytest.approx(lo, abs=TOL) and r.ci[1] == pytest.approx(hi, abs=TOL)


def test_two_proportion_degenerate() -> None:
    r = stats.two_proportion_ztest(0, 100, 0, 100)
    assert r.p_value == 1.0 and r.lift is None
    with pytest.raises(ValueError, match="x:"):
        stats.two_proportion_ztest(5, 4, 1, 10)
    with pytest.raises(ValueError, match="n:"):
        stats.two_proportion_ztest(0, 0, 1, 10)


def test_welch_by_hand() -> None:
    r = stats.welch_ttest([1, 2, 3, 4], [2, 4, 6, 8, 10])
    a, b = (5 / 3) / 4, 10 / 5
    assert r.statistic == pytest.approx(3.5 / math.sqrt(a + b), abs=1e-12)
    assert r.df == pytest.approx((a + b) ** 2 / (a**2 / 3 + b**2 / 4), abs=1e-12)
    assert r.df == pytest.approx(5.5208, abs=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_welch_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    c, t = rng.lognormal(0, 1, 40 + seed * 50), rng.lognormal(0.2, 1.3, 70)
    r = stats.welch_ttest(c, t)
    ref = sps.ttest_ind(t, c, equal_var=False)
    assert r.statistic == pytest.approx(ref.statistic, abs=TOL)
    assert r.p_value == pytest.approx(ref.pvalue, abs=TOL)
    assert r.df == pytest.approx(ref.df, abs=TOL)
    lo, hi = ref.confidence_interval(0.95)
    assert r.ci[0] == pytest.approx(lo, abs=TOL) and r.ci[1] == pytest.approx(hi, abs=TOL)
    fs = sps.ttest_ind_from_stats(
        t.mean(), t.std(ddof=1), len(t), c.mean(), c.std(ddof=1), len(c), equal_var=False
    )
    assert r.p_value == pytest.approx(fs.pvalue, abs=TOL)


def test_srm_by_hand_and_scipy() -> None:
    r = stats.srm_test([5100, 4900], [0.5, 0.5])
    assert r.chi2 == pytest.approx(4.0) and r.df == 1
    assert r.p_value == pytest.approx(0.0455003, abs=1e-6) and not r.flagged
    obs, w = [9120, 1000, 880], [0.8, 0.1, 0.1]
    r3 = stats.srm_test(obs, w)
    ref = sps.chisquare(obs, np.array(w) * sum(obs))
    assert r3.chi2 == pytest.approx(ref.statistic, abs=TOL) and r3.p_value == pytest.approx(
        ref.pvalue, abs=TOL
    )
    flagged = stats.srm_test([5300, 4700], [0.5, 0.5])  # chi2 = 36
    assert flagged.flagged and flagged.p_value < 1e-8
    tiny = stats.srm_test([6, 0], [0.5, 0.5])  # too few units to judge
    assert not tiny.flagged and not tiny.enough_data


def test_sample_size() -> None:
    n = stats.sample_size_two_proportions(0.05, 0.10)
    assert n == 31234
    ref = samplesize_proportions_2indep_onetail(0.005, 0.05, 0.8, alpha=0.05)
    assert n == math.ceil(ref)
    with pytest.raises(ValueError):
        stats.sample_size_two_proportions(0.95, 0.10)


def test_msprt_by_hand() -> None:
    # log Λ = ½ ln(V/(V+τ²)) + τ² d² / (2V(V+τ²))
    assert stats.msprt_log_lr(0.1, 0.01, 0.04) == pytest.approx(0.5 * math.log(0.2) + 0.4, abs=1e-12)
    assert stats.msprt_pvalue(0.1, 0.01, 0.04) == 1.0
    assert stats.msprt_pvalue(0.5, 0.01, 0.04) == pytest.approx(
        math.exp(-(0.5 * math.log(0.2) + 10)), rel=1e-12
    )
    # τ² = σ² c / (2S), c = 2 ln(1/α) + ln(1 + 2 ln(1/α)); σ² = V·N = 1
    c = 2 * math.log(20) + math.log(1 + 2 * math.log(20))
    assert stats.msprt_tau2(0.001, 1000, 500, 0.05) == pytest.approx(c / 1000, rel=1e-12)


def test_msprt_ci_matches_p_value_boundary() -> None:
    d, v, tau2, alpha = 0.3, 0.01, 0.02, 0.05
    lo, hi = stats.msprt_ci(d, v, tau2, alpha)
    # at the CI edge the likelihood ratio against θ0 = edge is exactly 1/α
    assert stats.msprt_log_lr(d, v, tau2, theta0=lo) == pytest.approx(math.log(1 / alpha), abs=1e-9)
    assert stats.msprt_log_lr(d, v, tau2, theta0=hi) == pytest.approx(math.log(1 / alpha), abs=1e-9)
    # 0 outside the CI <=> p < α
    assert (lo > 0) == (stats.msprt_pvalue(d, v, tau2) < alpha)
    assert stats.running_min([0.5, 0.2, 0.4, 0.1]) == [0.5, 0.2, 0.2, 0.1]


def test_msprt_is_more_conservative_than_fixed_at_one_look() -> None:
    d, v = 0.02, 0.01**2  # z = 2, fixed p = 0.0455
    tau2 = stats.msprt_tau2(v, 20000, 10000)
    assert stats.msprt_pvalue(d, v, tau2) > 2 * sps.norm.sf(2)


def test_cuped() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(10, 2, 5000)
    y = 0.5 * x + rng.normal(0, 1, 5000)
    theta = stats.cuped_theta(y, x)
    assert theta == pytest.approx(np.cov(y, x, ddof=0)[0, 1] / np.var(x), rel=1e-12)
    adj = stats.cuped_adjust(y, x, theta, x.mean())
    rho2 = np.corrcoef(x, y)[0, 1] ** 2
    assert adj.mean() == pytest.approx(y.mean(), abs=1e-9)
    assert adj.var() == pytest.approx(y.var() * (1 - rho2), rel=1e-9)
    assert stats.cuped_theta(y, np.ones_like(y)) == 0.0


def test_msprt_update_running_state() -> None:
    s0 = stats.SequentialState()
    s1 = stats.msprt_update(s0, 0.3, 0.01, 1000, 500)
    tau2 = stats.msprt_tau2(0.01, 1000, 500)
    assert s1.p_value == pytest.approx(stats.msprt_pvalue(0.3, 0.01, tau2))
    assert s1.ci == pytest.approx(stats.msprt_ci(0.3, 0.01, tau2)) and s1.looks == 1
    s2 = stats.msprt_update(s1, 0.0, 0.005, 2000, 500)  # effect vanished: p never goes back up, CI intersects
    assert s2.p_value == s1.p_value and s2.ci[0] >= s1.ci[0] and s2.ci[1] <= s1.ci[1]
    assert stats.msprt_update(s2, 0.1, 0.0, 10, 500).p_value == s2.p_value  # zero variance: no information
