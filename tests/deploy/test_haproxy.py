"""The HAProxy config ``livethink.replicas`` renders, run by a real HAProxy in front of small stand-in replicas:
the front sets ``X-Request-Deadline`` from the deployment's deadline, 503s are retried elsewhere only while the
deadline leaves time, and a frozen replica holds a request no longer than its deadline: HAProxy answers 503 in time."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from livethink.replicas import DEADLINE_ERRORFILE, MIN_RETRY_MS, front_deadlines, haproxy_config
from livethink.serve.config import load_config
from livethink.server_process import LOOPBACK, free_port
from tests.support.serve import ROOT

pytestmark = pytest.mark.timeout(60)
CONFIG = load_config(ROOT / "configs" / "tiny" / "serve.yaml")
LIVE = "/v1/livestream/reply"


class Replica(BaseHTTPRequestHandler):
    """A stand-in replica: GET /health 200; POST answers by ``mode``: ok (200 with the deadline header it got),
    busy (503, as a draining replica), frozen (never answers in time)."""

    mode = "ok"

    def do_GET(self) -> None:  # noqa: N802
        self._reply(200, {"status": "ok"})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.mode == "busy":
            self._reply(503, {"error": {"code": "draining"}})
        elif self.mode == "frozen":
            time.sleep(5)
            self._reply(200, {})
        else:
            self._reply(200, {"deadline": self.headers.get("X-Request-Deadline")})

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _replica(mode: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((LOOPBACK, 0), type(f"Replica_{mode}", (Replica,), {"mode": mode}))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def front(tmp_path: Path):
    """``front(*modes)``: HAProxy (the rendered config) over one stand-in replica per mode; its URL."""
    assert shutil.which("haproxy"), "haproxy not found: `make haproxy`"
    started: list = []

    def start(*modes: str) -> str:
        replicas = [_replica(m) for m in modes]
        started.extend(replicas)
        port = free_port()
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(haproxy_config(port, [r.server_address[1] for r in replicas], CONFIG))
        proc = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        started.append(proc)
        url = f"http://{LOOPBACK}:{port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "haproxy did not come up"
            time.sleep(0.1)

    yield start
    for s in started:
        if isinstance(s, subprocess.Popen):
            s.terminate()
            s.wait(10)
        else:
            s.shutdown()


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_rendered_config_takes_its_timeouts_from_the_deadlines():
    cfg = haproxy_config(8000, [8001, 8002], CONFIG)
    deadlines = front_deadlines(CONFIG)
    assert deadlines == {"livestream": 1000, "chat": 30000}  # configs/tiny/serve.yaml
    assert "timeout server 30000ms" in cfg and "120s" not in cfg
    assert f"errorfile 504 {DEADLINE_ERRORFILE}" in cfg
    assert "add(1000)" in cfg and "add(30000)" in cfg and f"lt {MIN_RETRY_MS}" in cfg
    check = subprocess.run(["haproxy", "-c", "-q", "-f", "/dev/stdin"], input=cfg, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert "${" not in cfg  # every placeholder filled


def test_front_sets_the_deadline_once(front):
    url = front("ok")
    t = _now_ms()
    got = int(httpx.post(url + LIVE, json={}).json()["deadline"])
    assert t + 1000 - 50 <= got <= _now_ms() + 1000  # now + the livestream deadline
    chat = int(httpx.post(url + "/v1/chat/completions", json={}).json()["deadline"])
    assert chat - _now_ms() > 25_000
    asked = int(httpx.post(url + LIVE, json={"deadline_ms": 3000}).json()["deadline"])
    assert 2900 <= asked - _now_ms() <= 3000  # the body's own deadline_ms, not the endpoint's
    own = str(_now_ms() + 700)
    assert httpx.post(url + LIVE, json={}, headers={"X-Request-Deadline": own}).json()["deadline"] == own


def test_503_is_retried_only_while_the_deadline_leaves_time(front):
    url = front("busy", "ok")
    with httpx.Client(timeout=5) as client:
        roomy = [client.post(url + LIVE, json={}).status_code for _ in range(8)]
        assert roomy == [200] * 8  # a 503 (draining) is sent to the other replica
        late = [client.post(url + LIVE, json={}, headers={"X-Request-Deadline": str(_now_ms() + MIN_RETRY_MS // 2)})
                .status_code for _ in range(8)]  # fmt: skip
    assert 503 in late and 200 in late  # the busy replica's 503 comes back as is: no time left to retry


JITTER_MS = 60  # HAProxy's timer and this process's scheduling on a loaded CI machine


def _post_with_deadline(client: httpx.Client, url: str, left_ms: int) -> tuple[httpx.Response, int, int]:
    """POST a livestream request whose ``X-Request-Deadline`` is ``left_ms`` from now; the response, the deadline
    and the time it arrived (epoch ms)."""
    deadline = _now_ms() + left_ms
    r = client.post(url + LIVE, json={}, headers={"X-Request-Deadline": str(deadline)})
    return r, deadline, _now_ms()


def test_the_503_haproxy_sends_in_place_of_a_504_is_well_formed():
    head, body = DEADLINE_ERRORFILE.read_bytes().split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 503 Service Unavailable"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert int(headers["Content-Length"]) == len(body) and headers["Retry-After"] == "1"
    assert json.loads(body)["error"]["code"] == "deadline_unanswered"


def test_a_frozen_replica_gets_a_503_before_the_deadline(front):
    url = front("frozen")
    with httpx.Client(timeout=10) as client:
        r, deadline, arrived = _post_with_deadline(client, url, 400)
    assert r.status_code == 503, r.text  # not HAProxy's 504: a refusal in livethink's shape, with Retry-After
    assert r.json()["error"]["code"] == "deadline_unanswered" and r.headers["retry-after"] == "1"
    assert arrived <= deadline + JITTER_MS, arrived - deadline


def test_beside_a_frozen_replica_every_request_is_answered_or_refused_in_time(front):
    url = front("frozen", "ok")
    late, got = [], []
    with httpx.Client(timeout=10) as client:
        for _ in range(12):
            r, deadline, arrived = _post_with_deadline(client, url, 300)
            got.append((r.status_code, r.headers.get("x-livethink-replica")))
            late.append(arrived - deadline)
    assert {status for status, _ in got} <= {200, 503}, got
    assert all(replica == "r1" for status, replica in got if status == 200), got  # the frozen r0 never answers
    assert (200, "r1") in got
    assert max(late) <= JITTER_MS, late  # held no longer than the deadline, whichever replica took it
