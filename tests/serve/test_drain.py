"""Drain on SIGTERM: /health turns 503 ``draining`` at once, new requests get 503 + Retry-After, requests in flight
(streams included) finish, and the process exits 0 with no ERROR line. In a thread (the gate), through the CLI's
``DrainingServer`` (its signal handling), and once with a real ``livethink serve`` process."""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time

import httpx
import pytest
import uvicorn

from livethink.serve.api.drain import Drain
from livethink.serve.cli import DrainingServer
from livethink.server_process import ServerProcess, free_port
from tests.support.serve import (
    LIVE_BODY,
    ROOT,
    SlowEngine,
    load_tokenizer,
    make_config,
    serve_engine,
    tiny_student_dir,
)

pytestmark = [pytest.mark.timing, pytest.mark.timeout(240)]
HTTP = httpx.Client(timeout=10)


def test_drain_state_by_hand():
    d = Drain()
    assert not d.draining and not d.done(30.0, now=0.0)
    assert d.begin("SIGTERM", now=100.0) and not d.begin("again", now=101.0)  # idempotent: the first reason stays
    assert d.reason == "SIGTERM"
    d.in_flight = 2
    assert not d.done(30.0, now=120.0)  # requests in flight, within drain_s
    assert d.done(30.0, now=130.0)  # drain_s passed
    d.in_flight = 0
    assert d.done(30.0, now=100.5)  # nothing in flight
    err = d.error()
    assert err.status == 503 and err.code == "draining" and err.headers["Retry-After"] == "1"
    assert err.body()["status"] == "draining" and err.body()["reason"] == "SIGTERM"


def test_draining_server_signals():
    """The first SIGTERM begins the drain without stopping (and is not re-raised: exit 0); a second stops."""
    drain = Drain()
    server = DrainingServer(uvicorn.Config(app=None), drain, 5.0)
    server.handle_exit(signal.SIGTERM, None)
    assert drain.draining and not server.should_exit and server._captured_signals == []
    server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit and server._captured_signals == []
    ctrl_c = DrainingServer(uvicorn.Config(app=None), Drain(), 5.0)
    ctrl_c.handle_exit(signal.SIGINT, None)  # Ctrl-C: uvicorn's own stop
    assert ctrl_c.should_exit and ctrl_c._captured_signals == [signal.SIGINT]


def test_gate_refuses_new_requests_and_lets_in_flight_ones_finish():
    engine = SlowEngine(load_tokenizer(tiny_student_dir()), think_words=30, token_s=0.02)
    server = serve_engine(engine, 4)
    drain: Drain = server.app.state.drain
    try:
        out: dict[str, httpx.Response] = {}
        t = threading.Thread(target=lambda: out.setdefault("r", HTTP.post(f"{server.url}/v1/livestream/reply",
                                                                            json=LIVE_BODY)))  # fmt: skip
        t.start()
        while not engine.active:
            time.sleep(0.01)
        assert drain.in_flight == 1
        drain.begin("test")
        h = HTTP.get(f"{server.url}/health")
        assert h.status_code == 503 and h.json()["status"] == "draining" and h.json()["error"]["code"] == "draining"
        assert h.headers["Retry-After"] == "1"
        r = HTTP.post(f"{server.url}/v1/livestream/reply", json=LIVE_BODY)
        assert r.status_code == 503 and r.json()["error"]["code"] == "draining"
        assert r.headers["Connection"] == "close" and r.headers["X-Request-Id"]  # the access log still sees it
        assert HTTP.get(f"{server.url}/health/live").status_code == 200  # alive while draining
        assert HTTP.get(f"{server.url}/metrics").status_code == 200  # the last scrape
        t.join(10)
        assert out["r"].status_code == 200 and out["r"].json()["reply"]  # the request in flight finished
        assert out["r"].headers["Connection"] == "close"  # its client's next request opens a new connection
        assert drain.in_flight == 0 and drain.done(30.0)
    finally:
        server.close()


@pytest.mark.slow  # a server process (~20 s): in the engines group, with the machine to itself
def test_sigterm_drains_a_real_server(tmp_path):
    """``livethink serve`` (transformers, the tiny student): SIGTERM during a stream; the stream ends with [DONE],
    /health and new requests get 503 meanwhile, the process exits 0, and its log has no ERROR line."""
    config = make_config(tiny_student_dir(), **{"engine.transformers_threads": 1, "server.drain_s": 20})
    path = tmp_path / "serve.yaml"
    path.write_text(json.dumps(config.model_dump(mode="json")))
    port = free_port()
    srv = ServerProcess([sys.executable, "-m", "livethink.serve.cli", "--config", str(path), "--port", str(port)],
                        port=port, log_path=tmp_path / "server.log", ready_path="/health", cwd=ROOT,
                        startup_timeout_s=180)  # fmt: skip
    try:
        body = {"model": "rft", "stream": True, "max_tokens": 400, "deadline_ms": 20_000,
                "messages": [{"role": "user", "content": "Tell me everything about the hoodie."}]}  # fmt: skip
        events: list[str] = []
        after: dict[str, object] = {}
        with httpx.Client(timeout=30) as client, client.stream("POST", f"{srv.url}/v1/chat/completions",
                                                              json=body) as stream:  # fmt: skip
            assert stream.status_code == 200
            for line in stream.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if len(events) == 2:  # the stream is under way: stop the server
                    t0 = time.monotonic()
                    srv.proc.send_signal(signal.SIGTERM)
                    while "health" not in after and time.monotonic() - t0 < 5:
                        h = HTTP.get(f"{srv.url}/health")  # the stream is still open: the server listens
                        if h.status_code == 503:
                            after["health"], after["health_s"] = h.json(), time.monotonic() - t0
                    after["new"] = HTTP.post(f"{srv.url}/v1/livestream/reply", json=LIVE_BODY)
        assert events[-1] == "[DONE]", events[-3:]
        assert after["health"]["status"] == "draining" and after["health_s"] < 2  # type: ignore[index]
        new = after["new"]
        assert new.status_code == 503 and new.json()["error"]["code"] == "draining"  # type: ignore[attr-defined]
        assert srv.proc.wait(30) == 0
        log = srv.tail(200_000)
        assert "drained" in log and not re.search(r"\bERROR\b", log) and "Traceback" not in log, log[-3000:]
    finally:
        srv.close()
