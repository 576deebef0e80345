"""Latency-budget controller: live estimates per engine, engine slots (our queue), admission and planning.

Per engine it learns, from finished requests and idle probes, time to first token (``ttft``) and decode time
per token (``tpot``) *per load level* (requests running on the engine), as time-decayed means and spreads
(``estimates.LevelCurve``): a burst sets the estimates of the loads it ran at, never the idle one, and they fade
back to what the idle measurement implies once it is over. A request that would run alongside ``n`` others is
planned at load ``n + 1``: admitted on the mean times a safety factor, its thinking sized on the mean and ended
in time for the reply's measured tail (``budget.plan_budget``). Requests beyond ``max_concurrency`` wait in a
FIFO for an engine slot; the expected wait is ``position · service_time / max_concurrency`` (``queue_wait``).

A refusal is trusted only where the estimates are fresh. While an engine is still being learnt, or the load
level a request would run at has no recent measurement, a request the estimates would refuse is let through as
a *probe* at most once per ``trickle_s`` (the hard deadline bounds it), so a stale estimate cannot lock the
server out: refusing never makes the next request less likely to be served.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field, replace

from livethink.serve.budget.estimates import CurveSettings, LevelCurve, ReplyLengths
from livethink.serve.budget.plan import BudgetPolicy, Estimates, Reject, TokenBudget, plan_budget
from livethink.serve.budget.slots import SlotQueue, queue_wait


# -- pure helpers ---------------------------------------------------------------------------------------
def ewma(previous: float | None, value: float, alpha: float) -> float:
    return value if previous is None else (1 - alpha) * previous + alpha * value


def decaying_max(previous: float | None, value: float, decay: float) -> float:
    """A high-water mark that forgets: ``max(value, decay · previous)`` (0 < decay < 1)."""
    return value if previous is None else max(value, decay * previous)


# -- per-engine estimator -------------------------------------------------------------------------------
@dataclass
class EstimatorSettings:
    prior_ttft_s: float = 0.05
    prior_ttft_slope_s: float = 0.005  # extra TTFT per running request
    prior_tpot_s: float = 0.01
    prior_tpot_slope_s: float = 0.0005  # extra decode time per token per running request
    half_life_s: float = 30.0  # a measurement counts half after this long (estimates cannot freeze)
    max_weight: float = 8.0  # a load level follows a change within about this many requests
    service_alpha: float = 0.1
    safety: float = 1.15  # admission: predicted TTFT / per-token time times this (the mean is what is planned)
    spread_k: float = 2.0  # the tail of the per-token time: mean + k·sd at the load level
    max_factor: float = 2.5
    cold_factor: float = 1.0  # a quantity not measured yet: its prior counts this much more (serve config: 2)
    cold_observations: int = 16  # an engine is still being learnt until this many requests finished (probes)


def cold_factor(observations: int, factor: float, n: int) -> float:
    """1 + (factor − 1)·(1 − observations/n) while observations < n, then 1: conservative before measuring."""
    if n <= 0 or observations >= n:
        return 1.0
    return 1.0 + (factor - 1.0) * (1.0 - observations / n)


def tail_factor(mean: float, sd: float, k: float, cap: float) -> float:
    """1 + k·sd/mean, capped: the tail of a quantity relative to its mean."""
    if mean <= 0:
        return 1.0
    return min(cap, 1.0 + k * sd / mean)


@dataclass(frozen=True)
class Prediction:
    """Seconds, at one load: means, the admission figures (× safety) and the per-token tail."""

    ttft: float
    tpot: float
    tpot_hi: float
    ttft_mean: float
    tpot_mean: float


@dataclass
class EngineEstimator:
    settings: EstimatorSettings = field(default_factory=EstimatorSettings)
    service_s: float | None = None
    observations: int = 0

    def __post_init__(self) -> None:
        s = self.settings

        def curve(a0: float, b0: float) -> LevelCurve:
            return LevelCurve(CurveSettings((a0, b0), s.half_life_s, s.max_weight))

        self.ttft = curve(s.prior_ttft_s, s.prior_ttft_slope_s)
        self.tpot = curve(s.prior_tpot_s, s.prior_tpot_slope_s)

    def observe(
        self,
        load: float,
        ttft_s: float | None,
        tpot_s: float | None,
        service_s: float | None,
        now: float | None = None,
    ) -> None:
        now = time.monotonic() if now is None else now
        if ttft_s is not None:
            self.ttft.observe(load, ttft_s, now)
        if tpot_s is not None:
            self.tpot.observe(load, tpot_s, now)
        if service_s is not None:
            self.service_s = ewma(self.service_s, service_s, self.settings.service_alpha)
        self.observations += 1

    def fresh(self, load: float, now: float | None = None) -> bool:
        """Whether the per-token time at ``load`` rests on a recent measurement at that load level."""
        return self.tpot.fresh(load, time.monotonic() if now is None else now)

    def predict(self, load: float, now: float | None = None) -> Prediction:
        s = self.settings
        now = time.monotonic() if now is None else now
        ttft, _ = self.ttft.predict(load, now)
        tpot, tpot_sd = self.tpot.predict(load, now)
        # a prior (nothing measured yet) is conservative; a measurement is taken as it is
        cold = cold_factor(self.observations, s.cold_factor, s.cold_observations)
        ttft *= 1.0 if self.ttft.levels else cold
        tpot = max(tpot, 1e-4) * (1.0 if self.tpot.levels else cold)
        hi = tpot * max(1.0, tail_factor(tpot, tpot_sd, s.spread_k, s.max_factor))
        return Prediction(ttft * s.safety, tpot * s.safety, hi, ttft, tpot)

    def service_time(self, default: float) -> float:
        return self.service_s if self.service_s is not None else default


class LoopLag:
    """Event-loop lag of this process: how late a short sleep wakes up (seconds), as two EWMAs.

    Deadlines are enforced by this loop; when it lags (CPU saturated by HTTP, tokenization, detokenization)
    every request is late by about that much, so the lag counts as queue wait (``value``, fast: a stall counts
    at once) and, while it stays past a limit, refuses (``sustained``, slow: one stall of a few hundred ms, e.g.
    a garbage collection, is not a saturated front end).
    """

    def __init__(self, interval_s: float = 0.02, alpha: float = 0.3, sustained_alpha: float = 0.05):
        self.interval_s = interval_s
        self.alpha = alpha
        self.sustained_alpha = sustained_alpha
        self.value = 0.0
        self.sustained = 0.0

    def observe(self, lag_s: float) -> None:
        self.value = ewma(self.value, max(0.0, lag_s), self.alpha)
        self.sustained = ewma(self.sustained, max(0.0, lag_s), self.sustained_alpha)

    async def run(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(self.interval_s)
            self.observe(time.monotonic() - t0 - self.interval_s)


# -- the controller -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueState:
    running: int
    waiting: int
    capacity: int


class BudgetController:
    """Owns the per-engine estimators, slot queues and reply lengths; plans budgets and decides admission."""

    def __init__(
        self,
        policy: BudgetPolicy,
        capacities: dict[str, int],
        estimator: EstimatorSettings | None = None,
        max_loop_lag_s: float = 0.15,
        ramp_start: int | None = None,
        reply_quantile: float = 0.9,
        trickle_s: float = 2.0,
        shared_compute: bool = False,
    ):
        """``ramp_start``: a cold engine opens this many slots, one more per finished request (slow start,
        as TCP does), up to its capacity; None opens them all at once. ``reply_quantile``: the quantile of
        recent reply lengths that times the end of thinking. ``trickle_s``: at most one probe per engine this
        often where the estimates are stale. ``shared_compute``: the engines share one device (a CPU host), so a
        request's load counts what runs on every engine, not only its own."""
        self.policy = policy
        self.estimators = {
            name: EngineEstimator(replace(estimator or EstimatorSettings())) for name in capacities
        }
        self.ramp_start = ramp_start
        self.queues = {name: SlotQueue(cap, ramp_start) for name, cap in capacities.items()}
        self.loop_lag = LoopLag()
        self.max_loop_lag_s = max_loop_lag_s
        self.send_s: float | None = None  # decaying max of (last byte sent − generation over), seconds
        self.send_decay = 0.98  # per reply: an outlier counts half after ~35 replies
        self.max_send_s = 0.25
        self.reply_quantile = reply_quantile
        self.replies: dict[str, ReplyLengths] = collections.defaultdict(ReplyLengths)  # by model
        # the first sentence of streamed replies (what a streamed request's deadline bounds), by model
        self.first_sentences: dict[str, ReplyLengths] = collections.defaultdict(ReplyLengths)
        self.trickle_s = trickle_s
        self.shared_compute = shared_compute
        self._last_probe: dict[str, float] = {}

    def observe_send(self, seconds: float) -> None:
        """Time a finished reply took to leave (serialization, the event loop, A/B logging, the socket)."""
        self.send_s = decaying_max(self.send_s, min(max(0.0, seconds), self.max_send_s), self.send_decay)

    def send_reserve(self, finalize_s: float) -> float:
        """Seconds to keep before the deadline for the answer to leave: the configured ``finalize_s`` or the
        measured high-water mark, whichever is larger, plus the event loop's current lag (capped)."""
        lag = min(self.loop_lag.value, self.max_loop_lag_s)
        return max(finalize_s, self.send_s or 0.0) + lag

    def queue_state(self, engine: str) -> QueueState:
        q = self.queues[engine]
        return QueueState(q.running, q.waiting, q.capacity)

    def others(self, engine: str) -> int:
        """Requests running or waiting on the engines that share ``engine``'s device (0 when none do)."""
        if not self.shared_compute:
            return 0
        return sum(q.running + q.waiting for name, q in self.queues.items() if name != engine)

    def load(self, engine: str, q: QueueState) -> int:
        """The load a request arriving now runs at: what runs and waits on its engine, plus itself, up to the
        capacity, plus what runs on the engines sharing its device."""
        return min(q.capacity, q.running + q.waiting + 1) + self.others(engine)

    def running_load(self, engine: str, extra: int = 0) -> int:
        """What runs now on ``engine`` (plus ``extra``) and on the engines sharing its device: an observation's
        load."""
        return self.queues[engine].running + extra + self.others(engine)

    def busy_area(self, engine: str, now: float | None = None) -> float:
        """∫ of ``running_load(engine)`` over time so far (request-seconds; ``mean_load`` takes two readings)."""
        names = self.queues if self.shared_compute else [engine]
        return sum(self.queues[name].busy_area(now) for name in names)

    def mean_load(self, engine: str, area_start: float, t_start: float, now: float | None = None) -> float:
        """The time-weighted mean load on ``engine`` (and the engines sharing its device) since ``t_start``, when
        ``busy_area`` read ``area_start``: the load a request that ran over that interval was measured under. A
        request that started and ended alone while a burst came and went ran at the burst's load, not at 1."""
        now = time.monotonic() if now is None else now
        if now - t_start <= 1e-6:
            return float(self.running_load(engine))
        return max(1.0, (self.busy_area(engine, now) - area_start) / (now - t_start))

    def estimates(
        self,
        engine: str,
        queue: QueueState | None = None,
        default_service_s: float = 1.0,
        now: float | None = None,
    ) -> Estimates:
        """Estimates for a request that arrives at ``now`` at ``engine`` (it runs with the current load + 1)."""
        q = queue or self.queue_state(engine)
        est = self.estimators[engine]
        p = est.predict(self.load(engine, q), now)
        wait = queue_wait(q.waiting, q.running, q.capacity, est.service_time(default_service_s))
        # a lagging event loop delays everything: it counts as wait
        return Estimates(
            wait=wait + self.loop_lag.value,
            ttft=p.ttft,
            tpot=p.tpot,
            tpot_hi=p.tpot_hi,
            tpot_mean=p.tpot_mean,
            ttft_mean=p.ttft_mean,
            switch=p.ttft_mean,
        )

    def observe_reply(self, model: str, tokens: int) -> None:
        """A finished reply's length in tokens (after the think block)."""
        self.replies[model].observe(tokens)

    def reply_lengths(self, model: str | None) -> tuple[int | None, int | None]:
        """(median, tail) of the model's recent reply lengths; (None, None) before any."""
        r = self.replies.get(model) if model is not None else None
        if r is None or not r.values:
            return None, None
        return r.quantile(0.5), r.quantile(self.reply_quantile)

    def observe_first_sentence(self, model: str, tokens: int) -> None:
        """A streamed reply's first sentence, in tokens (its thinking, if any, not counted)."""
        self.first_sentences[model].observe(tokens)

    def first_sentence_lengths(self, model: str | None, default: int) -> tuple[int, int]:
        """(median, tail) of the model's recent first sentences; ``default`` for both before any."""
        r = self.first_sentences.get(model) if model is not None else None
        if r is None or not r.values:
            return default, default
        return r.quantile(0.5) or default, r.quantile(self.reply_quantile) or default

    def _may_probe(self, engine: str, q: QueueState, now: float) -> bool:
        """A request the estimates refuse may go through as a probe: a free slot and nobody waiting, and the
        estimates for its load are not to be trusted (still learning, or stale), at most once per
        ``trickle_s`` per engine (while learning: any free slot)."""
        if q.waiting or q.running >= q.capacity:
            return False
        est = self.estimators[engine]
        if est.observations < est.settings.cold_observations:
            return True
        if est.fresh(self.load(engine, q), now):
            return False
        if now - self._last_probe.get(engine, float("-inf")) < self.trickle_s:
            return False
        self._last_probe[engine] = now
        return True

    def plan(
        self,
        engine: str,
        remaining_s: float,
        queue: QueueState | None = None,
        *,
        max_thinking: int | None = None,
        reply_reserve: int | None = None,
        max_tokens: int | None = None,
        thinking_allowed: bool = True,
        now: float | None = None,
        min_thinking: int = 0,
        model: str | None = None,
        forced_end_tokens: int = 0,
        first_sentence: int | None = None,
    ) -> TokenBudget | Reject:
        """``plan(deadline, queue_state)``: a token budget for the time left, or a refusal. ``min_thinking``:
        the model's thinking floor, which a probe gets (see below); ``model``: whose reply lengths count;
        ``forced_end_tokens``: what a cut adds beyond the cap (``plan_budget``); ``first_sentence``: a streamed
        reply whose deadline bounds its first sentence, planned at the model's measured first sentences (this
        many tokens before any is measured)."""
        if self.loop_lag.sustained > self.max_loop_lag_s:  # the front end (this process) is saturated
            return Reject(max(self.policy.min_retry_after_s, self.loop_lag.sustained), "frontend_saturated")
        q = queue or self.queue_state(engine)
        t = time.monotonic() if now is None else now
        est = self.estimates(engine, q, default_service_s=remaining_s, now=t)
        typical, tail = self.reply_lengths(model)
        planned_first: int | None = None
        if first_sentence is not None:
            typical, tail = self.first_sentence_lengths(model, first_sentence)
            planned_first = tail
        plan = plan_budget(
            remaining_s,
            est,
            self.policy,
            max_thinking=max_thinking,
            reply_reserve=reply_reserve,
            max_tokens=max_tokens,
            thinking_allowed=thinking_allowed,
            now=now,
            forced_end_tokens=forced_end_tokens,
            reply_expected=typical,
            reply_tail=tail,
            first_sentence=planned_first,
        )
        short = isinstance(plan, TokenBudget) and plan.thinking_cap < min_thinking
        if (isinstance(plan, Reject) or short) and remaining_s > 0 and self._may_probe(engine, q, t):
            # Stale or unlearnt estimates may refuse wrongly, and only an admitted request refreshes them. The
            # probe gets the model's thinking floor, ended in time for the minimal reply; the hard deadline
            # bounds it (a probe cut there gets the fallback reply, not a guess).
            cap = self.policy.max_tokens if max_tokens is None else min(max_tokens, self.policy.max_tokens)
            reply = max(1, min(self.policy.min_reply_tokens, cap))
            in_deadline = reply if planned_first is None else max(1, min(reply, planned_first))
            thinking = max(0, min(min_thinking, cap - reply)) if thinking_allowed else 0
            deadline = None
            if now is not None and thinking > 0:
                deadline = now + remaining_s - self.policy.margin_s - in_deadline * est.tpot_reply - est.switch
            # a streamed probe's reply goes on after its first sentence, paced to speech, like any streamed reply
            rest = None if planned_first is None else (self.policy.reply_reserve if reply_reserve is None else reply_reserve)
            return TokenBudget(thinking, reply, deadline, probe=True, reply_limit=rest)
        return plan

    def observe(
        self,
        engine: str,
        *,
        load: float,
        ttft_s: float | None,
        tpot_s: float | None,
        service_s: float | None,
        now: float | None = None,
    ) -> None:
        est = self.estimators[engine]
        est.observe(load, ttft_s, tpot_s, service_s, now)
        if self.ramp_start is not None:
            self.queues[engine].open_slots(self.ramp_start + est.observations)

    def snapshot(self) -> dict[str, dict]:
        out = {}
        now = time.monotonic()
        for name, q in self.queues.items():
            state = self.queue_state(name)
            est = self.estimates(name, state, now=now)
            idle = self.estimators[name].predict(1, now)
            out[name] = {
                "running": q.running,
                "waiting": q.waiting,
                "capacity": q.capacity,
                "observations": self.estimators[name].observations,
                "estimated_wait_ms": round(est.wait * 1000, 2),
                "estimated_ttft_ms": round(est.ttft * 1000, 2),
                "estimated_tpot_ms": round(est.tpot * 1000, 3),
                "estimated_tpot_mean_ms": round((est.tpot_mean or est.tpot) * 1000, 3),
                "estimated_tpot_hi_ms": round(est.tpot_reply * 1000, 3),
                "idle_tpot_ms": round(idle.tpot_mean * 1000, 3),
                "tpot_ms_by_load": {
                    str(lvl): round(d.mean * 1000, 3) for lvl, d in sorted(self.estimators[name].tpot.levels.items())
                },
                "loop_lag_ms": round(self.loop_lag.value * 1000, 2),
                "send_ms": None if self.send_s is None else round(self.send_s * 1000, 2),
                "at": time.time(),
            }
        return out
