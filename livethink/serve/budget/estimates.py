"""Latency estimates per engine and per concurrency level, that forget with time (pure math + small holders).

A request's time to first token (TTFT) and decode time per output token (TPOT) depend on how many requests run
beside it. Each quantity is kept per **load level** (1, 2, 4, 8, ... running requests; ``load_level``) as a
time-decayed mean and spread (``Decayed``): an observation's weight halves every ``half_life_s`` seconds, and
the weight of a level is capped (``max_weight``), so a level follows a change within a few requests.

A prediction at load ``x`` (``LevelCurve.predict``) uses the levels that have fresh data (decayed weight ≥
``fresh_weight``) and the **idle level** (load 1), which never expires: it is the engine's idle measurement,
refreshed by cheap idle probes (``Service`` runs them) and by one-at-a-time traffic. Between fresh levels the
prediction is interpolated; above the highest it is extrapolated with the configured per-request slope. So a
burst's slow levels never set the estimate for an idle engine, and once the burst is over its levels fade back
to what the idle measurement implies. Before any measurement the prior line ``a0 + b0·x`` is used.

``ReplyLengths`` keeps each model's recent reply lengths (tokens after the think block) for the tail that
times the end of thinking (``budget.plan_budget``).
"""

from __future__ import annotations

import bisect
import collections
import math
from dataclasses import dataclass, field


def load_level(load: float) -> int:
    """The level a load belongs to: the smallest power of two ≥ load (1 for anything up to 1)."""
    return 1 << max(0, math.ceil(math.log2(max(1.0, load)) - 1e-9))


@dataclass(frozen=True)
class Decayed:
    """A time-decayed mean and spread of one quantity: ``w`` is the weight at time ``t``."""

    w: float = 0.0
    mean: float = 0.0
    m2: float = 0.0  # decayed sum of squared deviations from the mean
    t: float = 0.0

    def weight(self, now: float, half_life_s: float) -> float:
        """The weight left at ``now``: halved every ``half_life_s`` seconds since the last observation."""
        if self.w <= 0:
            return 0.0
        return self.w * 0.5 ** (max(0.0, now - self.t) / half_life_s)

    @property
    def sd(self) -> float:
        return math.sqrt(max(0.0, self.m2) / self.w) if self.w > 0 else 0.0


def decayed_update(s: Decayed, y: float, now: float, half_life_s: float, max_weight: float) -> Decayed:
    """Add observation ``y`` at ``now`` with weight 1 (weighted Welford update on the decayed state)."""
    w_old = min(s.weight(now, half_life_s), max_weight - 1.0) if max_weight > 1 else 0.0
    scale = w_old / s.w if s.w > 0 else 0.0
    w = w_old + 1.0
    delta = y - s.mean
    mean = s.mean + delta / w
    m2 = s.m2 * scale + delta * (y - mean)  # the decayed sum scales with the weight
    return Decayed(w, mean, m2, now)


@dataclass(frozen=True)
class CurveSettings:
    prior: tuple[float, float]  # (a0, b0): y ≈ a0 + b0·load before any measurement
    half_life_s: float = 30.0  # an observation counts half after this long
    max_weight: float = 8.0  # a level follows a change within about this many observations
    fresh_weight: float = 0.5  # a level with less decayed weight is not used (the idle level always is)
    prior_weight: float = 1.0  # pseudo-observations of the interpolated value mixed into each level


@dataclass
class LevelCurve:
    """One quantity (e.g. TPOT) of one engine, by load level."""

    settings: CurveSettings
    levels: dict[int, Decayed] = field(default_factory=dict)

    def observe(self, load: float, y: float, now: float) -> None:
        s = self.settings
        lvl = load_level(load)
        self.levels[lvl] = decayed_update(self.levels.get(lvl, Decayed()), y, now, s.half_life_s, s.max_weight)

    def fresh(self, load: float, now: float) -> bool:
        """Whether the load's own level has recent data (an old idle level still anchors predictions, but is
        not fresh)."""
        d = self.levels.get(load_level(load))
        return d is not None and d.weight(now, self.settings.half_life_s) >= self.settings.fresh_weight

    def _anchors(self, now: float) -> list[tuple[int, float, float]]:
        """(level, mean, weight) of the levels that count now; the idle level whenever it was measured."""
        s = self.settings
        out = []
        for lvl in sorted(self.levels):
            d = self.levels[lvl]
            w = d.weight(now, s.half_life_s)
            if lvl == 1 or w >= s.fresh_weight:
                out.append((lvl, d.mean, w))
        return out

    def predict(self, load: float, now: float) -> tuple[float, float]:
        """(mean, sd) at ``load``: interpolated between measured levels, extrapolated above the highest with the
        prior slope, the prior line when nothing is measured; a measured level is shrunk by ``prior_weight``
        pseudo-observations towards the line through the others, where one of them lies below it."""
        s = self.settings
        a0, b0 = s.prior
        x = max(1.0, load)
        anchors = self._anchors(now)
        if not anchors:
            return a0 + b0 * x, 0.0
        line = interpolate([(lvl, mean) for lvl, mean, _ in anchors], x, b0)
        own = self.levels.get(load_level(x))
        w = own.weight(now, s.half_life_s) if own is not None else 0.0
        if own is None or (w < s.fresh_weight and load_level(x) != 1):
            return line, 0.0
        others = [(lvl, mean) for lvl, mean, _ in anchors if lvl != load_level(x)]
        # shrink towards the line through the other levels only where one lies below: a higher load says
        # little about a lower one (a burst must not move the idle estimate)
        around = interpolate(others, x, b0) if others and others[0][0] < x else own.mean
        mean = (w * own.mean + s.prior_weight * around) / (w + s.prior_weight)
        return max(mean, 0.25 * own.mean), own.sd


def interpolate(points: list[tuple[int, float]], x: float, slope: float) -> float:
    """Piecewise-linear through ``points`` (sorted by level); beyond the ends, lines of ``slope`` per request
    (never below a quarter of the nearest point)."""
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return points[i][1]
    if i == 0:
        return max(0.25 * points[0][1], points[0][1] - slope * (xs[0] - x))
    if i == len(xs):
        return points[-1][1] + slope * (x - xs[-1])
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def stream_timing(
    t_start: float, t_first: float | None, first_tokens: int, t_last: float | None, tokens: int
) -> tuple[float | None, float | None]:
    """(TTFT, TPOT) of a request whose tokens arrive in deltas of several (``stream_interval``): the first delta
    at ``t_first`` carried ``first_tokens`` tokens, the last arrived at ``t_last`` after ``tokens`` in all. TPOT
    counts only the tokens decoded after the first delta; TTFT is the first delta's time less the decode steps
    it waited for beyond the first token."""
    if t_first is None:
        return None, None
    tpot = (t_last - t_first) / (tokens - first_tokens) if t_last is not None and tokens > first_tokens else None
    ttft = t_first - t_start - (max(1, first_tokens) - 1) * (tpot or 0.0)
    return max(0.0, ttft), tpot


def quantile(sorted_values: list[int], q: float) -> int:
    """The ``q`` quantile of sorted integers (nearest rank, rounding up: a tail is never understated)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    rank = min(len(sorted_values), max(1, math.ceil(q * len(sorted_values))))
    return sorted_values[rank - 1]


@dataclass
class ReplyLengths:
    """A model's recent reply lengths in tokens (a reply cut at its reserve counts as the reserve)."""

    window: int = 200
    values: collections.deque[int] = field(default_factory=collections.deque)
    _sorted: list[int] = field(default_factory=list)

    def observe(self, tokens: int) -> None:
        self.values.append(max(0, int(tokens)))
        bisect.insort(self._sorted, self.values[-1])
        if len(self.values) > self.window:
            old = self.values.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def quantile(self, q: float) -> int | None:
        """None until anything was observed."""
        return quantile(self._sorted, q) if self._sorted else None
