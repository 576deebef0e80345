"""The metric catalogue: what analysis computes and what an experiment may name as primary or guardrail.

Viewer-level metrics have one value per viewer (the unit of randomisation) and are tested between arms;
response-level metrics have one value per reply and serve as guardrails (latency, tokens, errors).
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


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("click_rate", "viewer", "binary", True, "share of exposed viewers who clicked a product"),
        Metric("add_to_cart_rate", "viewer", "binary", True, "share of exposed viewers who added to cart"),
        Metric("order_rate", "viewer", "binary", True, "share of exposed viewers who ordered (conversion)"),
        Metric("orders_per_viewer", "viewer", "continuous", True, "orders per exposed viewer"),
        Metric("gmv_per_viewer", "viewer", "continuous", True, "order GMV per exposed viewer"),
        Metric("latency_ms", "response", "continuous", False, "end-to-end reply latency (ms)"),
        Metric("ttft_ms", "response", "continuous", False, "time to first content token (ms)"),
        Metric("tokens", "response", "continuous", False, "total generated tokens per reply"),
        Metric("deadline_met_rate", "response", "binary", True, "share of replies within the deadline"),
        Metric("correct_rate", "response", "binary", True, "share of judged replies that are correct"),
        Metric("helpful_rate", "response", "binary", True, "share of judged replies that are helpful"),
        Metric("error_rate", "response", "binary", False, "share of requests rejected or failed"),
    )
}
VIEWER_METRICS = tuple(n for n, m in METRICS.items() if m.level == "viewer")
RESPONSE_METRICS = tuple(n for n, m in METRICS.items() if m.level == "response")
OUTCOME_TYPES = ("click", "add_to_cart", "order")
