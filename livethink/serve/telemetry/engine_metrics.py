"""vLLM's own engine statistics on ``/metrics``, read at scrape time, labelled by engine.

Each vLLM engine keeps the statistics vLLM hands its stat logger (``livethink.serve.engines.vllm_stats``); the
server's ``engine_stats()`` reports them under ``scheduler``. ``EngineStatsCollector`` turns that report into:

- gauges ``livethink_vllm_requests_running``, ``livethink_vllm_requests_waiting`` and
  ``livethink_vllm_kv_cache_usage_ratio`` (as of the engine's last scheduler step);
- counters ``livethink_vllm_preemptions_total``, ``livethink_vllm_prompt_tokens_total``,
  ``livethink_vllm_generation_tokens_total``, ``livethink_vllm_prefix_cache_queries_total`` and
  ``livethink_vllm_prefix_cache_hits_total`` (since the server started; they survive an engine restart).

Sum the counters across replicas; the gauges are one engine's state. An engine without vLLM statistics (the
transformers fallback, or ``engine.export_engine_stats: false``) has no series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["EngineStatsCollector"]

GAUGES = (
    ("livethink_vllm_requests_running", "running", "Requests vLLM's scheduler is running"),
    ("livethink_vllm_requests_waiting", "waiting", "Requests waiting in vLLM's scheduler"),
    ("livethink_vllm_kv_cache_usage_ratio", "kv_cache_usage", "Share of vLLM's KV-cache blocks in use (0-1)"),
)
COUNTERS = (
    ("livethink_vllm_preemptions", "preemptions_total", "Requests vLLM preempted (KV cache evicted, recomputed)"),
    ("livethink_vllm_prompt_tokens", "prompt_tokens_total", "Prompt tokens vLLM prefilled"),
    ("livethink_vllm_generation_tokens", "generation_tokens_total", "Tokens vLLM generated"),
    ("livethink_vllm_prefix_cache_queries", "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache"),
    ("livethink_vllm_prefix_cache_hits", "prefix_cache_hits_total", "Prompt tokens found in the prefix cache"),
)


class EngineStatsCollector:
    """A Prometheus collector over ``read()``: engine key -> that engine's stats dict (its ``scheduler`` entry,
    when present, holds vLLM's statistics). Register it on the server's registry."""

    def __init__(self, read: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = {key: s["scheduler"] for key, s in self.read().items() if s.get("scheduler")}
        for name, field, doc in GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["engine"])
            for key, sched in stats.items():
                family.add_metric([key], float(sched.get(field, 0.0)))
            yield family
        for name, field, doc in COUNTERS:
            family = CounterMetricFamily(name, doc, labels=["engine"])
            for key, sched in stats.items():
                family.add_metric([key], float(sched.get(field, 0)))
            yield family
