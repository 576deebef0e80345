"""Prometheus metrics of the server (one registry per app), labelled by endpoint, arm and model.

``arm`` is ``none`` for requests outside any experiment. Everything a dashboard sums across replicas is a
counter: the deadline hit rate is ``sum(rate(livethink_deadline_met_total)) / sum(rate(livethink_deadline_total))``
and the refused share ``sum(rate(livethink_rejections_total)) / sum(rate(livethink_requests_total))``. The gauges
``livethink_deadline_hit_rate`` (met / replies since start, per arm and model, from those counters) and
``livethink_refused_share`` (the ``/health`` refusal window of this process) are one replica's view: never average
them across replicas. The registry also carries prometheus-client's ``process_*``, ``python_info`` and
``python_gc_*`` collectors. ``deploy/grafana/livethink.json`` is a dashboard over these.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
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
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
        PlatformCollector(registry=r)  # python_info
        GCCollector(registry=r)  # python_gc_{objects_collected,collections,objects_uncollectable}_total
        counter, gauge = functools.partial(Counter, registry=r), functools.partial(Gauge, registry=r)
        latency = functools.partial(Histogram, labelnames=LABELS, buckets=LATENCY_BUCKETS, registry=r)
        by = functools.partial(Counter, registry=r, labelnames=LABELS)  # by endpoint, arm and model
        self.requests = counter(
            "livethink_requests", "Requests by final status (ok, fallback, rejected, error, cancelled)",
            (*LABELS, "status"),
        )
        self.rejections = counter(
            "livethink_rejections", "Requests refused with 429 (admission control)", (*LABELS, "reason")
        )
        self.ttft = latency("livethink_time_to_first_token_seconds", "Arrival to first generated token")
        self.ttfr = latency("livethink_time_to_first_reply_token_seconds", "Arrival to first reply (content) token")
        self.e2e = latency("livethink_e2e_seconds", "Arrival to complete response")
        self.queue = latency("livethink_queue_wait_seconds", "Wait for an engine slot")
        self.tokens = counter("livethink_tokens", "Tokens by kind (prompt, reasoning, reply)", (*LABELS, "kind"))
        self.reasoning_tokens = Histogram(
            "livethink_reasoning_tokens", "Reasoning tokens per reply", LABELS, buckets=TOKEN_BUCKETS, registry=r
        )
        self.deadline = by("livethink_deadline", "Replies with a deadline")
        self.deadline_met = by("livethink_deadline_met", "Replies sent within their deadline")
        self.deadline_hit_rate = gauge(
            "livethink_deadline_hit_rate",
            "Replies within the deadline / replies since start (this process; aggregate the counters instead)",
            ("arm", "model"),
        )
        self.forced_end = by("livethink_forced_end_of_thinking", "Replies whose thinking was cut by the budget")
        self.fallbacks = by("livethink_fallbacks", "Replies replaced by the fallback at the hard deadline")
        self.below_floor = counter(
            "livethink_below_min_thinking",
            "Requests whose thinking budget fell below the model's floor, by what was done (shed, fallback, answer)",
            (*LABELS, "action"),
        )
        self.aborts = counter("livethink_engine_aborts", "Engine requests aborted", ("model", "reason"))
        self.in_flight = gauge("livethink_in_flight", "Requests running on the engine", ("model",))
        self.queued = gauge("livethink_queued", "Requests waiting for an engine slot", ("model",))
        self.estimate = gauge(
            "livethink_estimate_seconds", "Controller estimates for a new request", ("model", "quantity")
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
        self.refused_share = gauge(
            "livethink_refused_share",
            "Share of requests refused with 429 over this process's refusal window (budget.refusal_window_s; "
            "aggregate livethink_rejections_total / livethink_requests_total instead)",
        )
        self.refusing_while_idle = gauge(
            "livethink_refusing_while_idle",
            "1 while the server refuses most requests although its engines are idle (/health: degraded)",
        )
        self.engine_up = gauge("livethink_engine_up", "1 while the engine serves (ok or stalled), else 0", ("engine",))
        self.engine_restarts = counter(
            "livethink_engine_restarts",
            "Engine restart attempts, by why it went down (died, stalled, start_failed)",
            ("engine", "reason"),
        )
        self.ab_errors = counter("livethink_ab_log_errors", "A/B events that could not be logged", ("kind",))
        # streamed livestream replies, paced to speech
        self.first_sentence = latency(
            "livethink_first_sentence_seconds", "Arrival to the first sentence event of a streamed reply"
        )
        self.speech_stalls = by(
            "livethink_speech_stalls",
            "Sentences of streamed replies that came after the avatar had finished speaking the ones before",
        )
        self._hits: dict[tuple[str, str], list[int]] = {}  # (arm, model) -> [met, replies], as the counters

    def record_deadline(self, endpoint: str, arm: str, model: str, met: bool) -> None:
        self.deadline.labels(endpoint, arm, model).inc()
        if met:
            self.deadline_met.labels(endpoint, arm, model).inc()
        hits = self._hits.setdefault((arm, model), [0, 0])
        hits[0] += int(met)
        hits[1] += 1
        self.deadline_hit_rate.labels(arm, model).set(hits[0] / hits[1])

    def render(self, refresh: Callable[[], None] | None = None) -> bytes:
        """The exposition text; ``refresh`` first updates gauges computed on demand."""
        if refresh is not None:
            refresh()
        return generate_latest(self.registry)
