"""The request path shared by both endpoints: arm → model → prompt → admission → engine slot → budgeted,
deadline-bounded generation → result, metrics and A/B events.

``Service.prepare_*`` validates and builds a ``Job`` (400/404 errors); ``admit`` refuses at once (429) when
the deadline cannot be met given the queue; ``run`` streams ``Piece`` events and ends with ``Done(result)``.
At the hard deadline the engine request is aborted and the usable part of the reply is kept, or replaced by
the configured fallback (``result.fallback``). A cancelled ``run`` (client gone) aborts the engine request too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from livethink.data.budget_forcing import ForcingTokens, thinking_opened
from livethink.data.prompt import build_messages, render_prompt_ids
from livethink.data.reasoning_format import ReasoningFormat
from livethink.data.schema import Reference, Task
from livethink.rewards.parse import parse_completion
from livethink.serve.budget import Reject, TokenBudget, retry_after
from livethink.serve.config import ServeConfig
from livethink.serve.controller import BudgetController, QueueState
from livethink.serve.engines.base import Engine, GenerationRequest, SamplingOptions
from livethink.serve.errors import APIError, bad_request, overloaded
from livethink.serve.estimates import stream_timing
from livethink.serve.generation import Done, End, Piece, Progress, Result, produce
from livethink.serve.hooks import ArmChoice, NoExperiment, ResponseRecord, ServeHooks
from livethink.serve.metrics import ServeMetrics, arm_label
from livethink.serve.probes import PROBE_MESSAGES, IdleProber, ProbeTiming, probe_once
from livethink.serve.protocol import ChatCompletionRequest, LivestreamReplyRequest
from livethink.serve.quality import below_floor_action, below_floor_report, floor_for, required_thinking
from livethink.serve.reasoning import ThinkSplitter, usable_reply
from livethink.serve.refusals import RecentRefusals

log = logging.getLogger(__name__)
AUTO_MODEL = "auto"  # chat requests naming this model get the A/B arm's variant (or the default model)


@dataclass
class Job:
    request_id: str
    endpoint: str  # livestream | chat
    model: str
    engine_key: str
    choice: ArmChoice
    viewer_id: str | None
    prompt_ids: list[int]
    thinking: bool
    sampling: SamplingOptions
    deadline_ms: int
    arrival: float  # monotonic
    max_tokens: int | None = None
    max_thinking: int | None = None
    reply_reserve: int | None = None
    simulated: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    deferred: bool = False  # accounting waits for ``Service.finish`` (the last byte sent); else at the end of run
    result: Result | None = None
    t_done: float | None = None  # monotonic: generation over, the result built
    t_cut: float | None = None  # monotonic: the planned hard cut, when generation was cut there
    min_thinking: int = 0  # the model's thinking floor for this request (``quality.required_thinking``)
    quality_fallback: bool = False  # admitted to the fallback reply: the floor did not fit the deadline

    @property
    def labels(self) -> tuple[str, str, str]:
        return self.endpoint, arm_label(self.choice.arm), self.model


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
        self.controller = BudgetController(
            config.budget.policy(),
            dict(capacities),
            config.budget.estimator(),
            config.budget.max_loop_lag_ms / 1000,
            config.budget.ramp_start,
            reply_quantile=config.budget.reply_quantile,
            trickle_s=config.budget.trickle_s,
            shared_compute=config.budget.resolved_shared_compute(),
        )
        self.finalize_s = config.budget.finalize_ms / 1000
        self.floors = {m: floor_for(config, m) for m in self.engine_keys}
        self._forcing_tokens: dict[str, ForcingTokens] = {}
        self.refusals = RecentRefusals(config.budget.refusal_window_s)
        self._last_active = {key: time.monotonic() for key in self.engines}
        self.prober: IdleProber | None = None

    def idle_seconds(self, engine_key: str) -> float:
        """How long ``engine_key`` has had nothing running or waiting (0 while busy)."""
        q = self.controller.queues[engine_key]
        if q.running or q.waiting:
            return 0.0
        return time.monotonic() - self._last_active[engine_key]

    def engines_idle(self) -> bool:
        return all(self.idle_seconds(k) > 0 for k in self.engines)

    def _model_of(self, engine_key: str) -> str:
        return next(m for m, k in self.engine_keys.items() if k == engine_key)

    def start_idle_probes(self) -> IdleProber | None:
        """Build the idle prober (``engine.probe_interval_s``; None: off); the app runs ``prober.run()``."""
        interval = self.config.engine.probe_interval_s
        if interval is None:
            return None
        engines = {}
        for key, engine in self.engines.items():
            model = self._model_of(key)
            engines[key] = (engine, model, self._tokenize(model, PROBE_MESSAGES, True, "messages"))
        self.prober = IdleProber(engines, self.idle_seconds, self._observe_probe, interval)
        return self.prober

    def _observe_probe(self, engine_key: str, timing: ProbeTiming) -> None:
        """An idle probe's decode time (its TTFT is left out: a probe's prompt is shorter than a viewer's)."""
        if timing.tpot_s is not None:
            load = self.controller.running_load(engine_key, extra=1)  # the probe, and any engine beside it
            self.controller.observe(engine_key, load=load, ttft_s=None, tpot_s=timing.tpot_s, service_s=None)

    @property
    def models(self) -> list[str]:
        return list(self.engine_keys)

    # -- building jobs ----------------------------------------------------------------------------------
    def _choose(self, viewer_id: str | None, forced_arm: str | None) -> ArmChoice:
        return self.hooks.assign(viewer_id, forced_arm)

    def _check_model(self, model: str, param: str = "model") -> str:
        if model not in self.engine_keys:
            raise APIError(
                404,
                f"{param}: the model {model!r} does not exist (models: {self.models})",
                "not_found_error",
                param,
                "model_not_found",
            )
        return model

    def _deadline(self, requested: int | None, choice: ArmChoice, endpoint: str) -> int:
        deadline = requested or choice.deadline_ms or self.config.deadline_ms(endpoint)
        if deadline > self.config.budget.max_deadline_ms:
            raise bad_request(
                f"deadline_ms: {deadline} exceeds the server's maximum of "
                f"{self.config.budget.max_deadline_ms} ms",
                "deadline_ms",
            )
        return deadline

    def reasoning_format(self, model: str) -> ReasoningFormat:
        """The model's reasoning delimiters (resolved by its engine at start)."""
        return self.engines[self.engine_keys[model]].reasoning_format

    def _tokenize(self, model: str, messages: list[dict[str, str]], thinking: bool, param: str) -> list[int]:
        tok = self.engines[self.engine_keys[model]].tokenizer_for(model)
        ids = render_prompt_ids(tok, messages, self.reasoning_format(model), thinking)
        limit = self.config.max_prompt_tokens
        if len(ids) > limit:
            raise bad_request(
                f"{param}: the prompt has {len(ids)} tokens, more than this server's limit of {limit}",
                param,
                "context_length_exceeded",
            )
        return ids

    def prepare_livestream(
        self, body: LivestreamReplyRequest, simulated: bool = False, arrival: float | None = None
    ) -> Job:
        """``arrival``: when the request reached the server (monotonic); the deadline counts from there."""
        arrival = arrival or time.monotonic()
        choice = self._choose(body.viewer_id, body.arm)
        model = self._check_model(body.model or choice.variant or self.config.default_model)
        deadline = self._deadline(body.deadline_ms, choice, "livestream")
        rid = f"live-{uuid.uuid4().hex}"
        task = Task(
            id=rid,
            split="test",
            product_docs=tuple(body.product_docs),
            question=body.question,
            history=tuple(body.history),
            reference=Reference(kind="not_stated"),
            kind="attribute",
            difficulty=1,
        )
        thinking = choice.thinking_budget != 0 and self.reasoning_format(model).thinks
        ids = self._tokenize(model, build_messages(task), thinking, "product_docs")
        s = self.config.sampling
        return Job(
            rid,
            "livestream",
            model,
            self.engine_keys[model],
            choice,
            body.viewer_id,
            ids,
            thinking,
            SamplingOptions(
                s.temperature,
                s.top_p,
                body.seed,
                stream_interval=self.config.endpoints.livestream.stream_interval,
            ),
            deadline,
            arrival,
            max_tokens=choice.max_tokens,
            max_thinking=choice.thinking_budget,
            reply_reserve=choice.reply_reserve,
            simulated=simulated,
        )

    def prepare_chat(
        self, body: ChatCompletionRequest, simulated: bool = False, arrival: float | None = None
    ) -> Job:
        arrival = arrival or time.monotonic()
        viewer = body.viewer_id or body.user
        choice = self._choose(viewer, body.arm) if (body.model == AUTO_MODEL or body.arm) else ArmChoice()
        model = (choice.variant or self.config.default_model) if body.model == AUTO_MODEL else body.model
        self._check_model(model)
        deadline = self._deadline(body.deadline_ms, choice, "chat")
        messages = [
            {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
            for m in body.messages
        ]
        if not any(m["content"].strip() for m in messages):
            raise bad_request("messages: every message is empty", "messages", "empty_prompt")
        caps = [c for c in (body.thinking_token_budget, choice.thinking_budget) if c is not None]
        max_thinking = min(caps) if caps else None
        enable = body.chat_template_kwargs.enable_thinking if body.chat_template_kwargs else True
        thinking = enable and max_thinking != 0 and self.reasoning_format(model).thinks
        ids = self._tokenize(model, messages, thinking, "messages")
        limits = [
            c for c in (body.max_completion_tokens, body.max_tokens, choice.max_tokens) if c is not None
        ]
        limit = min(limits) if limits else None
        reserve = choice.reply_reserve
        if limit is not None and body.thinking_token_budget:  # both given: the reply gets the rest (after a cut)
            rest = limit - body.thinking_token_budget - self._forced_end_tokens(model, ids, thinking)
            reserve = max(self.config.budget.min_reply_tokens, rest)
        s = self.config.sampling
        sampling = SamplingOptions(
            temperature=s.temperature if body.temperature is None else body.temperature,
            top_p=s.top_p if body.top_p is None else body.top_p,
            seed=body.seed,
            stop=body.stop_list(),
            min_tokens=body.min_tokens,
            ignore_eos=body.ignore_eos,
            stream_interval=self.config.endpoints.chat.stream_interval,
        )
        return Job(
            f"chatcmpl-{uuid.uuid4().hex}",
            "chat",
            model,
            self.engine_keys[model],
            choice,
            viewer,
            ids,
            thinking,
            sampling,
            deadline,
            arrival,
            max_tokens=limit,
            max_thinking=max_thinking,
            reply_reserve=reserve,
            simulated=simulated,
        )

    # -- admission --------------------------------------------------------------------------------------
    def hard_cut(self, job: Job) -> float:
        """Monotonic time at which generation stops: the deadline less the time the response needs to leave
        (``finalize_ms`` or the measured tail, whichever is larger) and the event loop's current lag."""
        return job.arrival + job.deadline_ms / 1000 - self.controller.send_reserve(self.finalize_s)

    def _plan(self, job: Job, now: float, queue: QueueState | None = None) -> TokenBudget | Reject:
        remaining = self.hard_cut(job) - now
        room = self.config.engine.max_model_len - len(job.prompt_ids)
        max_tokens = min(job.max_tokens or room, room)
        return self.controller.plan(
            job.engine_key,
            remaining,
            queue,
            max_thinking=job.max_thinking,
            reply_reserve=job.reply_reserve,
            max_tokens=max_tokens,
            thinking_allowed=job.thinking,
            now=now,
            min_thinking=job.min_thinking,
            model=self._reply_key(job),
            forced_end_tokens=self._forced_end_tokens(job.model, job.prompt_ids, job.thinking),
        )

    def _forced_end_tokens(self, model: str, prompt_ids: list[int], thinking: bool) -> int:
        """Tokens a cut adds beyond the thinking cap: the forced end, less the thinking the prompt pre-filled."""
        fmt = self.reasoning_format(model)
        if not (thinking and fmt.thinks):
            return 0
        tokens = self._forcing_tokens.get(model)
        if tokens is None:
            tok = self.engines[self.engine_keys[model]].tokenizer_for(model)
            tokens = self._forcing_tokens[model] = ForcingTokens.of(tok, fmt)
        opened = thinking_opened(prompt_ids, (), tokens)
        return max(0, len(tokens.forced_end) - (opened[1] if opened else 0))

    @staticmethod
    def _reply_key(job: Job) -> str:
        """Reply lengths are learnt per endpoint and model (a chat reply is not a livestream one)."""
        return f"{job.endpoint}:{job.model}"

    def below_floor(self, job: Job, plan: TokenBudget) -> bool:
        """The plan's thinking cap is under the model's floor (probes are exempt: they carry the floor)."""
        return not plan.probe and plan.thinking_cap < job.min_thinking

    def _below_floor_action(self, job: Job, cap: int) -> str:
        """shed, fallback or answer for ``job`` at thinking cap ``cap`` (``quality.below_floor_action``)."""
        setting = getattr(self.config.endpoints, job.endpoint).below_min_thinking
        return below_floor_action(setting, self.floors[job.model], cap).action

    def below_floor_report(self) -> dict[str, dict[str, dict[str, str]]]:
        """Per endpoint and model, what a request below the model's thinking floor gets and why."""
        return below_floor_report(self.config, self.floors)

    def admit(self, job: Job) -> None:
        """Refuse at once (429 + Retry-After) if the deadline cannot be met given the queue, or if the model's
        thinking floor does not fit and the endpoint's below-floor action there is ``shed``; with ``fallback``
        it is marked for the fallback reply instead, with ``answer`` it goes on (counted when it runs)."""
        floor = self.floors[job.model].tokens
        job.min_thinking = required_thinking(floor, job.thinking, job.max_thinking)
        now = time.monotonic()
        plan = self._plan(job, now)
        if job.viewer_id:
            self.hooks.on_exposure(job.viewer_id, job.choice, job.request_id, job.simulated)
        action = (
            self._below_floor_action(job, plan.thinking_cap)
            if isinstance(plan, TokenBudget) and self.below_floor(job, plan)
            else None
        )
        if action in ("shed", "fallback"):
            self.metrics.below_floor.labels(*job.labels, action).inc()
            if action == "fallback":
                job.quality_fallback = True
                return
            est = self.controller.estimates(job.engine_key)
            tokens = job.min_thinking + self.config.budget.min_reply_tokens
            wait = retry_after(self.hard_cut(job) - now, est, self.controller.policy, tokens)
            self._refuse(job, "below_min_thinking")
            raise overloaded(
                f"deadline_ms: {job.deadline_ms} ms leaves {plan.thinking_cap} thinking tokens at the current "
                f"load, below the {job.min_thinking} that model {job.model!r} needs to answer reliably "
                f"(min_thinking_tokens); retry after {wait:.1f} s",
                wait,
                "deadline_ms",
                {
                    "experiment": job.choice.experiment,
                    "arm": job.choice.arm,
                    "reason": "below_min_thinking",
                    "min_thinking_tokens": job.min_thinking,
                    "thinking_cap": plan.thinking_cap,
                },
            )
        if isinstance(plan, Reject):
            self._refuse(job, plan.reason)
            why = (
                "the server is saturated"
                if plan.reason == "frontend_saturated"
                else f"needs about {plan.needed_s * 1000:.0f} ms at the current load"
            )
            raise overloaded(
                f"deadline_ms: {job.deadline_ms} ms cannot be met ({why}); retry after "
                f"{plan.retry_after_s:.1f} s",
                plan.retry_after_s,
                "deadline_ms",
                {"experiment": job.choice.experiment, "arm": job.choice.arm, "reason": plan.reason},
            )
        self.controller.queues[job.engine_key].reserve(job.request_id, job.arrival + job.deadline_ms / 1000)

    def _refuse(self, job: Job, reason: str) -> None:
        self.refusals.record(reason)
        m = self.metrics
        m.rejections.labels(*job.labels, reason).inc()
        m.requests.labels(*job.labels, "rejected").inc()
        if job.viewer_id:
            rec = ResponseRecord((time.monotonic() - job.arrival) * 1000, None, 0, False, "rejected")
            self.hooks.on_response(job.viewer_id, job.choice, job.request_id, rec, job.simulated)

    # -- running ----------------------------------------------------------------------------------------
    async def run(self, job: Job) -> AsyncIterator[Piece | Done]:
        """Wait for an engine slot, generate within the deadline, stream pieces, end with ``Done``."""
        if job.quality_fallback:
            yield self._done(job, self._quality_fallback(job, 0.0))
            return
        engine = self.engines[job.engine_key]
        queue = self.controller.queues[job.engine_key]
        m = self.metrics
        hard = self.hard_cut(job)  # early enough for the answer to leave by the deadline
        progress = Progress(
            ThinkSplitter(phase="reasoning" if job.thinking else "reply", fmt=self.reasoning_format(job.model))
        )
        t_enqueue = time.monotonic()
        if self.prober is not None:
            self.prober.cancel(job.engine_key)  # a probe never delays a viewer
        self._last_active[job.engine_key] = t_enqueue
        m.queued.labels(job.model).inc()
        queue.unreserve(job.request_id)  # our own reservation is not a queue ahead of us
        est = self.controller.estimates(job.engine_key)
        min_needed = (
            est.ttft + self.config.budget.min_reply_tokens * est.tpot + self.controller.policy.margin_s
        )
        try:
            got = await queue.acquire(max(0.0, hard - t_enqueue - min_needed), key=job.request_id)
        finally:
            m.queued.labels(job.model).dec()
        t_start = time.monotonic()
        queue_s = t_start - t_enqueue
        m.queue.labels(*job.labels).observe(queue_s)
        budget: TokenBudget | None = None
        cut = True  # unless generation ends by itself
        if got:
            m.in_flight.labels(job.model).inc()
            load_start = self.controller.running_load(job.engine_key)
            try:
                plan = self._plan(job, t_start, QueueState(queue.running - 1, 0, queue.capacity))
                action = (
                    self._below_floor_action(job, plan.thinking_cap)
                    if isinstance(plan, TokenBudget) and self.below_floor(job, plan)
                    else None
                )
                if action in ("shed", "fallback"):  # below the floor now: the fallback (a 429 comes too late)
                    m.below_floor.labels(*job.labels, "fallback").inc()
                    job.quality_fallback = True
                elif isinstance(plan, TokenBudget):  # else the wait ate the budget: nothing fits any more
                    if action == "answer":  # a forced reply below the floor
                        m.below_floor.labels(*job.labels, "answer").inc()
                    budget = plan
                    request = GenerationRequest(
                        job.request_id, job.model, job.prompt_ids, job.sampling, job.thinking
                    )
                    deltas: asyncio.Queue = asyncio.Queue()
                    producer = asyncio.create_task(produce(engine, request, budget, hard, deltas))
                    try:
                        while True:
                            item = await deltas.get()
                            if isinstance(item, End):
                                break
                            for piece in progress.take(item, time.monotonic()):
                                yield piece
                    except (asyncio.CancelledError, GeneratorExit):
                        m.aborts.labels(job.model, "disconnect").inc()
                        m.requests.labels(*job.labels, "cancelled").inc()
                        raise
                    finally:
                        if not producer.done():
                            producer.cancel()
                        with contextlib.suppress(BaseException):
                            await producer
                        self._observe(job, t_start, progress, load_start, self.controller.running_load(job.engine_key))
                    if isinstance(item.status, BaseException):
                        self._failed(job)
                        raise item.status
                    cut = item.status == "deadline"
                    if cut:
                        job.t_cut = hard
                        m.aborts.labels(job.model, "deadline").inc()
            finally:
                queue.release()
                self._last_active[job.engine_key] = time.monotonic()
                m.in_flight.labels(job.model).dec()
        if job.quality_fallback:
            yield self._done(job, self._quality_fallback(job, queue_s))
            return
        for piece in progress.flush(time.monotonic()):
            yield piece
        yield self._done(job, self._result(job, progress, cut, budget, queue_s))

    def _done(self, job: Job, result: Result) -> Done:
        job.result, job.t_done = result, time.monotonic()
        if not job.deferred:
            self._record(job, result)
        return Done(result)

    def _quality_fallback(self, job: Job, queue_s: float) -> Result:
        """The configured fallback reply, without generating: the thinking floor does not fit the deadline."""
        e2e = time.monotonic() - job.arrival
        return Result(
            reasoning="",
            reply=self.config.budget.fallback_reply,
            finish_reason="stop",
            fallback=True,
            forced_end_of_thinking=False,
            deadline_met=e2e <= job.deadline_ms / 1000,
            prompt_tokens=len(job.prompt_ids),
            reasoning_tokens=0,
            completion_tokens=0,
            queue_ms=round(queue_s * 1000, 2),
            first_token_ms=None,
            first_reply_token_ms=None,
            e2e_ms=round(e2e * 1000, 2),
            budget=None,
            status="fallback",
            fallback_reason="below_min_thinking",
        )

    def stamp(self, job: Job, r: Result, now: float | None = None) -> Result:
        """Bring ``e2e_ms`` / ``deadline_met`` up to ``now`` (call right before serializing the response)."""
        e2e = (time.monotonic() if now is None else now) - job.arrival
        r.e2e_ms = round(e2e * 1000, 2)
        r.deadline_met = e2e <= job.deadline_ms / 1000
        return r

    def finish(self, job: Job, t_sent: float) -> None:
        """The last byte of ``job``'s response has left at ``t_sent``: account its client-clock span (metrics,
        deadline, A/B record) and teach the controller how long answers take to leave after generation (after
        the planned cut, for a cut reply: aborting and draining the engine count)."""
        r = job.result
        if r is None or not job.deferred:
            return  # no reply was produced (refused, cancelled, failed) or it was accounted already
        self.stamp(job, r, t_sent)
        end = job.t_cut if job.t_cut is not None else job.t_done  # a late cut counts too
        if end is not None:
            self.controller.observe_send(t_sent - end)
        self._record(job, r)

    async def complete(self, job: Job) -> Result:
        async for event in self.run(job):
            if isinstance(event, Done):
                return event.result
        raise RuntimeError("generation ended without a result")

    # -- bookkeeping ------------------------------------------------------------------------------------
    def _observe(self, job: Job, t_start: float, p: Progress, load_start: int, load_end: int) -> None:
        ttft, tpot = stream_timing(t_start, p.t_first, p.first_tokens, p.t_last, p.tokens)
        service = (p.t_last or time.monotonic()) - t_start
        self.controller.observe(
            job.engine_key,
            load=(load_start + max(load_end, 1)) / 2,
            ttft_s=ttft,
            tpot_s=tpot,
            service_s=service,
        )

    def _result(self, job: Job, p: Progress, cut: bool, budget: TokenBudget | None, queue_s: float) -> Result:
        fmt = self.reasoning_format(job.model)
        text = (fmt.prefill + p.raw) if job.thinking else p.raw
        parsed = parse_completion(text, fmt)
        complete = not cut and p.finish != "abort"
        body = parsed.reply if parsed.closed else ""
        if fmt.thinks and fmt.start in body:  # a reply that opens another think block ends there
            body = body[: body.index(fmt.start)]
        reply = usable_reply(body, complete)
        # no usable reply: the livestream always speaks something; chat only substitutes after a cut
        fallback = not reply and (cut or job.endpoint == "livestream")
        if fallback:
            reply = self.config.budget.fallback_reply
        thinking_tokens = (
            p.thinking_tokens if p.thinking_tokens is not None else (p.thinking_seen if job.thinking else 0)
        )
        e2e = time.monotonic() - job.arrival

        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - job.arrival) * 1000, 2)

        return Result(
            reasoning=parsed.reasoning if job.thinking else p.splitter.reasoning,
            reply=reply,
            finish_reason="length" if cut else p.finish,
            fallback=fallback,
            forced_end_of_thinking=p.forced,
            deadline_met=e2e <= job.deadline_ms / 1000,
            prompt_tokens=len(job.prompt_ids),
            reasoning_tokens=thinking_tokens,
            completion_tokens=p.tokens,
            queue_ms=round(queue_s * 1000, 2),
            first_token_ms=ms(p.t_first),
            first_reply_token_ms=ms(p.t_first_reply),
            e2e_ms=round(e2e * 1000, 2),
            budget=budget,
            cut_at_deadline=cut,
            status="fallback" if fallback else "ok",
            fallback_reason=("deadline" if cut else "no_reply") if fallback else None,
            planned_ms=ms(budget.expected_end) if budget is not None else None,
        )

    def _observe_reply(self, job: Job, r: Result) -> None:
        """Teach the controller the reply's length: a reply cut at the deadline or at its reserve counts as the
        whole reserve (its real length was at least that); no reply at all teaches nothing."""
        if r.budget is None or (job.thinking and r.first_reply_token_ms is None):
            return
        cut = r.cut_at_deadline or r.finish_reason == "length"
        self.controller.observe_reply(self._reply_key(job), r.budget.reply_reserve if cut else r.reply_tokens)

    def _record(self, job: Job, r: Result) -> None:
        self.refusals.record(None)
        self._observe_reply(job, r)
        m = self.metrics
        labels = job.labels
        m.requests.labels(*labels, r.status).inc()
        m.deadline_used.labels(*labels).observe(r.e2e_ms / job.deadline_ms)
        if r.planned_ms is not None:
            m.plan_error.labels(*labels).observe((r.e2e_ms - r.planned_ms) / 1000)
        if r.first_token_ms is not None:
            m.ttft.labels(*labels).observe(r.first_token_ms / 1000)
        if r.first_reply_token_ms is not None:
            m.ttfr.labels(*labels).observe(r.first_reply_token_ms / 1000)
        m.e2e.labels(*labels).observe(r.e2e_ms / 1000)
        m.tokens.labels(*labels, "prompt").inc(r.prompt_tokens)
        m.tokens.labels(*labels, "reasoning").inc(r.reasoning_tokens)
        m.tokens.labels(*labels, "reply").inc(r.reply_tokens)
        m.reasoning_tokens.labels(*labels).observe(r.reasoning_tokens)
        m.record_deadline(job.endpoint, arm_label(job.choice.arm), job.model, r.deadline_met)
        if r.forced_end_of_thinking:
            m.forced_end.labels(*labels).inc()
        if r.fallback:
            m.fallbacks.labels(*labels).inc()
        self.export_estimates(job.engine_key)
        if job.viewer_id:
            rec = ResponseRecord(r.e2e_ms, r.first_token_ms, r.completion_tokens, r.deadline_met, "ok")
            self.hooks.on_response(job.viewer_id, job.choice, job.request_id, rec, job.simulated)

    def export_estimates(self, engine_key: str) -> None:
        """The controller's estimates for a new request on ``engine_key``, as gauges (seconds)."""
        est = self.controller.estimates(engine_key)
        model = self._model_of(engine_key)
        g = self.metrics.estimate
        g.labels(model, "ttft").set(est.ttft)
        g.labels(model, "tpot").set(est.tpot_mean or est.tpot)  # the expected per-token time
        g.labels(model, "tpot_admission").set(est.tpot)  # x safety: what admission plans with
        g.labels(model, "tpot_tail").set(est.tpot_reply)  # times the end of thinking
        g.labels(model, "tpot_idle").set(self.controller.estimators[engine_key].predict(1).tpot_mean)
        g.labels(model, "wait").set(est.wait)

    async def warmup(self, rounds: int = 3, tokens: int = 64) -> None:
        """Seed each engine's idle decode estimate with a few short generations; the first (cold start: lazy
        engine setup, first prefill) is not counted."""
        for key, engine in self.engines.items():
            model = self._model_of(key)
            ids = self._tokenize(model, PROBE_MESSAGES, True, "messages")
            for i in range(rounds):
                timing = await probe_once(engine, model, ids, tokens, f"warmup-{key}-{i}")
                if i > 0:
                    self._observe_probe(key, timing)
            self.export_estimates(key)

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

    def _failed(self, job: Job) -> None:
        """The engine failed the request (e.g. it died under it: a 503): count it and record the error for the
        viewer's arm, so the A/B record keeps every exposed request."""
        self.metrics.requests.labels(*job.labels, "error").inc()
        if job.viewer_id:
            rec = ResponseRecord((time.monotonic() - job.arrival) * 1000, None, 0, False, "error")
            self.hooks.on_response(job.viewer_id, job.choice, job.request_id, rec, job.simulated)
