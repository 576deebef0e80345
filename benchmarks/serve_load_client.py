"""The serving load benchmark's servers and load: a livethink or vLLM server, a client that sends one request
and judges its reply, and open-loop (Poisson) and one-at-a-time load."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from serve_common import ENV, ROOT

from livethink.eval.goodput import ViewerOutcome
from livethink.server_process import LOOPBACK, ServerProcess, free_port


# -- servers ----------------------------------------------------------------------------------------------
def livethink_server(sets: list[str], workdir: Path, tag: str, log_level: str = "warning",
                     log_format: str = "text") -> ServerProcess:
    port = free_port(LOOPBACK)
    argv = [sys.executable, "-m", "livethink.serve.cli", "--config", str(ROOT / "configs/tiny/serve.yaml"),
            "--host", LOOPBACK, "--port", str(port), "--log-level", log_level, "--log-format", log_format]
    for s in sets:
        argv += ["--set", s]
    return ServerProcess(argv, port=port, log_path=workdir / f"{tag}.log", ready_path="/health", host=LOOPBACK,
                         cwd=ROOT, env={**os.environ, **ENV}, startup_timeout_s=600, name=tag)


def vllm_server(model: Path, workdir: Path) -> ServerProcess:
    port = free_port(LOOPBACK)
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", LOOPBACK,
            "--port", str(port), "--max-model-len", "1024", "--dtype", "bfloat16", "--enforce-eager",
            "--served-model-name", "student"]
    return ServerProcess(argv, port=port, log_path=workdir / "vllm.log", ready_path="/health", host=LOOPBACK,
                         cwd=ROOT, env={**os.environ, **ENV}, startup_timeout_s=600, name="vllm")


# -- load -------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    status: int  # HTTP status; 0 = no answer in time (hang) or a transport error
    client_ms: float
    arm: str | None = None
    server_ms: float | None = None
    fallback: bool = False
    fallback_reason: str | None = None
    forced: bool = False
    correct: bool | None = None  # the judge's verdicts on a model reply (after the load, not in the event loop)
    helpful: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    task: Any = None
    reply: str | None = None


def live_body(task: Any, viewer: str, deadline_ms: int, arm: str | None = None,
              model: str | None = None) -> dict[str, Any]:
    body = {"viewer_id": viewer, "product_docs": [d.model_dump() for d in task.product_docs],
            "question": task.question, "history": [t.model_dump() for t in task.history], "deadline_ms": deadline_ms}
    if arm:
        body["arm"] = arm
    if model:
        body["model"] = model
    return body


def viewer_outcome(o: Outcome, deadline_ms: float) -> ViewerOutcome:
    """What the client saw, for the one goodput definition; ``deadline_ms`` is the one it is judged against."""
    model_reply = o.status == 200 and not o.fallback
    return ViewerOutcome(o.status or None, o.client_ms, deadline_ms, o.fallback, o.correct if model_reply else None)


class Client:
    """Sends one request and judges it. ``kind``: livethink (livestream endpoint) or vllm (completions).
    ``assign``: viewer id -> the A/B arm the server's experiment gives it, to label requests that got no answer."""

    def __init__(self, url: str, kind: str, deadline_ms: int, prompts: dict[str, str] | None = None,
                 vllm_params: dict[str, Any] | None = None, assign: Callable[[str], str | None] | None = None):
        from livethink.rewards.judge import RubricJudge

        self.url, self.kind, self.deadline_ms, self.assign = url, kind, deadline_ms, assign
        self.prompts, self.vllm_params = prompts or {}, vllm_params or {}
        self.judge = RubricJudge()

    async def one(self, client: httpx.AsyncClient, task: Any, viewer: str, arm: str | None = None,
                  model: str | None = None) -> Outcome:
        """``arm`` forces an A/B arm, ``model`` names the model; either labels the outcome when the server does not."""
        from livethink.rewards.parse import parse_completion

        label = arm or model or (self.assign(viewer) if self.assign else None)
        t0 = time.monotonic()
        try:
            if self.kind == "livethink":
                r = await client.post("/v1/livestream/reply",
                                      json=live_body(task, viewer, self.deadline_ms, arm, model))
            else:
                r = await client.post("/v1/completions",
                                      json={"model": "student", "prompt": self.prompts[task.id], **self.vllm_params})
            content = r.content
            ms = (time.monotonic() - t0) * 1000
        except httpx.HTTPError:
            return Outcome(0, (time.monotonic() - t0) * 1000, label)
        o = Outcome(r.status_code, ms, label)
        if r.status_code == 429 and self.kind == "livethink":
            error = json.loads(content)
            o.arm = error.get("arm") or label  # the A/B arm the refused viewer was assigned
            o.fallback_reason = (error.get("error") or {}).get("reason") or error.get("reason")  # why it was shed
        if r.status_code != 200:
            return o
        data = json.loads(content)
        if self.kind == "livethink":
            o.arm, o.server_ms = data.get("arm") or label, data["timings"]["e2e_ms"]
            o.fallback, o.fallback_reason = bool(data["fallback"]), data.get("fallback_reason")
            o.forced = bool(data["forced_end_of_thinking"])
            reply = data["reply"]
            o.data = {"reasoning_tokens": data["tokens"]["reasoning"], "reply_tokens": data["tokens"]["reply"]}
        else:
            text = "<think>\n" + data["choices"][0]["text"]
            reply = parse_completion(text).reply
            o.data = {"completion_tokens": data["usage"]["completion_tokens"]}
        o.task, o.reply = task, reply
        return o

    def judge_all(self, outs: list[Outcome]) -> list[Outcome]:
        for o in outs:
            if o.reply is not None and not o.fallback:
                v = self.judge.score(o.task, o.reply)
                o.correct, o.helpful = v.correct, v.helpful
        return outs


class GcPauses:
    """The client's own garbage-collection pauses while a phase runs: its clock would count them as the server's
    latency. Inside the block the cyclic collector is off (as ``timeit`` does), so a load phase never pauses for
    it: a collection of this process's heap (torch and transformers are imported by then) takes up to 300 ms.
    What runs anyway (an explicit ``gc.collect()``) is still counted. The collector is back on, and collects,
    after the block."""

    def __init__(self) -> None:
        self.count, self.max_ms, self.total_ms, self._start = 0, 0.0, 0.0, 0.0
        self._was_enabled = True

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        ms = (time.perf_counter() - self._start) * 1000
        self.count, self.total_ms, self.max_ms = self.count + 1, self.total_ms + ms, max(self.max_ms, ms)

    def __enter__(self) -> GcPauses:
        self._was_enabled = gc.isenabled()
        gc.disable()
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)
        if self._was_enabled:
            gc.enable()
            gc.collect()

    def summary(self) -> dict[str, float]:
        return {"collections": self.count, "max_ms": round(self.max_ms, 1), "total_ms": round(self.total_ms, 1)}


async def server_deadline_counts(client: httpx.AsyncClient) -> tuple[float, float]:
    """The server's own count of answered requests and of those within their deadline, by its last-byte clock
    (``livethink_deadline_total`` / ``livethink_deadline_met_total``, summed over labels)."""
    total = met = 0.0
    for line in (await client.get("/metrics")).text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("livethink_deadline_total{"):
            total += float(value)
        elif name.startswith("livethink_deadline_met_total{"):
            met += float(value)
    return total, met


async def open_loop(c: Client, tasks: list, rate: float, duration_s: float, seed: int, tag: str,
                    max_requests: int = 2000, models: list[str] | None = None,
                    stats: dict[str, Any] | None = None) -> tuple[list[Outcome], float]:
    """Poisson arrivals for ``duration_s`` (at most ``max_requests``; ``math.inf`` for exactly that many): request
    i leaves at its time whatever happened to the others. ``models``: request i names ``models[i % len]``.
    ``stats`` (livethink servers) gets the client's GC pauses and the server's own late count by its last-byte
    clock during the phase, to tell a late delivery from a late reply."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=max_requests))
    arrivals = arrivals[arrivals < duration_s]
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=500)
    async with httpx.AsyncClient(base_url=c.url, timeout=c.deadline_ms / 1000 + 10, limits=limits) as client:
        await client.get("/health")  # the client's own first-use costs are not the server's

        async def at(i: int, when: float, t0: float) -> Outcome:
            await asyncio.sleep(max(0.0, t0 + when - time.monotonic()))
            model = models[i % len(models)] if models else None
            return await c.one(client, tasks[i % len(tasks)], f"{tag}-{seed}-{i}", model=model)

        before = await server_deadline_counts(client) if stats is not None else None
        t0 = time.monotonic()
        with GcPauses() as pauses:
            outs = await asyncio.gather(*(at(i, float(w), t0) for i, w in enumerate(arrivals)))
        wall = time.monotonic() - t0
        if before is not None:
            await asyncio.sleep(0.5)  # the last replies' accounting runs after their last byte
            total, met = await server_deadline_counts(client)
            stats.update(client_gc=pauses.summary(), server_answered=int(total - before[0]),
                         server_late_last_byte=int((total - met) - (before[0] - before[1])))
    return c.judge_all(list(outs)), wall


async def one_at_a_time(c: Client, tasks: list, arm: str | None, tag: str, model: str | None = None) -> list[Outcome]:
    async with httpx.AsyncClient(base_url=c.url, timeout=c.deadline_ms / 1000 + 10) as client:
        await client.get("/health")
        with GcPauses():
            outs = [await c.one(client, t, f"{tag}-{i}", arm, model) for i, t in enumerate(tasks)]
    return c.judge_all(outs)
