"""Helpers for the serve tests: the shared tiny (untrained) student (from ``tests.support.students``), a uvicorn
server in a thread on a random loopback port, a CLI server in a
subprocess (``livethink.server_process``), and a deliberately slow / failing engine for fault injection."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from livethink.data.reasoning_format import THINK
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.config import ServeConfig, parse_config
from livethink.serve.engines import EngineSet
from livethink.serve.engines.base import FORCED_THINK_END, Delta, EngineDead, EngineStats, GenerationRequest
from livethink.server_process import ServerProcess, free_port
from tests.support.students import liveshop_test_tasks, tiny_student_dir  # noqa: F401 (re-exported)

ROOT = Path(__file__).resolve().parents[2]


def make_config(model_dir: Path | str, **overrides: Any) -> ServeConfig:
    data: dict[str, Any] = {
        "models": {"rft": {"path": str(model_dir)}},
        "default_model": "rft",
        "engine": {"kind": "transformers", "max_model_len": 1024, "warmup": False},
        "auth": {"api_key_env": None, "admin_key_env": None},
    }
    for key, value in overrides.items():
        node = data
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return parse_config(data)


class ServerThread:
    """``create_app(...)`` served by uvicorn in a background thread on 127.0.0.1 (random port)."""

    def __init__(self, app: Any, startup_timeout: float = 60.0):
        import uvicorn

        from livethink.serve.api.clock import uvicorn_http

        self.config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
            http=uvicorn_http(),
        )
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + startup_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def app(self) -> Any:
        return self.config.app

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


class CLIServer(ServerProcess):
    """``python -m livethink.serve.cli --config X`` in a subprocess (vLLM needs a real ``__main__``)."""

    def __init__(self, config: dict[str, Any], workdir: Path, startup_timeout: float = 240.0, log_format: str = "text"):
        path = workdir / "serve.yaml"
        path.write_text(yaml.safe_dump(config))
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        port = free_port()
        super().__init__(
            [sys.executable, "-m", "livethink.serve.cli", "--config", str(path), "--port", str(port),
             "--log-format", log_format],
            port=port,
            log_path=workdir / "server.log",
            ready_path="/health",
            cwd=ROOT,
            env=env,
            startup_timeout_s=startup_timeout,
        )


class SlowEngine:
    """Fault-injection engine (tests only): deterministic words at a fixed pace, honouring the budget.

    ``think_words`` reasoning tokens (or until the cap / thinking deadline, then the forced end), then the
    reply ``reply`` word by word (up to the budget's reply cap). ``ttft_s`` / ``token_s`` set the pace;
    ``fail_after`` raises after that many tokens; ``ignore_budget`` ignores caps and deadlines (a runaway
    engine the server must cut). Records aborts, cancellations and what is running.

    Supervision faults: ``die()`` kills it (requests in flight raise ``EngineDead``, ``alive()`` turns False until
    a restart), ``wedge()`` / ``unwedge()`` stop and resume its output (a SIGSTOPped engine); ``fail_starts``
    makes that many (re)starts fail; ``start_s`` is how long a start takes.
    """

    kind = "fake"
    reasoning_format = THINK

    def __init__(
        self,
        tokenizer: Any,
        *,
        ttft_s: float = 0.01,
        token_s: float = 0.005,
        think_words: int = 20,
        reply: str = "The hoodie costs $39. It ships in 2 days.",
        fail_after: int | None = None,
        ignore_budget: bool = False,
        models: tuple[str, ...] = ("rft",),
    ):
        self.tokenizer = tokenizer
        self.ttft_s, self.token_s = ttft_s, token_s
        self.think_words, self.reply = think_words, reply
        self.fail_after = fail_after
        self.ignore_budget = ignore_budget
        self.models = models
        self.active: set[str] = set()
        self.aborted: list[str] = []
        self.cancelled: list[str] = []
        self.started = 0
        self.budgets: list[TokenBudget] = []
        self.requests: list[GenerationRequest] = []
        self.up = True  # usable without start() (tests that drive a Service directly)
        self.starts = 0
        self.fail_starts = 0
        self.start_s = 0.0
        self._died = asyncio.Event()
        self._running = asyncio.Event()  # cleared: wedged
        self._running.set()

    async def start(self) -> None:
        self.starts += 1
        await asyncio.sleep(self.start_s)
        if self.fail_starts > 0:
            self.fail_starts -= 1
            raise RuntimeError("injected start failure")
        self._died = asyncio.Event()
        self._running.set()
        self.up = True

    async def stop(self) -> None:
        self.up = False

    def alive(self) -> bool:
        return self.up

    def die(self) -> None:
        self.up = False
        self._died.set()

    def wedge(self) -> None:
        self._running.clear()

    def unwedge(self) -> None:
        self._running.set()

    async def _tick(self, seconds: float) -> None:
        """Sleep, then wait while wedged; raise ``EngineDead`` if the engine dies meanwhile."""
        await asyncio.sleep(seconds)
        if not self._running.is_set() or self._died.is_set():
            died = asyncio.ensure_future(self._died.wait())
            running = asyncio.ensure_future(self._running.wait())
            try:
                await asyncio.wait({died, running}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                died.cancel()
                running.cancel()
        if self._died.is_set() or not self.up:
            raise EngineDead("injected engine death")

    def tokenizer_for(self, model: str) -> Any:
        return self.tokenizer

    async def generate(self, request: GenerationRequest, budget: TokenBudget) -> AsyncIterator[Delta]:
        rid = request.request_id
        self.active.add(rid)
        self.started += 1
        self.budgets.append(budget)
        self.requests.append(request)
        produced = 0
        try:
            await self._tick(self.ttft_s)
            thinking = request.thinking
            count = 0
            while thinking:
                due = budget.thinking_deadline is not None and time.monotonic() >= budget.thinking_deadline
                if (count >= budget.thinking_cap or due) and not self.ignore_budget:
                    yield Delta(FORCED_THINK_END, 4, forced_end_of_thinking=True)
                    break
                if count >= self.think_words:
                    yield Delta("\n</think>\n\n", 4)
                    break
                produced += 1
                self._maybe_fail(produced)
                yield Delta(f"step{count} ", 1)
                count += 1
                await self._tick(self.token_s)
            finish = "stop"
            for i, word in enumerate(self.reply.split(" ")):
                if i >= budget.reply_cap and not self.ignore_budget:
                    finish = "length"
                    break
                produced += 1
                self._maybe_fail(produced)
                yield Delta(word if i == 0 else " " + word, 1)
                await self._tick(self.token_s)
            yield Delta("", 0, finish_reason=finish, thinking_tokens=count)
        except asyncio.CancelledError:
            self.cancelled.append(rid)
            raise
        finally:
            self.active.discard(rid)

    def _maybe_fail(self, produced: int) -> None:
        if self.fail_after is not None and produced > self.fail_after:
            raise RuntimeError("injected engine failure")

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    def stats(self) -> EngineStats:
        return EngineStats(self.kind, self.models, len(self.active), len(self.active), len(self.aborted))


def engine_set(engine: Any, capacity: int = 4, model: str = "rft") -> EngineSet:
    return EngineSet({model: engine}, {model: model}, {model: capacity})


def serve_engine(engine: Any, capacity: int = 4, **overrides: Any) -> ServerThread:
    """The server on real loopback HTTP over ``engine`` (the tiny student's config, with ``overrides``)."""
    from livethink.serve.api.app import create_app

    return ServerThread(create_app(make_config(tiny_student_dir(), **overrides), engine_set(engine, capacity)))


def load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


LIVE_BODY = {
    "viewer_id": "viewer-1",
    "question": "How much is the hoodie?",
    "product_docs": [{"product_id": "p1", "title": "Hoodie", "text": "Price: $39. Ships in 2 days."}],
}


def engine_core(pid: int) -> Any:
    """The ``VLLM::EngineCore`` process under the server process ``pid`` (a ``psutil.Process``)."""
    import psutil

    children = psutil.Process(pid).children(recursive=True)
    for child in children:
        try:
            if "EngineCore" in " ".join(child.cmdline()) or "EngineCore" in child.name():
                return child
        except psutil.NoSuchProcess:
            continue
    raise AssertionError(f"no VLLM::EngineCore among {[(c.pid, c.name()) for c in children]}")
