"""The engine benchmark's server and load: `livethink serve` on one engine in a subprocess, and open-loop
(Poisson) load against its livestream endpoint."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml
from serve_common import ROOT

from livethink.server_process import LOOPBACK, ServerProcess, free_port


# -- server -----------------------------------------------------------------------------------------------
class Server(ServerProcess):
    """`livethink serve` in a subprocess on a free loopback port."""

    def __init__(
        self, models: dict[str, Path], engine: str, workdir: Path, deadline_ms: int, timeout_s: float = 300
    ):
        config = {
            "models": {name: {"path": str(path)} for name, path in models.items()},
            "default_model": next(iter(models)),
            "engine": {"kind": engine, "kv_cache_gib": 1},
            "budget": {"deadline_ms": deadline_ms},
            "endpoints": {"livestream": {"deadline_ms": deadline_ms}, "chat": {"deadline_ms": 60_000}},
            "auth": {"api_key_env": None, "admin_key_env": None},
            "server": {"log_level": "warning"},
        }
        cfg = workdir / f"serve-{engine}-{'-'.join(models)}.yaml"
        cfg.write_text(yaml.safe_dump(config))
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        port = free_port(LOOPBACK)
        super().__init__(
            [
                sys.executable,
                "-m",
                "livethink.serve.cli",
                "--config",
                str(cfg),
                "--host",
                LOOPBACK,
                "--port",
                str(port),
            ],
            port=port,
            log_path=cfg.with_suffix(".log"),
            ready_path="/health",
            host=LOOPBACK,
            cwd=ROOT,
            env=env,
            startup_timeout_s=timeout_s,
        )

    def status(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/v1/admin/status", timeout=10).json()


# -- load -------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    status: int  # HTTP status, 0 = no answer (hang / transport error)
    client_ms: float
    data: dict[str, Any] = field(default_factory=dict)
    correct: bool = False


def _body(task: Any, i: int, deadline_ms: int) -> dict[str, Any]:
    return {
        "viewer_id": f"bench-{i}",
        "product_docs": [d.model_dump() for d in task.product_docs],
        "question": task.question,
        "history": [t.model_dump() for t in task.history],
        "deadline_ms": deadline_ms,
    }


async def run_load(
    url: str, tasks: list, rate: float, duration_s: float, max_requests: int, deadline_ms: int, seed: int
) -> tuple[list[Outcome], float]:
    """Open loop: request i is sent at its Poisson arrival time whatever happened to the others."""
    from livethink.rewards.judge import RubricJudge

    judge = RubricJudge()
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=max_requests))
    arrivals = arrivals[arrivals < duration_s]
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
    timeout = deadline_ms / 1000 + 10
    outcomes: list[Outcome] = []
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:

        async def one(i: int, at: float, t0: float) -> None:
            await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
            task = tasks[i % len(tasks)]
            start = time.monotonic()
            try:
                r = await client.post("/v1/livestream/reply", json=_body(task, i, deadline_ms))
                o = Outcome(r.status_code, (time.monotonic() - start) * 1000, r.json())
            except (httpx.HTTPError, ValueError):
                o = Outcome(0, (time.monotonic() - start) * 1000)
            if o.status == 200 and not o.data.get("fallback"):
                o.correct = judge.score(task, o.data.get("reply", "")).correct
            outcomes.append(o)

        t0 = time.monotonic()
        await asyncio.gather(*(one(i, float(at), t0) for i, at in enumerate(arrivals)))
        wall = time.monotonic() - t0
    return outcomes, wall


async def raw_throughput(url: str, model: str, n: int = 48, tokens: int = 64) -> dict[str, Any]:
    """n concurrent chat requests of exactly ``tokens`` generated tokens (no thinking, long deadline)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Describe the hoodie."}],
        "max_tokens": tokens,
        "ignore_eos": True,
        "chat_template_kwargs": {"enable_thinking": False},
        "deadline_ms": 60_000,
    }
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        t0 = time.monotonic()
        rs = await asyncio.gather(
            *(client.post("/v1/chat/completions", json={**body, "seed": i}) for i in range(n))
        )
        wall = time.monotonic() - t0
    done = [r.json()["usage"]["completion_tokens"] for r in rs if r.status_code == 200]
    return {
        "requests": n,
        "completed": len(done),
        "tokens": sum(done),
        "wall_s": round(wall, 2),
        "tokens_per_s": round(sum(done) / wall, 1),
    }
