"""A real local HTTP server speaking the OpenAI chat-completions schema, with injected faults (test helper).

Completions come from the scripted teacher (``<think>`` traces). Each task gets a fault from ``FAULTS`` by its
position in the task list (cycled), so the expected outcome of every task is known in advance:

    ok                 normal answer (content with <think> tags)
    reasoning_field    normal answer, reasoning in ``message.reasoning`` (vLLM reasoning parser style)
    500_once           HTTP 500 on the first call, then ok            -> retried, ok
    429_once           HTTP 429 + Retry-After on the first call       -> retried, ok
    slow_once          sleeps past the client timeout once            -> retried, ok
    malformed_once     invalid JSON body once                         -> retried, ok
    500_always         HTTP 500 every time                            -> k failed: server_error
    slow_always        always past the client timeout                 -> k failed: timeout
    malformed_always   invalid JSON every time                        -> k failed: malformed_response
    context            HTTP 400 "maximum context length" (one call)   -> k failed: context_length, no retry
    truncated          choice 0: finish_reason=length, no reply       -> 1 failed: truncated
    empty              choice 1: empty content                        -> 1 failed: empty

Not in the default cycle (pass ``faults=``):

    429_date_once      HTTP 429 + Retry-After as an HTTP date 2 s ahead, once  -> waited for, ok
    429_long           HTTP 429 + Retry-After: 600 every time                  -> k failed: rate_limited, no retry

The server binds 127.0.0.1 on a free port, runs uvicorn in a thread and stops within a few seconds.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import threading
import time
from collections import Counter, defaultdict
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from livethink.data.prompt import build_messages
from livethink.data.schema import Task
from livethink.rewards.parse import parse_completion
from livethink.rft_distill.teachers.base import SamplingConfig
from livethink.rft_distill.teachers.scripted import ScriptedTeacher

FAULTS = ("ok", "500_always", "429_once", "slow_once", "reasoning_field", "malformed_once", "slow_always",
          "truncated", "context", "500_once", "malformed_always", "empty")
# failed samples per task for each fault, with their reason
EXPECTED_FAILURES = {"500_always": ("server_error", "all"), "429_long": ("rate_limited", "all"), "slow_always": ("timeout", "all"),
                     "malformed_always": ("malformed_response", "all"), "context": ("context_length", "all"),
                     "truncated": ("truncated", 1), "empty": ("empty", 1)}


def _key(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, sort_keys=True)


class FaultServer:
    """``with FaultServer(tasks) as server: server.base_url ...`` (see module docstring)."""

    def __init__(self, tasks: list[Task], slow_s: float = 2.0, delay_s: float = 0.0, support_n: bool = True,
                 faults: tuple[str, ...] = FAULTS):
        self.tasks = {_key(build_messages(t)): t for t in tasks}
        self.fault_of = {t.id: faults[i % len(faults)] for i, t in enumerate(tasks)}
        self.slow_s, self.delay_s, self.support_n = slow_s, delay_s, support_n
        self.calls: Counter = Counter()  # task id -> calls
        self.outcomes: Counter = Counter()  # what the server did
        self.lock = threading.Lock()
        self.teacher = ScriptedTeacher(error_rate=0.0)
        self.app = self._build()
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def expected_failures(self, task_ids: list[str], k: int) -> dict[str, int]:
        out: Counter = Counter()
        for task_id in task_ids:
            spec = EXPECTED_FAILURES.get(self.fault_of[task_id])
            if spec:
                out[spec[0]] += k if spec[1] == "all" else spec[1]
        return dict(out)

    def _build(self) -> FastAPI:
        app = FastAPI()
        first_calls: dict[str, int] = defaultdict(int)

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            body = await request.json()
            task = self.tasks.get(_key(body["messages"]))
            if task is None:
                return JSONResponse({"error": {"message": "unknown prompt"}}, status_code=400)
            with self.lock:
                self.calls[task.id] += 1
                first_calls[task.id] += 1
                call = first_calls[task.id]
            fault = self.fault_of[task.id]
            n = int(body.get("n", 1))
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if n > 1 and not self.support_n:
                return self._done("n_refused", JSONResponse(
                    {"error": {"message": "n must be 1 on this server"}}, status_code=400))
            if fault == "500_always" or (fault == "500_once" and call == 1):
                return self._done("500", JSONResponse({"error": {"message": "internal error"}}, status_code=500))
            if fault == "429_once" and call == 1:
                return self._done("429", JSONResponse({"error": {"message": "slow down"}}, status_code=429,
                                                      headers={"Retry-After": "0.2"}))
            if fault == "429_date_once" and call == 1:
                when = email.utils.formatdate(time.time() + 2, usegmt=True)
                return self._done("429", JSONResponse({"error": {"message": "slow down"}}, status_code=429,
                                                      headers={"Retry-After": when}))
            if fault == "429_long":
                return self._done("429", JSONResponse({"error": {"message": "come back later"}}, status_code=429,
                                                      headers={"Retry-After": "600"}))
            if fault == "slow_always" or (fault == "slow_once" and call == 1):
                await asyncio.sleep(self.slow_s)
                self._done("slow", None)
            if fault == "malformed_always" or (fault == "malformed_once" and call == 1):
                return self._done("malformed", Response('{"choices": [{"message": ', media_type="application/json"))
            if fault == "context":
                return self._done("context", JSONResponse(
                    {"error": {"message": "This model's maximum context length is 64 tokens. However, you "
                                          "requested 900 tokens."}}, status_code=400))
            sampling = SamplingConfig(temperature=float(body.get("temperature", 1.0)),
                                      max_tokens=int(body.get("max_tokens", 2048)), seed=body.get("seed"))
            first = int(body.get("seed") or 0)
            choices = [self._choice(task, fault, first + i, i, sampling) for i in range(n)]
            words = sum(len((c["message"]["content"] or "").split()) for c in choices)
            usage = {"prompt_tokens": sum(len(m["content"].split()) for m in body["messages"]),
                     "completion_tokens": words}
            usage["total_tokens"] = usage["prompt_tokens"] + words
            return self._done("ok", JSONResponse({"id": f"chatcmpl-{task.id}", "object": "chat.completion",
                                                  "model": body.get("model"), "choices": choices, "usage": usage}))

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        return app

    def _done(self, outcome: str, response: Response | None) -> Response | None:
        with self.lock:
            self.outcomes[outcome] += 1
        return response

    def _choice(self, task: Task, fault: str, seed_index: int, index: int, sampling: SamplingConfig) -> dict:
        sample = self.teacher.sample(task, seed_index % 1000, sampling)
        message: dict[str, Any] = {"role": "assistant", "content": sample.completion}
        finish = sample.finish_reason
        if fault == "reasoning_field":
            parsed = parse_completion(sample.completion)
            message = {"role": "assistant", "content": parsed.reply, "reasoning": parsed.reasoning}
        if fault == "truncated" and index == 0:
            message["content"], finish = "<think>\n" + " ".join(sample.reasoning.split()[:10]), "length"
        if fault == "empty" and index == 1:
            message["content"] = ""
        return {"index": index, "message": message, "finish_reason": finish}

    def __enter__(self) -> FaultServer:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="fault-server")
        self.thread.start()
        deadline = time.monotonic() + 10
        while not (self.server.started and self.server.servers):
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("fault server did not start")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.server is not None and self.thread is not None
        self.server.should_exit = True
        self.thread.join(timeout=5)
