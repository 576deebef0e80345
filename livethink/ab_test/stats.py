"""Pure statistics for A/B analysis: z / Welch tests, CIs, lift, SRM, sample size, mSPRT, CUPED.

Formulas (sources in docs/ab_test.md):
- two-proportion z: pooled SE for the test (as statsmodels ``proportions_ztest``), unpooled Wald CI for the
  difference (statsmodels ``confint_proportions_2indep(method="wald")``);
- Welch t with Welch–Satterthwaite df (scipy ``ttest_ind(equal_var=False)``);
- relative lift CI by the delta method (GrowthBook's frequentist engine);
- SRM: Pearson chi-square goodness of fit against the configured weights (scipy ``chisquare``);
- mSPRT (Johari et al.): normal-mixture likelihood ratio, always-valid p = running min of 1/Λ; mixture
  variance tuned to an expected sample size as in GrowthBook's sequential testing (Howard et al.);
- CUPED (Deng et al. 2013): θ = Cov(Y, X)/Var(X) pooled across arms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as sps


@dataclass(frozen=True)
class TestResult:
    """Treatment vs control on one metric. ``diff`` = treatment − control; ``lift`` = diff / control."""

    test: str
    n_control: int
    n_treatment: int
    mean_control: float
    mean_treatment: float
    diff: float
    ci: tuple[float, float]
    lift: float | None
    lift_ci: tuple[float, float] | None
    statistic: float
    p_value: float
    df: float | None = None
    alpha: float = 0.05

    def to_dict(self) -> dict:
        return asdict(self)


def z_crit(alpha: float) -> float:
    """Two-sided normal critical value z_{1−α/2}."""
    return float(sps.norm.ppf(1 - alpha / 2))


def relative_lift(
    mean_c: float, var_mean_c: float, mean_t: float, var_mean_t: float, alpha: float = 0.05
) -> tuple[float | None, tuple[float, float] | None]:
    """Lift μ_t/μ_c − 1 with a delta-method CI; ``var_mean_*`` are variances of the means (σ²/n)."""
    if mean_c == 0:
        return None, None
    lift = mean_t / mean_c - 1
    var = var_mean_t / mean_c**2 + mean_t**2 * var_mean_c / mean_c**4
    half = z_crit(alpha) * math.sqrt(max(var, 0.0))
    return lift, (lift - half, lift + half)


def two_proportion_ztest(x_c: int, n_c: int, x_t: int, n_t: int, alpha: float = 0.05) -> TestResult:
    """Two-sided two-proportion z-test (pooled SE) with an unpooled Wald CI and lift CI."""
    if n_c <= 0 or n_t <= 0:
        raise ValueError("n: each arm needs at least one unit")
    if not (0 <= x_c <= n_c and 0 <= x_t <= n_t):
        raise ValueError("x: successes must be between 0 and n")
    p_c, p_t = x_c / n_c, x_t / n_t
    pooled = (x_c + x_t) / (n_c + n_t)
    se0 = math.sqrt(pooled * (1 - pooled) * (1 / n_c + 1 / n_t))
    diff = p_t - p_c
    if se0 == 0:
        z, p = 0.0, 1.0
    else:
        z = diff / se0
        p = float(2 * sps.norm.sf(abs(z)))
    v_c, v_t = p_c * (1 - p_c) / n_c, p_t * (1 - p_t) / n_t
    half = z_crit(alpha) * math.sqrt(v_c + v_t)
    lift, lift_ci = relative_lift(p_c, v_c, p_t, v_t, alpha)
    return TestResult(
        "z", n_c, n_t, p_c, p_t, diff, (diff - half, diff + half), lift, lift_ci, z, p, None, alpha
    )


def welch_ttest_from_stats(
    mean_c: float, var_c: float, n_c: int, mean_t: float, var_t: float, n_t: int, alpha: float = 0.05
) -> TestResult:
    """Welch t-test from summary statistics (sample variances, ddof=1)."""
    if n_c < 2 or n_t < 2:
        raise ValueError("n: Welch's test needs at least two units per arm")
    a, b = var_c / n_c, var_t / n_t
    se = math.sqrt(a + b)
    diff = mean_t - mean_c
    if se == 0:
        t, df, p, half = 0.0, float(n_c + n_t - 2), (1.0 if diff == 0 else 0.0), 0.0
    else:
        t = diff / se
        df = (a + b) ** 2 / ((a**2 / (n_c - 1) if a else 0.0) + (b**2 / (n_t - 1) if b else 0.0))
        p = float(2 * sps.t.sf(abs(t), df))
        half = float(sps.t.ppf(1 - alpha / 2, df)) * se
    lift, lift_ci = relative_lift(mean_c, a, mean_t, b, alpha)
    return TestResult(
        "welch", n_c, n_t, mean_c, mean_t, diff, (diff - half, diff + half), lift, lift_ci, t, p, df, alpha
    )


def welch_ttest(control: Sequence[float], treatment: Sequence[float], alpha: float = 0.05) -> TestResult:
    c, t = np.asarray(control, dtype=float), np.asarray(treatment, dtype=float)
    if len(c) < 2 or len(t) < 2:
        raise ValueError("n: Welch's test needs at least two units per arm")
    return welch_ttest_from_stats(
        float(c.mean()), float(c.var(ddof=1)), len(c), float(t.mean()), float(t.var(ddof=1)), len(t), alpha
    )


def _cluster_sums(y: np.ndarray, groups: np.ndarray) -> tuple[float, int, int, float]:
    """(mean, units, clusters, Σ_k (Y_k − mean·N_k)²) of one arm: the cluster-robust "meat" of its mean."""
    _, inv = np.unique(groups, return_inverse=True)
    totals = np.bincount(inv, weights=y)
    sizes = np.bincount(inv)
    mean = float(y.mean())
    return mean, len(y), len(totals), float(((totals - mean * sizes) ** 2).sum())


def cluster_ztest(
    control: np.ndarray, groups_c: np.ndarray, treatment: np.ndarray, groups_t: np.ndarray, alpha: float = 0.05,
) -> TestResult:  # fmt: skip
    """Difference in means when the randomisation unit is a cluster (a session, a stream's room) and the
    analysis unit is a viewer inside it: cluster-robust (Liang & Zeger 1986) variance of each arm's mean,
    Σ_k (Y_k − ȳ·N_k)² / N², with the small-sample factor G/(G−1)·(N−1)/(N−2) (G clusters, N units); z test and
    normal CI. Equals statsmodels ``OLS(y, [1, treated]).fit(cov_type="cluster", cov_kwds={"groups": g})``."""
    yc, yt = np.asarray(control, dtype=float), np.asarray(treatment, dtype=float)
    if len(yc) < 2 or len(yt) < 2:
        raise ValueError("n: the cluster-robust test needs at least two units per arm")
    mc, nc, gc, sc = _cluster_sums(yc, np.asarray(groups_c))
    mt, nt, gt, st = _cluster_sums(yt, np.asarray(groups_t))
    g, n = gc + gt, nc + nt
    factor = g / (g - 1) * (n - 1) / (n - 2) if g > 1 else math.inf
    var_c, var_t = factor * sc / nc**2, factor * st / nt**2
    se = math.sqrt(var_c + var_t)
    diff = mt - mc
    z = diff / se if se > 0 else 0.0
    p = float(2 * sps.norm.sf(abs(z))) if se > 0 else (1.0 if diff == 0 else 0.0)
    half = z_crit(alpha) * se
    lift, lift_ci = relative_lift(mc, var_c, mt, var_t, alpha)
    return TestResult("cluster-z", nc, nt, mc, mt, diff, (diff - half, diff + half), lift, lift_ci, z, p, None,
                      alpha)  # fmt: skip


@dataclass(frozen=True)
class SRMResult:
    observed: tuple[int, ...]
    expected: tuple[float, ...]
    chi2: float
    df: int
    p_value: float
    threshold: float
    flagged: bool
    enough_data: bool

    def to_dict(self) -> dict:
        return asdict(self)


def srm_test(
    observed: Sequence[int], weights: Sequence[float], threshold: float = 0.001, min_per_arm: int = 8
) -> SRMResult:
    """Sample-ratio mismatch: χ² = Σ(O−E)²/E, df = k−1; flagged when p < threshold (GrowthBook: 0.001).

    With fewer than ``min_per_arm`` expected units in some arm the check reports but never flags.
    """
    obs = np.asarray(observed, dtype=float)
    w = np.asarray(weights, dtype=float)
    if len(obs) != len(w) or len(obs) < 2:
        raise ValueError("weights: need one weight per arm and at least two arms")
    if (w <= 0).any():
        raise ValueError("weights: SRM needs positive weights")
    expected = obs.sum() * w / w.sum()
    if obs.sum() == 0:
        return SRMResult(
            tuple(int(o) for o in obs), tuple(expected), 0.0, len(obs) - 1, 1.0, threshold, False, False
        )
    chi2 = float(((obs - expected) ** 2 / expected).sum())
    p = float(sps.chi2.sf(chi2, len(obs) - 1))
    enough = bool((expected >= min_per_arm).all())
    return SRMResult(
        tuple(int(o) for o in obs),
        tuple(float(e) for e in expected),
        chi2,
        len(obs) - 1,
        p,
        threshold,
        enough and p < threshold,
        enough,
    )


def sample_size_two_proportions(
    p_control: float, relative_lift: float, alpha: float = 0.05, power: float = 0.8
) -> int:
    """Units per arm for a two-sided two-proportion z-test (normal approximation, pooled null variance).

    n = (z_{1−α/2}·√(2p̄(1−p̄)) + z_{1−β}·√(p₁(1−p₁)+p₂(1−p₂)))² / (p₂−p₁)²
    """
    p1 = p_control
    p2 = p_control * (1 + relative_lift)
    if not (0 < p1 < 1 and 0 < p2 < 1) or relative_lift == 0:
        raise ValueError("p_control/relative_lift: need 0 < p < 1 in both arms and a non-zero lift")
    pbar = (p1 + p2) / 2
    num = z_crit(alpha) * math.sqrt(2 * pbar * (1 - pbar)) + float(sps.norm.ppf(power)) * math.sqrt(
        p1 * (1 - p1) + p2 * (1 - p2)
    )
    return math.ceil(num**2 / (p2 - p1) ** 2)


# -- sequential: mixture SPRT ---------------------------------------------------------------------------


def msprt_tau2(var_estimate: float, n_total: float, tuning: float, alpha: float = 0.05) -> float:
    """Mixture variance τ² on the effect scale, tuned for ``tuning`` units per arm (GrowthBook's S).

    With per-unit variance σ² = V·N, Howard et al.'s optimal ρ = 2Sσ²/(2 ln(1/α) + ln(1 + 2 ln(1/α))) and the
    equivalent normal mixture has τ² = σ⁴/ρ.
    """
    la = math.log(1 / alpha)
    sigma2 = var_estimate * n_total
    rho = 2 * tuning * sigma2 / (2 * la + math.log(1 + 2 * la))
    return sigma2**2 / rho if rho > 0 else 0.0


def msprt_log_lr(diff: float, var_estimate: float, tau2: float, theta0: float = 0.0) -> float:
    """log Λ = ½ ln(V/(V+τ²)) + τ²(θ̂−θ₀)²/(2V(V+τ²)) — the normal mSPRT statistic for an estimate θ̂ ~ N(θ, V)."""
    if var_estimate <= 0 or tau2 <= 0:
        return 0.0
    v = var_estimate
    return 0.5 * math.log(v / (v + tau2)) + tau2 * (diff - theta0) ** 2 / (2 * v * (v + tau2))


def msprt_pvalue(diff: float, var_estimate: float, tau2: float) -> float:
    """Single-look always-valid p = min(1, 1/Λ); take the running minimum over looks."""
    return min(1.0, math.exp(-msprt_log_lr(diff, var_estimate, tau2)))


def msprt_ci(diff: float, var_estimate: float, tau2: float, alpha: float = 0.05) -> tuple[float, float]:
    """Always-valid CI: θ̂ ± √(V(V+τ²)/τ² · (2 ln(1/α) + ln((V+τ²)/V)))."""
    if var_estimate <= 0 or tau2 <= 0:
        return (diff, diff)
    v = var_estimate
    half = math.sqrt(v * (v + tau2) / tau2 * (2 * math.log(1 / alpha) + math.log((v + tau2) / v)))
    return (diff - half, diff + half)


@dataclass(frozen=True)
class SequentialState:
    """Always-valid inference after some looks: running-min p-value, intersected CI (effect scale)."""

    p_value: float = 1.0
    ci: tuple[float, float] = (-math.inf, math.inf)
    looks: int = 0


def msprt_update(
    state: SequentialState,
    diff: float,
    var_estimate: float,
    n_total: float,
    tuning: float,
    alpha: float = 0.05,
) -> SequentialState:
    """One more look at the data (θ̂ = diff with variance V from n_total units): the mSPRT state after it."""
    if not var_estimate > 0:
        return SequentialState(state.p_value, state.ci, state.looks + 1)
    tau2 = msprt_tau2(var_estimate, n_total, tuning, alpha)
    lo, hi = msprt_ci(diff, var_estimate, tau2, alpha)
    p = min(state.p_value, msprt_pvalue(diff, var_estimate, tau2))
    return SequentialState(p, (max(state.ci[0], lo), min(state.ci[1], hi)), state.looks + 1)


def running_min(values: Sequence[float]) -> list[float]:
    out, best = [], 1.0
    for v in values:
        best = min(best, v)
        out.append(best)
    return out


# -- CUPED ----------------------------------------------------------------------------------------------


def cuped_theta(y: np.ndarray, x: np.ndarray) -> float:
    """θ = Cov(Y, X)/Var(X) over all units of all arms (0 when X is constant)."""
    y, x = np.asarray(y, dtype=float), np.asarray(x, dtype=float)
    vx = float(x.var())
    return float(((x - x.mean()) * (y - y.mean())).mean() / vx) if vx > 0 else 0.0


def cuped_adjust(y: np.ndarray, x: np.ndarray, theta: float, x_mean: float) -> np.ndarray:
    """Y_adj = Y − θ(X − E[X]); same mean in expectation, variance × (1 − ρ²)."""
    return np.asarray(y, dtype=float) - theta * (np.asarray(x, dtype=float) - x_mean)
