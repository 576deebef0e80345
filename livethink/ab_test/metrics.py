"""The metric catalogue: what analysis computes and what an experiment may name as primary or guardrail.

Viewer-level metrics have one value per viewer (the unit of randomisation) and are tested between arms;
response-level metrics have one value per request and serve as guardrails. Each response-level metric says
over which requests it is computed (``over``): latency and token metrics over *answered* requests only (a 429
or a fallback is not a fast reply); refusal, fallback, error rates and goodput over every request sent.
An experiment's declared outcome types (``outcomes:``) add viewer-level metrics of their own names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Metric:
    name: str
    level: Literal["viewer", "response"]
    kind: Literal["binary", "continuous"]
    higher_is_better: bool
    description: str
    over: str = "viewers"  # which units the metric averages over


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("click_rate", "viewer", "binary", True, "share of exposed viewers who clicked a product"),
        Metric("add_to_cart_rate", "viewer", "binary", True, "share of exposed viewers who added to cart"),
        Metric("order_rate", "viewer", "binary", True, "share of exposed viewers who ordered (conversion)"),
        Metric("orders_per_viewer", "viewer", "continuous", True, "orders per exposed viewer"),
        Metric("gmv_per_viewer", "viewer", "continuous", True, "order GMV per exposed viewer"),
        Metric("latency_ms", "response", "continuous", False, "end-to-end reply latency (ms)", "answered"),
        Metric("ttft_ms", "response", "continuous", False, "time to the first token, thinking included (ms)",
               "answered"),  # fmt: skip
        Metric("first_reply_ms", "response", "continuous", False, "time to the first reply token (ms)", "answered"),
        Metric("first_sentence_ms", "response", "continuous", False, "time to the first streamed sentence (ms)",
               "answered"),  # fmt: skip
        Metric("tokens", "response", "continuous", False, "total generated tokens per reply", "answered"),
        Metric("deadline_met_rate", "response", "binary", True, "share of replies within the deadline (server "
               "clock)", "replies"),  # fmt: skip
        Metric("correct_rate", "response", "binary", True, "share of judged replies that are correct", "answered"),
        Metric("helpful_rate", "response", "binary", True, "share of judged replies that are helpful", "answered"),
        Metric("forced_end_rate", "response", "binary", False, "share of replies whose thinking was ended",
               "answered"),  # fmt: skip
        Metric("cut_rate", "response", "binary", False, "share of replies cut at the deadline", "answered"),
        Metric("error_rate", "response", "binary", False, "share of requests that failed", "requests"),
        Metric("refusal_rate", "response", "binary", False, "share of requests refused (429)", "requests"),
        Metric("fallback_rate", "response", "binary", False, "share of requests answered with the fallback",
               "requests"),  # fmt: skip
        Metric("goodput", "response", "binary", True, "share of requests answered by the model, correct and "
               "within the deadline", "requests"),  # fmt: skip
    )
}
VIEWER_METRICS = tuple(n for n, m in METRICS.items() if m.level == "viewer")
RESPONSE_METRICS = tuple(n for n, m in METRICS.items() if m.level == "response")
OUTCOME_TYPES = ("click", "add_to_cart", "order")  # the funnel (``correct`` labels and declared types aside)
