"""The README's serve command on the embedded default config: vLLM answers, and engine failures are loud.

`livethink serve --config configs/tiny/serve.yaml` (a free port instead of 8000) with the tiny student where the
config expects it must run on vLLM, not fall back. `engine.kind: vllm` must fail at start with the reason and no
stack trace; `engine.kind: auto` may fall back, but says why in `/health`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from livethink.server_process import ServerProcess, free_port
from tests.support.serve import liveshop_test_tasks, tiny_student_dir

ROOT = Path(__file__).resolve().parents[2]
BAD_KV = "1.0"  # what a float config used to send: vLLM parses the variable with int()


def _workdir(tmp_path: Path) -> Path:
    """A working directory holding configs/ and the tiny student at runs/tiny/rft/final, as after `make demo`."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "runs/tiny/rft").mkdir(parents=True)
    os.symlink(tiny_student_dir(), tmp_path / "runs/tiny/rft/final")
    return tmp_path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
    return {**env, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT), **extra}


def _serve(workdir: Path, *args: str, **env: str) -> ServerProcess:
    port = free_port()
    command = [sys.executable, "-m", "livethink.cli", "serve", "--config", "configs/tiny/serve.yaml",
               "--port", str(port), *args]
    return ServerProcess(command, port=port, log_path=workdir / "server.log", ready_path="/health", cwd=workdir,
                         env=_env(**env), startup_timeout_s=300)


def _livestream(url: str) -> httpx.Response:
    task = liveshop_test_tasks()[0]
    body = {"viewer_id": "v-1", "question": task.question,
            "product_docs": [d.model_dump() for d in task.product_docs]}
    return httpx.post(f"{url}/v1/livestream/reply", json=body, timeout=30)


@pytest.mark.slow
@pytest.mark.vllm
def test_documented_serve_command_runs_on_vllm(tmp_path):
    server = _serve(_workdir(tmp_path))
    try:
        health = httpx.get(f"{server.url}/health", timeout=10).json()
        assert health["engines"] == {"rft": "vllm"}, server.tail()
        assert health["engine_fallback"] is None
        assert health["reasoning"]["rft"] == {"start": "<think>", "end": "</think>"}
        response = _livestream(server.url)
        assert response.status_code == 200, response.text
        assert response.json()["reply"]
    finally:
        server.close()


def test_engine_kind_vllm_fails_at_start_with_the_reason(tmp_path):
    workdir = _workdir(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "livethink.cli", "serve", "--config", "configs/tiny/serve.yaml",
         "--port", str(free_port()), "--engine", "vllm"],
        cwd=workdir, env=_env(VLLM_CPU_KVCACHE_SPACE=BAD_KV), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 3, result.stderr[-3000:]
    assert f"VLLM_CPU_KVCACHE_SPACE='{BAD_KV}': vLLM needs a whole number of GiB" in result.stderr
    assert "Traceback" not in result.stderr


def test_engine_kind_auto_says_why_it_fell_back(tmp_path):
    server = _serve(_workdir(tmp_path), VLLM_CPU_KVCACHE_SPACE=BAD_KV)
    try:
        health = httpx.get(f"{server.url}/health", timeout=10).json()
        assert health["engines"] == {"rft": "transformers"}
        assert "VLLM_CPU_KVCACHE_SPACE='1.0'" in health["engine_fallback"]
        assert "VLLM_CPU_KVCACHE_SPACE='1.0'" in server.tail(20_000)  # and in the log
        assert _livestream(server.url).status_code == 200
    finally:
        server.close()


def test_a_port_in_use_is_refused_before_the_engines_start(tmp_path):
    """`livethink serve` binds its port first: a taken port is named at once (exit 3), no engine is loaded, and no
    engine's own socket can take the port while the engines start."""
    import socket
    import subprocess
    import sys
    import time

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "livethink.cli", "serve", "--config", "configs/tiny/serve.yaml",
                               "--port", str(port)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 3, done.stderr[-2000:]
        assert f"livethink serve: cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
        assert "Traceback" not in done.stderr and "engine" not in done.stderr.lower()
        assert time.monotonic() - t0 < 60
    finally:
        holder.close()
