"""Admission: plan a job's token budget against its deadline and the queue, and refuse at once (429 +
Retry-After) what cannot be met, or what falls below the model's thinking floor where the endpoint sheds it.
A livestream job with ``on_refusal: filler`` is not refused with a 429: it is marked (``job.refusal_reason``)
and answered with a filler line (``running.py``), counted as a refusal all the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from livethink.serve.budget.controller import BudgetController, QueueState
from livethink.serve.budget.plan import Reject, TokenBudget, retry_after
from livethink.serve.config import ServeConfig
from livethink.serve.errors import APIError, overloaded
from livethink.serve.request_path.accounting import Accounting
from livethink.serve.request_path.jobs import Job
from livethink.serve.request_path.quality import ThinkingFloor, below_floor_action, required_thinking
from livethink.serve.telemetry.ab_hooks import ServeHooks
from livethink.serve.telemetry.metrics import ServeMetrics


class Admission:
    def __init__(
        self,
        config: ServeConfig,
        controller: BudgetController,
        floors: Mapping[str, ThinkingFloor],
        metrics: ServeMetrics,
        hooks: ServeHooks,
        accounting: Accounting,
        forced_end_tokens: Callable[[str, list[int], bool], int],
    ):
        self.config = config
        self.controller = controller
        self.floors = floors  # model -> its thinking floor (shared: an operator may change it while serving)
        self.metrics = metrics
        self.hooks = hooks
        self.accounting = accounting
        self.forced_end_tokens = forced_end_tokens
        self.finalize_s = config.budget.finalize_ms / 1000

    def hard_cut(self, job: Job) -> float:
        """Monotonic time at which generation stops: the deadline less the time the response needs to leave
        (``finalize_ms`` or the measured tail, whichever is larger) and the event loop's current lag."""
        return job.arrival + job.deadline_ms / 1000 - self.controller.send_reserve(self.finalize_s)

    def plan(self, job: Job, now: float, queue: QueueState | None = None) -> TokenBudget | Reject:
        """The token budget ``job`` gets if it starts at ``now`` (behind ``queue``; None: the live queue)."""
        remaining = self.hard_cut(job) - now
        room = self.config.engine.max_model_len - len(job.prompt_ids)
        max_tokens = min(job.max_tokens or room, room)
        forced_end = self.forced_end_tokens(job.model, job.prompt_ids, job.thinking)
        plan = self.controller.plan(
            job.engine_key,
            remaining,
            queue,
            max_thinking=job.max_thinking,
            reply_reserve=job.reply_reserve,
            max_tokens=max_tokens,
            thinking_allowed=job.thinking,
            now=now,
            min_thinking=job.min_thinking,
            model=job.reply_key,
            forced_end_tokens=forced_end,
            first_sentence=job.first_sentence_tokens if job.stream else None,
        )
        if job.reply_fills_max_tokens and isinstance(plan, TokenBudget):
            # the reserve plans thinking; the reply may use the rest of the caller's max_tokens (OpenAI's
            # contract), and the hard deadline still bounds its time
            spent = plan.thinking_cap + (forced_end if plan.thinking_cap else 0)
            plan = replace(plan, reply_limit=max(plan.reply_reserve, max_tokens - spent))
        return plan

    def below_floor_action(self, job: Job, plan: TokenBudget | Reject) -> str | None:
        """shed, fallback or answer when ``plan``'s thinking cap is under the model's floor (probes are exempt:
        they carry the floor), else None (``quality.below_floor_action``)."""
        if not isinstance(plan, TokenBudget) or plan.probe or plan.thinking_cap >= job.min_thinking:
            return None
        setting = getattr(self.config.endpoints, job.endpoint).below_min_thinking
        return below_floor_action(setting, self.floors[job.model], plan.thinking_cap).action

    def admit(self, job: Job) -> None:
        """Refuse at once (429 + Retry-After) if the deadline cannot be met given the queue, or if the model's
        thinking floor does not fit and the endpoint's below-floor action there is ``shed``; with ``fallback``
        it is marked for the fallback reply instead, with ``answer`` it goes on (counted when it runs)."""
        floor = self.floors[job.model].tokens
        job.min_thinking = required_thinking(floor, job.thinking, job.max_thinking)
        now = time.monotonic()
        plan = self.plan(job, now)
        if job.viewer_id:
            self.hooks.on_exposure(job.viewer_id, job.choice, job.public_id, job.simulated)
        action = self.below_floor_action(job, plan)
        if action in ("shed", "fallback"):
            self.metrics.below_floor.labels(*job.labels, action).inc()
            if action == "fallback":
                job.quality_fallback = True
                return
            assert isinstance(plan, TokenBudget)
            est = self.controller.estimates(job.engine_key)
            tokens = job.min_thinking + self.config.budget.min_reply_tokens
            wait = retry_after(self.hard_cut(job) - now, est, self.controller.policy, tokens)
            self._refuse(job, "below_min_thinking", overloaded(
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
            ))
            return
        if isinstance(plan, Reject):
            why = (
                "the server is saturated"
                if plan.reason == "frontend_saturated"
                else f"needs about {plan.needed_s * 1000:.0f} ms at the current load"
            )
            self._refuse(job, plan.reason, overloaded(
                f"deadline_ms: {job.deadline_ms} ms cannot be met ({why}); retry after "
                f"{plan.retry_after_s:.1f} s",
                plan.retry_after_s,
                "deadline_ms",
                {"experiment": job.choice.experiment, "arm": job.choice.arm, "reason": plan.reason},
            ))
            return
        job.plan = plan
        self.controller.queues[job.engine_key].reserve(job.request_id, job.arrival + job.deadline_ms / 1000)

    def _refuse(self, job: Job, reason: str, error: APIError) -> None:
        """Refuse ``job`` for ``reason``: raise ``error`` (the 429), or with ``on_refusal: filler`` (livestream)
        mark it for the filler line; its result then carries ``refused`` (accounting counts the refusal)."""
        if job.endpoint == "livestream" and job.on_refusal == "filler":
            self.metrics.rejections.labels(*job.labels, reason).inc()
            job.refusal_reason = reason
            return
        self.accounting.refused(job, reason)
        raise error
