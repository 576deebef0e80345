"""vLLM's own engine statistics (KV-cache use, running and waiting requests, preemptions, tokens), kept per engine.

vLLM's default Prometheus logger writes into the process-wide ``prometheus_client`` registry, where a second
``AsyncLLM`` in the same process (one per served checkpoint) unregisters the first one's metrics, and which the
server's own registry does not export. Instead each engine hands vLLM a custom stat logger
(``AsyncLLM(stat_loggers=[...])``, the documented extension point: ``vllm.v1.metrics.loggers.StatLoggerBase``)
that folds every scheduler step into this engine's ``SchedulerCounters``: the latest gauges and running totals.
``/metrics`` reads them at scrape time (``livethink.serve.telemetry.engine_metrics``), labelled by engine, and so
do ``/v1/admin/status`` and the engine's ``stats()``.

``record`` runs on vLLM's output handler for every step, on the server's event loop: it only adds and assigns.
vLLM's ``SchedulerStats`` and ``IterationStats`` are not a stable interface (its docstring says so); every field
read here is read with a default, so a renamed field reads 0 rather than breaking the engine.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["SchedulerCounters", "stat_logger_factory"]


@dataclass
class SchedulerCounters:
    """One engine's statistics from vLLM: gauges as of the last step, counters since the server started (they
    survive an engine restart, so they only grow)."""

    running: int = 0  # requests the scheduler is running
    waiting: int = 0  # requests waiting to be scheduled
    kv_cache_usage: float = 0.0  # share of the KV-cache blocks in use, 0..1
    steps_total: int = 0  # scheduler steps recorded
    preemptions_total: int = 0  # requests preempted (their KV cache evicted, to be recomputed)
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    prefix_cache_queries_total: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits_total: int = 0

    def record(self, scheduler: Any, iteration: Any) -> None:
        """Fold one step's ``SchedulerStats`` and ``IterationStats`` (either may be None) in."""
        if scheduler is not None:
            self.steps_total += 1
            self.running = int(getattr(scheduler, "num_running_reqs", 0))
            self.waiting = int(getattr(scheduler, "num_waiting_reqs", 0))
            self.kv_cache_usage = float(getattr(scheduler, "kv_cache_usage", 0.0))
            prefix = getattr(scheduler, "prefix_cache_stats", None)
            if prefix is not None:
                self.prefix_cache_queries_total += int(getattr(prefix, "queries", 0))
                self.prefix_cache_hits_total += int(getattr(prefix, "hits", 0))
        if iteration is not None:
            self.preemptions_total += int(getattr(iteration, "num_preempted_reqs", 0))
            self.prompt_tokens_total += int(getattr(iteration, "num_prompt_tokens", 0))
            self.generation_tokens_total += int(getattr(iteration, "num_generation_tokens", 0))

    def snapshot(self) -> dict[str, float]:
        return asdict(self)


def stat_logger_factory(counters: SchedulerCounters) -> Any:
    """A per-engine stat logger factory for ``AsyncLLM(stat_loggers=[...])`` that records into ``counters``."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class CountersLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.counters = counters

        def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
                   engine_idx: int = 0) -> None:  # fmt: skip
            self.counters.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return CountersLogger
