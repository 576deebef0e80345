"""Latency-budget controller: live estimates per engine, engine slots (our queue), admission and planning.

Per engine it learns, from finished requests, time to first token (``ttft``) and decode time per token
(``tpot``) *as a function of the load* (requests running on the engine): an exponentially weighted linear fit
``y ≈ mean_y + slope·(x − mean_x)`` whose slope is shrunk towards a prior (pure functions ``wls_update`` /
``wls_predict``). A request that would run alongside ``n`` others is planned with the prediction at ``n + 1``
times a safety factor. Requests beyond ``max_concurrency`` wait in a FIFO for an engine slot; the expected
wait is ``position · service_time / max_concurrency`` (``queue_wait``). ``plan`` turns all that into a
``TokenBudget`` or a ``Reject`` (see ``budget.py``).
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field, replace

from livethink.serve.budget import BudgetPolicy, Estimates, Reject, TokenBudget, plan_budget


# -- pure estimation math -------------------------------------------------------------------------------
@dataclass(frozen=True)
class WLS:
    """Exponentially weighted sums of (x, y) observations."""

    w: float = 0.0
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0


def wls_update(s: WLS, x: float, y: float, decay: float) -> WLS:
    """Forget old observations by ``decay`` (0 < decay ≤ 1) and add (x, y) with weight 1."""
    return WLS(
        decay * s.w + 1.0, decay * s.sx + x, decay * s.sy + y, decay * s.sxx + x * x, decay * s.sxy + x * y
    )


def wls_predict(s: WLS, x: float, prior: tuple[float, float], ridge: float) -> float:
    """Predict y at x. Without data: the prior line ``a0 + b0·x``. With data: weighted mean of y plus a slope
    fitted by least squares and shrunk towards ``b0`` (ridge penalty ``ridge``), never negative; the prediction
    is at least a quarter of the mean (extrapolating down to light load)."""
    a0, b0 = prior
    if s.w <= 0:
        return a0 + b0 * x
    mx, my = s.sx / s.w, s.sy / s.w
    sxx_c = max(0.0, s.sxx - s.w * mx * mx)
    sxy_c = s.sxy - s.w * mx * my
    slope = max(0.0, (sxy_c + ridge * b0) / (sxx_c + ridge))
    return max(0.25 * my, my + slope * (x - mx))  # far below the observed loads, not less than a quarter


def ewma(previous: float | None, value: float, alpha: float) -> float:
    return value if previous is None else (1 - alpha) * previous + alpha * value


def decaying_max(previous: float | None, value: float, decay: float) -> float:
    """A high-water mark that forgets: ``max(value, decay · previous)`` (0 < decay < 1)."""
    return value if previous is None else max(value, decay * previous)


def queue_wait(waiting: int, running: int, capacity: int, service_s: float) -> float:
    """Expected wait for a slot of a new request: 0 if a slot is free, else ``(waiting + 1) · S / capacity``
    (one of ``capacity`` slots frees every ``S / capacity`` seconds on average)."""
    if running < capacity and waiting == 0:
        return 0.0
    return (waiting + 1) * service_s / capacity


# -- engine slots ---------------------------------------------------------------------------------------
class SlotQueue:
    """FIFO admission to an engine: at most ``capacity`` requests run at once.

    Admitted requests *reserve* a place until they ask for a slot (or their deadline passes), so a burst of
    arrivals sees the queue it is about to form, not the one of a moment ago.
    """

    def __init__(self, capacity: int, start: int | None = None):
        if capacity < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {capacity}")
        self.max_capacity = capacity
        self.capacity = capacity if start is None else max(1, min(capacity, start))  # slots open now
        self.running = 0
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._reserved: dict[str, float] = {}  # request id -> monotonic time the reservation lapses

    @property
    def waiting(self) -> int:
        now = time.monotonic()
        for key in [k for k, until in self._reserved.items() if until <= now]:
            del self._reserved[key]
        return sum(1 for f in self._waiters if not f.done()) + len(self._reserved)

    def reserve(self, key: str, until: float) -> None:
        self._reserved[key] = until

    def unreserve(self, key: str) -> None:
        self._reserved.pop(key, None)

    async def acquire(self, timeout: float | None, key: str | None = None) -> bool:
        """Wait for a slot up to ``timeout`` seconds; False when it did not come in time."""
        if key is not None:
            self.unreserve(key)
        if self.running < self.capacity and not any(not f.done() for f in self._waiters):
            self.running += 1
            return True
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)  # a slot handed over at the last moment still counts
            return True
        except TimeoutError:
            return False  # `fut` is cancelled: release() skips it
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot while being cancelled: pass it on
            raise

    def open_slots(self, capacity: int) -> None:
        """Open slots up to ``capacity`` (never more than ``max_capacity``, never fewer than now): the
        ramp-up of a cold engine. Waiting requests get the new slots at once."""
        capacity = min(self.max_capacity, capacity)
        while self.capacity < capacity:
            self.capacity += 1
            self.running += 1
            self.release()  # hands the new slot to a waiter, or gives it back as free

    def release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes to the next waiter; `running` is unchanged
                return
        self.running -= 1


# -- per-engine estimator -------------------------------------------------------------------------------
@dataclass
class EstimatorSettings:
    prior_ttft_s: float = 0.05
    prior_ttft_slope_s: float = 0.005  # extra TTFT per running request
    prior_tpot_s: float = 0.01
    prior_tpot_slope_s: float = 0.0005  # extra decode time per token per running request
    decay: float = 0.9  # per observation: the fit follows a change of load within ~10 requests
    ridge: float = 20.0
    service_alpha: float = 0.1
    spread_alpha: float = 0.2
    safety: float = 1.15  # predictions are multiplied by max(safety, 1 + spread_k · relative spread)
    spread_k: float = 1.5
    max_factor: float = 2.5
    cold_factor: float = 1.0  # before any measurement the priors count this much more (serve config: 2) ...
    cold_observations: int = 16  # ... fading linearly to 1 over this many finished requests


def cold_factor(observations: int, factor: float, n: int) -> float:
    """1 + (factor − 1)·(1 − observations/n) while observations < n, then 1: conservative before measuring."""
    if n <= 0 or observations >= n:
        return 1.0
    return 1.0 + (factor - 1.0) * (1.0 - observations / n)


def safety_factor(rel_var: float | None, safety: float, k: float, cap: float) -> float:
    """max(safety, 1 + k·σ) capped, where σ² is the EW mean squared relative error of past predictions."""
    if rel_var is None:
        return safety
    return min(cap, max(safety, 1.0 + k * rel_var**0.5))


@dataclass
class EngineEstimator:
    settings: EstimatorSettings = field(default_factory=EstimatorSettings)
    ttft: WLS = field(default_factory=WLS)
    tpot: WLS = field(default_factory=WLS)
    ttft_var: float | None = None
    tpot_var: float | None = None
    service_s: float | None = None
    observations: int = 0

    def _raw(self, load: float) -> tuple[float, float]:
        s = self.settings
        return (
            wls_predict(self.ttft, load, (s.prior_ttft_s, s.prior_ttft_slope_s), s.ridge),
            wls_predict(self.tpot, load, (s.prior_tpot_s, s.prior_tpot_slope_s), s.ridge),
        )

    def observe(
        self, load: float, ttft_s: float | None, tpot_s: float | None, service_s: float | None
    ) -> None:
        s = self.settings
        pred_ttft, pred_tpot = self._raw(load)
        if ttft_s is not None:
            if self.ttft.w > 0 and pred_ttft > 0:
                self.ttft_var = ewma(self.ttft_var, (ttft_s / pred_ttft - 1) ** 2, s.spread_alpha)
            self.ttft = wls_update(self.ttft, load, ttft_s, s.decay)
        if tpot_s is not None:
            if self.tpot.w > 0 and pred_tpot > 0:
                self.tpot_var = ewma(self.tpot_var, (tpot_s / pred_tpot - 1) ** 2, s.spread_alpha)
            self.tpot = wls_update(self.tpot, load, tpot_s, s.decay)
        if service_s is not None:
            self.service_s = ewma(self.service_s, service_s, s.service_alpha)
        self.observations += 1

    def predict(self, load: float) -> tuple[float, float, float]:
        """(ttft, tpot, tpot_hi) in seconds at ``load`` running requests: TTFT and TPOT times the safety
        factor; ``tpot_hi`` times the spread factor max(safety, 1 + k·σ) (used to time the reply reserve)."""
        s = self.settings
        ttft, tpot = self._raw(load)
        cold = cold_factor(self.observations, s.cold_factor, s.cold_observations)
        f_ttft = safety_factor(self.ttft_var, s.safety, s.spread_k, s.max_factor) * cold
        f_tpot = safety_factor(self.tpot_var, s.safety, s.spread_k, s.max_factor) * cold
        return ttft * f_ttft, max(tpot * s.safety * cold, 1e-4), max(tpot * f_tpot, 1e-4)

    def service_time(self, default: float) -> float:
        return self.service_s if self.service_s is not None else default


class LoopLag:
    """Event-loop lag of this process: how late a short sleep wakes up (EWMA, seconds).

    Deadlines are enforced by this loop; when it lags (CPU saturated by HTTP, tokenization, detokenization)
    every request is late by about that much, so the lag counts as queue wait and, past a limit, refuses.
    """

    def __init__(self, interval_s: float = 0.02, alpha: float = 0.3):
        self.interval_s = interval_s
        self.alpha = alpha
        self.value = 0.0

    def observe(self, lag_s: float) -> None:
        self.value = ewma(self.value, max(0.0, lag_s), self.alpha)

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
    """Owns the per-engine estimators and slot queues; plans budgets and decides admission."""

    def __init__(
        self,
        policy: BudgetPolicy,
        capacities: dict[str, int],
        estimator: EstimatorSettings | None = None,
        max_loop_lag_s: float = 0.15,
        ramp_start: int | None = None,
    ):
        """``ramp_start``: a cold engine opens this many slots, one more per finished request (slow start,
        as TCP does), up to its capacity; None opens them all at once."""
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

    def estimates(
        self, engine: str, queue: QueueState | None = None, default_service_s: float = 1.0
    ) -> Estimates:
        """Estimates for a request that arrives now at ``engine`` (it will run with the current load + 1)."""
        q = queue or self.queue_state(engine)
        est = self.estimators[engine]
        load = min(q.capacity, q.running + q.waiting + 1)
        ttft, tpot, tpot_hi = est.predict(load)
        wait = queue_wait(q.waiting, q.running, q.capacity, est.service_time(default_service_s))
        # a lagging event loop delays everything: it counts as wait
        return Estimates(wait=wait + self.loop_lag.value, ttft=ttft, tpot=tpot, tpot_hi=tpot_hi)

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
    ) -> TokenBudget | Reject:
        """``plan(deadline, queue_state)``: a token budget for the time left, or a refusal. ``min_thinking``:
        the model's thinking floor, which a probe gets (see below)."""
        if self.loop_lag.value > self.max_loop_lag_s:  # the front end (this process) is saturated
            return Reject(max(self.policy.min_retry_after_s, self.loop_lag.value), "frontend_saturated")
        q = queue or self.queue_state(engine)
        est = self.estimates(engine, q, default_service_s=remaining_s)
        plan = plan_budget(
            remaining_s,
            est,
            self.policy,
            max_thinking=max_thinking,
            reply_reserve=reply_reserve,
            max_tokens=max_tokens,
            thinking_allowed=thinking_allowed,
            now=now,
        )
        est_n = self.estimators[engine]
        learning = est_n.observations < est_n.settings.cold_observations
        free = q.running == 0 or (learning and q.running < q.capacity)
        short = isinstance(plan, TokenBudget) and plan.thinking_cap < min_thinking and learning
        if (isinstance(plan, Reject) or short) and free and q.waiting == 0 and remaining_s > 0:
            # An idle engine never refuses, nor a free slot while the estimates are still being learnt (nor
            # does it then deny the thinking floor): they can be stale or pessimistic (a cold start), and only
            # an admitted request refreshes them. The probe gets the model's thinking floor and the minimal
            # reply; the hard deadline bounds it (a probe cut there gets the fallback reply, not a guess).
            cap = self.policy.max_tokens if max_tokens is None else min(max_tokens, self.policy.max_tokens)
            reply = max(1, min(self.policy.min_reply_tokens, cap))
            thinking = max(0, min(min_thinking, cap - reply)) if thinking_allowed else 0
            return TokenBudget(thinking, reply, probe=True)
        return plan

    def observe(
        self, engine: str, *, load: float, ttft_s: float | None, tpot_s: float | None, service_s: float | None
    ) -> None:
        est = self.estimators[engine]
        est.observe(load, ttft_s, tpot_s, service_s)
        if self.ramp_start is not None:
            self.queues[engine].open_slots(self.ramp_start + est.observations)

    def snapshot(self) -> dict[str, dict]:
        out = {}
        for name, q in self.queues.items():
            est = self.estimates(name)
            out[name] = {
                "running": q.running,
                "waiting": q.waiting,
                "capacity": q.capacity,
                "observations": self.estimators[name].observations,
                "estimated_wait_ms": round(est.wait * 1000, 2),
                "estimated_ttft_ms": round(est.ttft * 1000, 2),
                "estimated_tpot_ms": round(est.tpot * 1000, 3),
                "estimated_tpot_hi_ms": round(est.tpot_reply * 1000, 3),
                "loop_lag_ms": round(self.loop_lag.value * 1000, 2),
                "send_ms": None if self.send_s is None else round(self.send_s * 1000, 2),
                "at": time.time(),
            }
        return out
