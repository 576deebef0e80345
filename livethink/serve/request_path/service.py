"""The request path shared by both endpoints: arm → model → prompt → admission → engine slot → budgeted,
deadline-bounded generation → result, metrics and A/B events. ``Service`` composes its four parts, one module
each: ``jobs`` (``prepare_*``: a validated request becomes a ``Job``, or a 400/404), ``admission`` (``admit``:
a 429 at once when the deadline cannot be met given the queue), ``running`` (``run``: stream ``Piece`` events,
end with ``Done(result)``) and ``accounting`` (metrics, the controller's lessons, the A/B record). It knows
nothing of HTTP: its errors are ``errors.APIError``; the app turns them into responses.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from livethink.data.reasoning_format import ReasoningFormat
from livethink.serve.budget.controller import BudgetController
from livethink.serve.config import ServeConfig
from livethink.serve.engines.base import Engine
from livethink.serve.engines.probes import PROBE_MESSAGES, IdleProber, probe_once
from livethink.serve.protocol import ChatCompletionRequest, LivestreamReplyRequest
from livethink.serve.request_path.accounting import Accounting
from livethink.serve.request_path.admission import Admission
from livethink.serve.request_path.generation import Done, Piece, Result
from livethink.serve.request_path.jobs import AUTO_MODEL, Job, JobBuilder
from livethink.serve.request_path.quality import below_floor_report, floor_for
from livethink.serve.request_path.running import Runner
from livethink.serve.telemetry.ab_hooks import NoExperiment, ServeHooks
from livethink.serve.telemetry.metrics import ServeMetrics
from livethink.serve.telemetry.refusals import RecentRefusals

__all__ = ["AUTO_MODEL", "Job", "Result", "Service"]


class Service:
    def __init__(
        self,
        config: ServeConfig,
        engines: Mapping[str, Engine],
        engine_keys: Mapping[str, str],
        capacities: Mapping[str, int],
        hooks: ServeHooks | None = None,
        metrics: ServeMetrics | None = None,
    ):
        self.config = config
        self.engines = dict(engines)  # engine key -> engine
        self.engine_keys = dict(engine_keys)  # model -> engine key
        self.hooks = hooks or NoExperiment()
        self.metrics = metrics or ServeMetrics()
        b = config.budget
        self.controller = BudgetController(
            b.policy(),
            dict(capacities),
            b.estimator(),
            b.max_loop_lag_ms / 1000,
            b.ramp_start,
            reply_quantile=b.reply_quantile,
            trickle_s=b.trickle_s,
            shared_compute=b.resolved_shared_compute(),
        )
        self.floors = {m: floor_for(config, m) for m in self.engine_keys}
        self.refusals = RecentRefusals(b.refusal_window_s)
        self.jobs = JobBuilder(config, self.engines, self.engine_keys, self.hooks)
        self.accounting = Accounting(self.controller, self.metrics, self.hooks, self.refusals, self.jobs.model_of)
        self.admission = Admission(
            config, self.controller, self.floors, self.metrics, self.hooks, self.accounting,
            self.jobs.forced_end_tokens,
        )  # fmt: skip
        self.runner = Runner(
            config, self.engines, self.admission, self.accounting, self.metrics, self.jobs.reasoning_format
        )

    # -- the request path ----------------------------------------------------------------------------------
    async def prepare_livestream(
        self, body: LivestreamReplyRequest, simulated: bool = False, arrival: float | None = None
    ) -> Job:
        """The request's job (or a 400/404); its prompt is rendered and tokenised in a worker thread."""
        return await self.jobs.livestream(body, simulated, arrival)

    async def prepare_chat(
        self, body: ChatCompletionRequest, simulated: bool = False, arrival: float | None = None
    ) -> Job:
        """The request's job (or a 400/404); its prompt is rendered and tokenised in a worker thread."""
        return await self.jobs.chat(body, simulated, arrival)

    def admit(self, job: Job) -> None:
        self.admission.admit(job)

    def run(self, job: Job) -> AsyncIterator[Piece | Done]:
        return self.runner.run(job)

    async def complete(self, job: Job) -> Result:
        return await self.runner.complete(job)

    def stamp(self, job: Job, r: Result, now: float | None = None) -> Result:
        return self.accounting.stamp(job, r, now)

    def finish(self, job: Job, t_sent: float) -> None:
        self.accounting.finish(job, t_sent)

    # -- the models ----------------------------------------------------------------------------------------
    @property
    def models(self) -> list[str]:
        return self.jobs.models

    def reasoning_format(self, model: str) -> ReasoningFormat:
        return self.jobs.reasoning_format(model)

    def tokenize(self, model: str, messages: list[dict[str, str]], thinking: bool, param: str) -> list[int]:
        """The prompt ids the server sends ``model`` for ``messages`` (a 400 past ``max_prompt_tokens``), on the
        calling thread (the request path tokenises in a worker thread: ``JobBuilder.tokenize_off_loop``)."""
        return self.jobs.tokenize(model, messages, thinking, param)

    def below_floor_report(self) -> dict[str, dict[str, dict[str, str]]]:
        """Per endpoint and model, what a request below the model's thinking floor gets and why."""
        return below_floor_report(self.config, self.floors)

    # -- the engines ---------------------------------------------------------------------------------------
    def idle_seconds(self, engine_key: str) -> float:
        """How long ``engine_key`` has had nothing running or waiting (0 while busy)."""
        q = self.controller.queues[engine_key]
        if q.running or q.waiting:
            return 0.0
        return time.monotonic() - self.runner.last_active[engine_key]

    def engines_idle(self) -> bool:
        return all(self.idle_seconds(k) > 0 for k in self.engines)

    def start_idle_probes(self) -> IdleProber | None:
        """Build the idle prober (``engine.probe_interval_s``; None: off); the app runs ``prober.run()``."""
        interval = self.config.engine.probe_interval_s
        if interval is None:
            return None
        engines = {}
        for key, engine in self.engines.items():
            model = self.jobs.model_of(key)
            engines[key] = (engine, model, self.jobs.tokenize(model, PROBE_MESSAGES, True, "messages"))
        self.runner.prober = IdleProber(engines, self.idle_seconds, self.accounting.observe_probe, interval)
        return self.runner.prober

    async def warmup(self, rounds: int = 3, tokens: int = 64) -> None:
        """Seed each engine's idle decode estimate with a few short generations; the first (cold start: lazy
        engine setup, first prefill) is not counted."""
        for key, engine in self.engines.items():
            model = self.jobs.model_of(key)
            ids = self.jobs.tokenize(model, PROBE_MESSAGES, True, "messages")
            for i in range(rounds):
                timing = await probe_once(engine, model, ids, tokens, f"warmup-{key}-{i}")
                if i > 0:
                    self.accounting.observe_probe(key, timing)
            self.accounting.export_estimates(key)

    def engine_stats(self) -> dict[str, Any]:
        out = {}
        for key, engine in self.engines.items():
            s = engine.stats()
            out[key] = {
                "kind": s.kind,
                "models": list(s.models),
                "running": s.running,
                "engine_unfinished": s.engine_unfinished,
                "aborts": s.aborts,
                **s.extra,
            }
        return out
