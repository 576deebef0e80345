"""The server's lifespan: engines, A/B hooks, supervision and background tasks start with the app and stop with it.

An engine whose restart budget is spent stops the server, which then exits with ``ENGINE_GAVE_UP_EXIT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI

from livethink.serve.config import ServeConfig
from livethink.serve.engines import EngineSet, EngineStartError, start_engines
from livethink.serve.engines.base import Engine
from livethink.serve.engines.priority import deprioritize_children
from livethink.serve.engines.supervisor import Supervision
from livethink.serve.request_path.service import Service
from livethink.serve.telemetry.ab_hooks import ABTestHooks, NoExperiment, ServeHooks, SpoolCollector
from livethink.serve.telemetry.engine_metrics import EngineStatsCollector
from livethink.serve.telemetry.metrics import ServeMetrics

log = logging.getLogger(__name__)
ENGINE_GAVE_UP_EXIT = 4  # the process's exit code once an engine's restart budget is spent


# vLLM's loggers that report the engine core's end as an error (``EngineDeadError``: its output task is cancelled
# when the engine is shut down), although a stop we asked for is normal
VLLM_STOP_LOGGERS = ("vllm.v1.engine.async_llm", "vllm.v1.engine.core_client", "vllm.v1.engine.output_processor")
STOP_SETTLE_S = 0.2  # vLLM's output tasks log their end on the event loop shortly after the shutdown returns


class QuietEngineStop(logging.Filter):
    """Drop vLLM's ``ERROR`` records of an ``EngineDeadError`` while the server stops its engines on purpose."""

    dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        exc = record.exc_info[1] if record.exc_info else None
        dead = type(exc).__name__ == "EngineDeadError" or "EngineDeadError" in record.getMessage()
        self.dropped += dead
        return not dead


async def stop_engines(engines: dict[str, Engine]) -> None:
    """Stop every engine at once (each waits for its engine core in a thread): a two-arm server exits in the time
    of one engine's shutdown. A failing stop is logged and does not keep the others running. vLLM's
    ``EngineDeadError`` lines about the stop asked for here are not logged (``QuietEngineStop``)."""

    async def stop(key: str, engine: Engine) -> None:
        try:
            await engine.stop()
        except Exception:
            log.warning("engine %s: stop failed", key, exc_info=True)

    quiet = QuietEngineStop()
    loggers = [logging.getLogger(name) for name in VLLM_STOP_LOGGERS]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        await asyncio.gather(*(stop(key, engine) for key, engine in engines.items()))
        if any(getattr(e, "kind", None) == "vllm" for e in engines.values()):
            await asyncio.sleep(STOP_SETTLE_S)
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)
    quieted = f" ({quiet.dropped} EngineDeadError records of the stop not logged)" if quiet.dropped else ""
    log.info("engines stopped: %s%s", ", ".join(engines), quieted)


def _give_up(app: FastAPI, key: str, reason: str) -> None:
    """An engine's restart budget is spent: stop serving and exit non-zero, so that the process's own supervisor
    (systemd, Kubernetes, ``livethink.replicas``) restarts it."""
    log.error("engine %s: %s; the server exits with code %d", key, reason, ENGINE_GAVE_UP_EXIT)
    app.state.exit_code = ENGINE_GAVE_UP_EXIT
    if app.state.request_exit is not None:
        app.state.request_exit()



def lifespan(
    config: ServeConfig, engine_set: EngineSet | None, hooks: ServeHooks | None
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """The app's lifespan: start the engines (or ``engine_set``'s), the A/B hooks (``hooks``, else the
    config's experiment), supervision and the background tasks; serve; stop them all."""

    @contextlib.asynccontextmanager
    async def run(app: FastAPI) -> AsyncIterator[None]:
        metrics = ServeMetrics()
        es = engine_set
        t_start = time.monotonic()
        if es is None:
            try:
                es = await start_engines(config)
            except EngineStartError as exc:
                if app.state.exit_on_engine_error:  # the CLI: one line with the reason, no stack trace
                    print(f"livethink serve: {exc}", file=sys.stderr, flush=True)
                    os._exit(3)
                log.error("%s", exc)
                raise
        else:
            for engine in es.engines.values():
                await engine.start()
        h = hooks
        if h is None and config.experiment is not None:
            h = ABTestHooks.open(
                config.experiment.file,
                config.experiment.store,
                set(config.models),
                on_error=lambda kind: metrics.ab_errors.labels(kind).inc(),
                spool_dir=config.experiment.spool_dir,
                spool_max_mb=config.experiment.spool_max_mb,
            )
        if h is not None and hasattr(h, "health"):
            metrics.registry.register(SpoolCollector(h))
        supervision = Supervision(
            es.engines, config.engine.supervision(), metrics, enabled=config.engine.supervise,
            start_s=time.monotonic() - t_start, on_give_up=functools.partial(_give_up, app),
            on_started=lambda: deprioritize_children(config.engine.nice),
        )  # fmt: skip
        svc = Service(config, supervision.engines, es.engine_keys, es.capacities, h or NoExperiment(), metrics)
        metrics.registry.register(EngineStatsCollector(svc.engine_stats))  # vLLM's own statistics, at scrape time
        deprioritize_children(config.engine.nice)
        if config.engine.warmup:
            await svc.warmup()
            deprioritize_children(config.engine.nice)  # threads the engines started on their first requests
        # The start-up heap (torch, transformers, the engines' clients) never becomes garbage: frozen, it leaves
        # the full collections, whose pauses stalled the event loop for ~100 ms (read as a saturated front end).
        # vLLM's engine core does the same (vllm.utils.gc_utils.freeze_gc_heap; docs.python.org/3/library/gc.html).
        gc.collect()
        gc.freeze()
        app.state.service = svc
        app.state.engine_fallback = es.fallback_reason
        app.state.started = int(time.time())
        background = [asyncio.create_task(svc.controller.loop_lag.run())]
        prober = svc.start_idle_probes()
        if prober is not None:
            background.append(asyncio.create_task(prober.run()))
        app.state.supervision = supervision
        supervision.start()
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await supervision.stop()
            await stop_engines(es.engines)
            if h is not None and hooks is None:
                h.close()

    return run
