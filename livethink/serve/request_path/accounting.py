"""Accounting: what the request path teaches the controller and records once a request is over: metrics by
endpoint, arm and model, the deadline on the client's clock, reply lengths, refusals and the A/B record of every
exposed request (answered, fallback, refused or failed: ``ab_record``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from livethink.serve.budget.controller import BudgetController
from livethink.serve.budget.estimates import stream_timing
from livethink.serve.engines.probes import ProbeTiming
from livethink.serve.request_path.generation import Progress, Result
from livethink.serve.request_path.jobs import Job
from livethink.serve.telemetry.ab_hooks import ResponseRecord, ServeHooks
from livethink.serve.telemetry.metrics import ServeMetrics, arm_label
from livethink.serve.telemetry.refusals import RecentRefusals


def ab_record(r: Result) -> ResponseRecord:
    """The A/B record of a request that got a reply: what the viewer got (the model's answer, the fallback, or a
    refusal the request path reports on the result), latency and the deadline on the server's clock, the first
    token (thinking included), the first reply token and first sentence (streamed), forced end and cut."""
    refused = bool(getattr(r, "refused", False))
    status = "refused" if refused else "fallback" if r.fallback else "error" if r.status == "error" else "answered"
    return ResponseRecord(
        r.e2e_ms, r.first_token_ms, r.completion_tokens, None if refused else r.deadline_met, status,
        first_reply_ms=r.first_reply_token_ms, first_sentence_ms=getattr(r, "first_sentence_ms", None),
        forced_end=r.forced_end_of_thinking, cut=r.cut_at_deadline,
    )  # fmt: skip


@dataclass
class Accounting:
    controller: BudgetController
    metrics: ServeMetrics
    hooks: ServeHooks
    refusals: RecentRefusals
    model_of: Callable[[str], str]  # engine key -> its model (the gauges' label)

    # -- what the controller learns ------------------------------------------------------------------------
    def observe_stream(self, job: Job, t_start: float, p: Progress, load: float) -> None:
        """One generation's first-token and per-token times, at the load it ran under (its time-weighted mean,
        ``BudgetController.mean_load``)."""
        ttft, tpot = stream_timing(t_start, p.t_first, p.first_tokens, p.t_last, p.tokens)
        service = (p.t_last or time.monotonic()) - t_start
        self.controller.observe(
            job.engine_key,
            load=load,
            ttft_s=ttft,
            tpot_s=tpot,
            service_s=service,
        )

    def observe_probe(self, engine_key: str, timing: ProbeTiming) -> None:
        """An idle probe's decode time (its TTFT is left out: a probe's prompt is shorter than a viewer's)."""
        if timing.tpot_s is not None:
            load = self.controller.running_load(engine_key, extra=1)  # the probe, and any engine beside it
            self.controller.observe(engine_key, load=load, ttft_s=None, tpot_s=timing.tpot_s, service_s=None)

    def _observe_reply(self, job: Job, r: Result) -> None:
        """Teach the controller the reply's length: a reply cut at the deadline or at its reserve counts as the
        whole reserve (its real length was at least that); no reply at all teaches nothing."""
        if r.budget is None or (job.thinking and r.first_reply_token_ms is None):
            return
        cut = r.cut_at_deadline or r.finish_reason == "length"
        self.controller.observe_reply(job.reply_key, max(r.budget.reply_reserve, r.reply_tokens) if cut else r.reply_tokens)

    def export_estimates(self, engine_key: str) -> None:
        """The controller's estimates for a new request on ``engine_key``, as gauges (seconds)."""
        est = self.controller.estimates(engine_key)
        model = self.model_of(engine_key)
        g = self.metrics.estimate
        g.labels(model, "ttft").set(est.ttft)
        g.labels(model, "tpot").set(est.tpot_mean or est.tpot)  # the expected per-token time
        g.labels(model, "tpot_admission").set(est.tpot)  # x safety: what admission plans with
        g.labels(model, "tpot_tail").set(est.tpot_reply)  # times the end of thinking
        g.labels(model, "tpot_idle").set(self.controller.estimators[engine_key].predict(1).tpot_mean)
        g.labels(model, "wait").set(est.wait)

    # -- the end of a request ------------------------------------------------------------------------------
    @staticmethod
    def stamp(job: Job, r: Result, now: float | None = None) -> Result:
        """Bring ``e2e_ms`` / ``deadline_met`` up to ``now`` (call right before serializing the response). A
        streamed reply's deadline bounds its first sentence."""
        e2e = (time.monotonic() if now is None else now) - job.arrival
        r.e2e_ms = round(e2e * 1000, 2)
        r.deadline_met = e2e <= job.deadline_ms / 1000
        if job.stream:
            r.deadline_met = r.first_sentence_ms is not None and r.first_sentence_ms <= job.deadline_ms
        return r

    def done(self, job: Job, r: Result) -> None:
        """Generation is over with ``r``: account it now, unless it waits for the last byte (``finish``)."""
        job.result, job.t_done = r, time.monotonic()
        if not job.deferred:
            self.record(job, r)

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
        self.record(job, r)

    def record(self, job: Job, r: Result) -> None:
        """A reply (generated or the fallback): metrics, the controller's reply length, the A/B record."""
        self.refusals.record(r.refusal_reason if r.refused else None)  # a filler line is a refusal
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
            self.hooks.on_response(job.viewer_id, job.choice, job.public_id, ab_record(r), job.simulated)

    def refused(self, job: Job, reason: str) -> None:
        """Admission refused ``job`` (a 429) for ``reason``."""
        self.refusals.record(reason)
        self.metrics.rejections.labels(*job.labels, reason).inc()
        self._unanswered(job, "rejected")

    def failed(self, job: Job) -> None:
        """The engine failed the request (e.g. it died under it: a 503)."""
        self._unanswered(job, "error")

    def _unanswered(self, job: Job, status: str) -> None:
        """Count a request without a reply and record it for the viewer's arm, so that the A/B record keeps
        every exposed request."""
        self.metrics.requests.labels(*job.labels, status).inc()
        if job.viewer_id:
            ab_status = "refused" if status == "rejected" else "error"
            rec = ResponseRecord((time.monotonic() - job.arrival) * 1000, status=ab_status)
            self.hooks.on_response(job.viewer_id, job.choice, job.public_id, rec, job.simulated)
