"""Request ids and the access line, over real loopback HTTP with a fault-injection engine: the client's id comes
back (a malformed one is replaced), and each request writes exactly one access line with its job's labels."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from livethink.serve.api.access import request_id_from
from livethink.serve.telemetry.access_log import JsonFormatter
from tests.support.serve import (
    LIVE_BODY,
    SlowEngine,
    load_tokenizer,
    serve_engine,
    tiny_student_dir,
)

pytestmark = [pytest.mark.timing, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server():
    engine = SlowEngine(load_tokenizer(tiny_student_dir()), token_s=0.001)
    srv = serve_engine(engine)
    yield srv
    srv.close()


def test_request_id_rule():
    assert request_id_from("abc-123_x.y:z") == "abc-123_x.y:z"
    for bad in (None, "", "has space", "new\nline", "x" * 129):
        made = request_id_from(bad)
        assert made != bad and len(made) == 32


def access_lines(caplog) -> list[dict]:
    return [r.access for r in caplog.records if r.name == "livethink.access"]


def test_the_client_id_comes_back_and_one_access_line_per_request(server, caplog):
    caplog.set_level(logging.INFO, logger="livethink.access")
    with httpx.Client(timeout=10) as http:
        ok = http.post(f"{server.url}/v1/livestream/reply", json=LIVE_BODY, headers={"X-Request-Id": "viewer-42-q7"})
        refused = http.post(f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "deadline_ms": 1})
        bad = http.post(f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "colour": "x"},
                        headers={"X-Request-Id": "bad id"})
    assert ok.status_code == 200 and ok.headers["x-request-id"] == "viewer-42-q7"
    assert refused.status_code == 429 and len(refused.headers["x-request-id"]) == 32
    assert bad.status_code == 400 and bad.headers["x-request-id"] != "bad id"
    lines = {line["request_id"]: line for line in access_lines(caplog)}
    assert len(access_lines(caplog)) == 3
    first = lines["viewer-42-q7"]
    # the reply carries the client's id too (the A/B events do: tests/serve/test_http.py); the job's own id stays
    assert first["http_status"] == 200 and ok.json()["request_id"] == "viewer-42-q7"
    assert first["job_id"].startswith("live-")
    assert first["model"] == "rft" and first["endpoint"] == "livestream"
    assert first["fallback"] is False and first["deadline_met"] is True and first["tokens"]["reply"] > 0
    assert lines[refused.headers["x-request-id"]]["http_status"] == 429
    assert "fallback" not in lines[refused.headers["x-request-id"]]  # no reply: no reply labels
    assert lines[bad.headers["x-request-id"]]["http_status"] == 400


def test_json_format_is_one_object_per_line():
    record = logging.LogRecord("livethink.access", logging.INFO, __file__, 1, "access %s", ("{}",), None)
    record.access = {"request_id": "r1", "http_status": 200}
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["request_id"] == "r1" and parsed["level"] == "INFO" and parsed["time"].endswith("Z")
