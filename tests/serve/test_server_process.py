"""ServerProcess against a real ``python -m http.server`` subprocess: ready, early exit, timeout, close."""

from __future__ import annotations

import sys

import httpx
import pytest

from livethink.server_process import ServerProcess, free_port

pytestmark = pytest.mark.timing  # asserts wall-clock behaviour (tests/conftest.py)


def test_serves_then_closes_idempotently(tmp_path):
    port = free_port()
    (tmp_path / "hello.txt").write_text("hi")
    argv = [sys.executable, "-u", "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)]
    server = ServerProcess(argv, port=port, log_path=tmp_path / "server.log", startup_timeout_s=30)
    try:
        assert server.url == f"http://127.0.0.1:{port}"
        assert server.startup_s > 0
        assert httpx.get(server.url + "/hello.txt").text == "hi"
    finally:
        server.close()
    server.close()  # idempotent
    assert server.proc.returncode is not None
    assert server.log.closed


def test_early_exit_raises_with_log_tail(tmp_path):
    argv = [sys.executable, "-c", "import sys; print('bad config: port', flush=True); sys.exit(3)"]
    with pytest.raises(RuntimeError, match=r"(?s)mysrv exited \(3\).*bad config: port"):
        ServerProcess(argv, port=free_port(), log_path=tmp_path / "b.log", name="mysrv")


def test_not_ready_in_time_is_stopped(tmp_path):
    argv = [sys.executable, "-c", "import time; print('warming up', flush=True); time.sleep(60)"]
    with pytest.raises(RuntimeError, match=r"(?s)did not answer .*/health in 2 s.*warming up") as err:
        ServerProcess(argv, port=free_port(), log_path=tmp_path / "c.log", ready_path="/health",
                      startup_timeout_s=1.5, stop_timeout_s=5)
    assert "warming up" in str(err.value)
