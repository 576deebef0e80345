"""Prometheus metrics of the server (one registry per app), labelled by endpoint, arm and model.

``arm`` is ``none`` for requests outside any experiment. Deadline hit rate =
``livethink_deadline_met_total / livethink_deadline_total`` (also exported directly as a gauge over the last
``window`` replies per arm and model).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.2,
    0.3,
    0.5,
    0.75,
    0.9,
    1.0,
    1.1,
    1.25,
    1.5,
    2.0,
    3.0,
    5.0,
    10.0,
    30.0,
)
TOKEN_BUCKETS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LABELS = ("endpoint", "arm", "model")

__all__ = ["CONTENT_TYPE_LATEST", "ServeMetrics", "arm_label"]


def arm_label(arm: str | None) -> str:
    return arm or "none"


class ServeMetrics:
    def __init__(self, window: int = 1000):
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "livethink_requests",
            "Requests by final status (ok, fallback, rejected, error, cancelled)",
            (*LABELS, "status"),
            registry=r,
        )
        self.rejections = Counter(
            "livethink_rejections",
            "Requests refused with 429 (admission control)",
            (*LABELS, "reason"),
            registry=r,
        )
        self.ttft = Histogram(
            "livethink_time_to_first_token_seconds",
            "Arrival to first generated token",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttfr = Histogram(
            "livethink_time_to_first_reply_token_seconds",
            "Arrival to first reply (content) token",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "livethink_e2e_seconds",
            "Arrival to complete response",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "livethink_queue_wait_seconds",
            "Wait for an engine slot",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "livethink_tokens", "Tokens by kind (prompt, reasoning, reply)", (*LABELS, "kind"), registry=r
        )
        self.reasoning_tokens = Histogram(
            "livethink_reasoning_tokens",
            "Reasoning tokens per reply",
            LABELS,
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.deadline = Counter("livethink_deadline", "Replies with a deadline", LABELS, registry=r)
        self.deadline_met = Counter(
            "livethink_deadline_met", "Replies sent within their deadline", LABELS, registry=r
        )
        self.deadline_hit_rate = Gauge(
            "livethink_deadline_hit_rate",
            "Share of the last replies within the deadline",
            ("arm", "model"),
            registry=r,
        )
        self.forced_end = Counter(
            "livethink_forced_end_of_thinking",
            "Replies whose thinking was cut by the budget",
            LABELS,
            registry=r,
        )
        self.fallbacks = Counter(
            "livethink_fallbacks", "Replies replaced by the fallback at the hard deadline", LABELS, registry=r
        )
        self.below_floor = Counter(
            "livethink_below_min_thinking",
            "Requests whose thinking budget fell below the model's floor, by what was done (shed, fallback, answer)",
            (*LABELS, "action"),
            registry=r,
        )
        self.aborts = Counter(
            "livethink_engine_aborts", "Engine requests aborted", ("model", "reason"), registry=r
        )
        self.in_flight = Gauge(
            "livethink_in_flight", "Requests running on the engine", ("model",), registry=r
        )
        self.queued = Gauge("livethink_queued", "Requests waiting for an engine slot", ("model",), registry=r)
        self.estimate = Gauge(
            "livethink_estimate_seconds",
            "Controller estimates for a new request",
            ("model", "quantity"),
            registry=r,
        )
        self.deadline_used = Histogram(
            "livethink_deadline_used_ratio",
            "Share of the deadline a reply used (arrival to last byte / deadline, the client's clock)",
            LABELS,
            buckets=(0.1, 0.25, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.25, 2.0),
            registry=r,
        )
        self.plan_error = Histogram(
            "livethink_plan_error_seconds",
            "Actual minus planned completion time of a reply",
            LABELS,
            buckets=(-0.5, -0.25, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.25, 0.5),
            registry=r,
        )
        self.refused_share = Gauge(
            "livethink_refused_share",
            "Share of requests refused with 429 over the refusal window (budget.refusal_window_s)",
            registry=r,
        )
        self.refusing_while_idle = Gauge(
            "livethink_refusing_while_idle",
            "1 while the server refuses most requests although its engines are idle (/health: degraded)",
            registry=r,
        )
        self.engine_up = Gauge(
            "livethink_engine_up", "1 while the engine serves (ok or stalled), else 0", ("engine",), registry=r
        )
        self.engine_restarts = Counter(
            "livethink_engine_restarts",
            "Engine restart attempts, by why it went down (died, stalled, start_failed)",
            ("engine", "reason"),
            registry=r,
        )
        self.ab_errors = Counter(
            "livethink_ab_log_errors", "A/B events that could not be logged", ("kind",), registry=r
        )
        self._window = window
        self._recent: dict[tuple[str, str], collections.deque[bool]] = {}

    def record_deadline(self, endpoint: str, arm: str, model: str, met: bool) -> None:
        self.deadline.labels(endpoint, arm, model).inc()
        if met:
            self.deadline_met.labels(endpoint, arm, model).inc()
        recent = self._recent.setdefault((arm, model), collections.deque(maxlen=self._window))
        recent.append(met)
        self.deadline_hit_rate.labels(arm, model).set(sum(recent) / len(recent))

    def render(self, refresh: Callable[[], None] | None = None) -> bytes:
        """The exposition text; ``refresh`` first updates gauges computed on demand."""
        if refresh is not None:
            refresh()
        return generate_latest(self.registry)
