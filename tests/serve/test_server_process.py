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


GRACEFUL_SERVER = """
import http.server, signal, sys, time
terms = []
def on_term(*_):
    terms.append(1)
    print(f"SIGTERM {len(terms)}", flush=True)
    if len(terms) == 1:
        time.sleep(1.0)  # a graceful shutdown: the engines stop
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


def test_servers_asked_to_stop_together_shut_down_in_the_time_of_one_each_with_one_sigterm(tmp_path):
    import time

    servers = []
    for i in range(2):
        port = free_port()
        servers.append(ServerProcess([sys.executable, "-u", "-c", GRACEFUL_SERVER, str(port)], port=port,
                                     log_path=tmp_path / f"s{i}.log", startup_timeout_s=30))
    t0 = time.monotonic()
    for s in servers:
        s.request_stop()
        s.request_stop()  # once only: a second SIGTERM would cut uvicorn's graceful shutdown short
    for s in servers:
        s.close()
    took = time.monotonic() - t0
    assert [s.proc.returncode for s in servers] == [0, 0]
    assert all((tmp_path / f"s{i}.log").read_text().count("SIGTERM") == 1 for i in range(2))
    assert took < 1.9, took  # together: ~1 s, not 2
