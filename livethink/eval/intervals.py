"""Intervals that fit the data (pure): pass rates, means over seeds, and paired comparisons of two models.

The benchmarks' figures are shares of tasks answered correctly (or helpfully) by a model trained with some seed,
on a fixed set of generated tasks. What each function computes, and why:

- ``pass_rate``: ``k`` of ``n`` trials; the Clopper–Pearson (exact binomial) interval (statsmodels
  ``proportion_confint(method="beta")``). It never leaves [0, 1]. Also for "seeds that meet every target".
- ``pooled_rate``: the mean over seeds of per-seed rates, each over the same ``n`` tasks. The Clopper–Pearson
  interval of the pooled count over tasks × seeds (with equal ``n`` per seed the pooled rate *is* the mean of the
  per-seed rates). It describes the evaluation's sampling error of *these* trained seeds on tasks drawn from the
  generator, stays in [0, 1], and needs only per-seed rates (what the results files hold). It treats the
  tasks × seeds replies as independent, so with a task set reused across seeds it is narrower than a two-level
  bootstrap would be; it is not an interval for a new training seed. Seed-to-seed spread is shown beside it
  (``seed_range``), not folded in: a t-interval over 3 seeds (multiplier 4.3) is what gave ``[-28.4, 118.8]``%.
- ``seed_range``: min and max over seeds, for quantities that are not shares of tasks (tokens, token reduction)
  where the results hold no per-task values: a description of the spread, not an interval.
- ``rate_difference``: two pooled rates on independent samples (Newcombe's hybrid score interval, statsmodels
  ``confint_proportions_2indep``). Used only where per-task verdicts are missing: on the same tasks it is wider
  than the paired interval (the shared task difficulty does not cancel), and no "A beats B" rests on it.
- ``paired_bootstrap``: model A against model B on the *same tasks*: per-task scores (seeds × tasks) of each; the
  tasks are resampled jointly for both models (difficulty cancels), and each model's seeds are resampled too
  when it has more than one (training noise counts). Percentile interval of the difference of the means;
  ``excludes_zero`` is the only ground for "A beats B". With one seed each it is scipy's paired percentile
  bootstrap (``scipy.stats.bootstrap(paired=True)``; a test compares the two); scipy has no two-level resampling.
- ``mcnemar_exact``: the exact McNemar test (statsmodels) of two models' 0/1 verdicts on the same tasks, one seed
  each: the p-value of "they are right equally often".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """An estimate and its interval (``low`` ≤ ``estimate`` ≤ ``high``), and how the interval was made."""

    estimate: float
    low: float
    high: float
    method: str

    def as_dict(self, scale: float = 1.0, digits: int | None = None) -> dict[str, Any]:
        """``{"mean", "low", "high", "method"}`` (the benchmarks' cell layout), scaled and rounded."""
        values = [scale * v for v in (self.estimate, self.low, self.high)]
        if digits is not None:
            values = [round(v, digits) for v in values]
        return {"mean": values[0], "low": values[1], "high": values[2], "method": self.method}


@dataclass(frozen=True)
class Comparison:
    """A − B on the same tasks: the difference of means, its interval and whether the interval excludes 0."""

    difference: float
    low: float
    high: float
    excludes_zero: bool
    n_tasks: int
    seeds_a: int
    seeds_b: int
    method: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pass_rate(successes: int, n: int, confidence: float = CONFIDENCE) -> Interval:
    """``successes`` of ``n`` with its Clopper–Pearson interval."""
    from statsmodels.stats.proportion import proportion_confint

    if n <= 0 or not 0 <= successes <= n:
        raise ValueError(f"a pass rate needs 0 <= successes <= n and n > 0, got {successes} of {n}")
    low, high = proportion_confint(successes, n, alpha=1 - confidence, method="beta")
    return Interval(successes / n, float(low), float(high), "Clopper-Pearson")


def counts_of(rates: Sequence[float], n: int | Sequence[int]) -> tuple[list[int], list[int]]:
    """Per-seed successes from per-seed rates over ``n`` tasks (one ``n`` for all, or one per rate); a rate that is
    no share of ``n`` (beyond rounding to 1/(2n)) raises ValueError."""
    ns = [n] * len(rates) if isinstance(n, int) else list(n)
    if len(ns) != len(rates) or not rates:
        raise ValueError(f"need one task count per rate: {len(rates)} rates, {len(ns)} counts")
    counts = [round(r * m) for r, m in zip(rates, ns, strict=True)]
    for r, m, k in zip(rates, ns, counts, strict=True):
        if abs(k - r * m) > 0.01 + 5e-5 * m or not 0 <= k <= m:  # a share of m, rounded to 4 decimals at most
            raise ValueError(f"rate {r} is not a share of {m} tasks")
    return counts, ns


def pooled_rate(rates: Sequence[float], n: int | Sequence[int], confidence: float = CONFIDENCE) -> Interval:
    """The mean of per-seed ``rates`` (each over ``n`` tasks) with the Clopper–Pearson interval of the pooled count
    over tasks × seeds (see the module docstring for what it covers)."""
    counts, ns = counts_of(rates, n)
    pooled = pass_rate(sum(counts), sum(ns), confidence)
    return Interval(sum(counts) / sum(ns), pooled.low, pooled.high, "Clopper-Pearson, pooled over tasks x seeds")


def seed_range(values: Sequence[float]) -> Interval:
    """The mean of ``values`` with their min and max (a description of the spread over seeds)."""
    if not values:
        raise ValueError("seed_range needs at least one value")
    return Interval(float(np.mean(values)), float(min(values)), float(max(values)), "range over seeds")


def rate_difference(rates_a: Sequence[float], n_a: int | Sequence[int], rates_b: Sequence[float],
                    n_b: int | Sequence[int], confidence: float = CONFIDENCE) -> Interval:
    """Pooled rate of A − pooled rate of B as independent samples (Newcombe's score interval): for results without
    per-task verdicts only; on shared tasks the paired interval (``paired_bootstrap``) is the one to use."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    (ka, na), (kb, nb) = (tuple(map(sum, counts_of(rates_a, n_a))), tuple(map(sum, counts_of(rates_b, n_b))))
    low, high = confint_proportions_2indep(ka, na, kb, nb, method="newcomb", compare="diff", alpha=1 - confidence)
    return Interval(ka / na - kb / nb, float(low), float(high), "Newcombe, unpaired (no per-task verdicts)")


def _as_matrix(scores: Sequence[Sequence[float]] | Sequence[float] | np.ndarray) -> np.ndarray:
    """Per-task scores as seeds × tasks (a flat sequence is one seed)."""
    m = np.asarray(scores, dtype=float)
    if m.ndim == 1:
        m = m[None, :]
    if m.ndim != 2 or m.shape[1] < 2:
        raise ValueError(f"per-task scores must be seeds x tasks with at least 2 tasks, got shape {m.shape}")
    return m


def _seed_means(rng: np.random.Generator, per_seed: np.ndarray) -> np.ndarray:
    """Per resample (rows) the mean over a resample of the seeds (columns); the plain value for one seed."""
    if per_seed.shape[1] == 1:
        return per_seed[:, 0]
    picks = rng.integers(0, per_seed.shape[1], size=per_seed.shape)
    return np.take_along_axis(per_seed, picks, axis=1).mean(axis=1)


def paired_bootstrap(a: Sequence[Sequence[float]] | Sequence[float] | np.ndarray,
                     b: Sequence[Sequence[float]] | Sequence[float] | np.ndarray,
                     confidence: float = CONFIDENCE, n_resamples: int = 10_000, seed: int = 0,
                     batch: int = 1000) -> Comparison:
    """Mean of A − mean of B over the same tasks (columns, in the same order), with a percentile bootstrap interval:
    each resample draws the tasks with replacement (the same draw for A and B) and, for a model with several seeds
    (rows), its seeds with replacement. ``seed`` fixes the resampling."""
    ma, mb = _as_matrix(a), _as_matrix(b)
    if ma.shape[1] != mb.shape[1]:
        raise ValueError(f"paired scores need the same tasks: {ma.shape[1]} for A, {mb.shape[1]} for B")
    n = ma.shape[1]
    rng = np.random.default_rng(seed)
    stats = np.empty(n_resamples)
    for start in range(0, n_resamples, batch):
        m = min(batch, n_resamples - start)
        weights = rng.multinomial(n, np.full(n, 1.0 / n), size=m) / n  # each task's share in a resample
        stats[start:start + m] = _seed_means(rng, weights @ ma.T) - _seed_means(rng, weights @ mb.T)
    alpha = 1 - confidence
    low, high = (float(q) for q in np.quantile(stats, [alpha / 2, 1 - alpha / 2]))
    diff = float(ma.mean() - mb.mean())
    return Comparison(diff, low, high, bool(low > 0 or high < 0), n, ma.shape[0], mb.shape[0],
                      "paired bootstrap over tasks" + (" and seeds" if max(ma.shape[0], mb.shape[0]) > 1 else ""))


@dataclass(frozen=True)
class McNemar:
    """The exact McNemar test of A against B: tasks only A gets right (``only_a``), only B (``only_b``), A − B."""

    only_a: int
    only_b: int
    difference: float
    p_value: float


def mcnemar_exact(a: Sequence[bool | int], b: Sequence[bool | int]) -> McNemar:
    """The exact (binomial) McNemar test of two models' 0/1 verdicts on the same tasks, one seed each."""
    from statsmodels.stats.contingency_tables import mcnemar

    if len(a) != len(b) or not a:
        raise ValueError(f"paired verdicts need the same tasks: {len(a)} for A, {len(b)} for B")
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    table = [[int(np.sum(x & y)), int(np.sum(x & ~y))], [int(np.sum(~x & y)), int(np.sum(~x & ~y))]]
    result = mcnemar(table, exact=True)
    return McNemar(table[0][1], table[1][0], float(x.mean() - y.mean()), float(result.pvalue))
