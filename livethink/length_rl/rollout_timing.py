"""The rollout engine's busy time, for the idle shares of the engine and the trainer (``benchmarks/rollouts.py``).

``EngineTimer.wrap`` times every generation call on the engine: the colocated ``LLM.generate``, the server
client's ``generate`` (on the decoupled mode's worker thread too), or, with transformers rollouts, the policy's own
``generate``. ``MetricsCallback`` logs the running total as
``rollout/engine_busy_s`` beside ``elapsed_s`` (wall time since the training loop began), so the engine's idle share
over a run is ``1 − engine_busy_s / elapsed_s``. Weight reloads are not counted as generation.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any


class EngineTimer:
    """Running total of the seconds the rollout engine spent in generation calls (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.busy_s = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self.busy_s += seconds

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with each call's wall time added to the total (also when it raises)."""

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(time.perf_counter() - start)

        return timed


def time_engine(generation: Any) -> EngineTimer:
    """An ``EngineTimer`` over TRL's ``VLLMGeneration``: its colocated engine's or server client's ``generate``."""
    timer = EngineTimer()
    engine = getattr(generation, "llm", None) or getattr(generation, "vllm_client", None)
    if engine is None:
        raise ValueError("time_engine: the vLLM generation has neither a colocated engine (llm) nor a server client")
    engine.generate = timer.wrap(engine.generate)
    return timer


def time_model(model: Any) -> EngineTimer:
    """An ``EngineTimer`` over a transformers policy's ``generate`` (TRL's rollouts without vLLM call it)."""
    timer = EngineTimer()
    model.generate = timer.wrap(model.generate)
    return timer
