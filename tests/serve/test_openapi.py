"""The server's OpenAPI document: committed = generated, valid OpenAPI 3.1, every route's body and statuses
documented, and what a real server (uvicorn on loopback, fault-injection engine) answers matches it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate

from livethink.serve.api.app import create_app
from livethink.serve.api.openapi import document, main, render
from tests.support.serve import (
    LIVE_BODY,
    ServerThread,
    SlowEngine,
    engine_set,
    load_tokenizer,
    make_config,
    tiny_student_dir,
)

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs/openapi.json"
CHAT_BODY = {"model": "rft", "messages": [{"role": "user", "content": "How much?"}]}
# The error statuses each route can answer (401 and 500: every route; 403: admin routes).
STATUSES = {
    ("get", "/health"): {401, 500, 503},
    ("get", "/health/live"): {401, 500},
    ("get", "/version"): {401, 500},
    ("get", "/v1/models"): {401, 500},
    ("get", "/metrics"): {401, 500},
    ("post", "/v1/livestream/reply"): {400, 401, 403, 404, 413, 429, 500, 503},
    ("post", "/v1/chat/completions"): {400, 401, 403, 404, 413, 429, 500, 503},
    ("post", "/v1/ab/outcomes"): {400, 401, 403, 404, 409, 413, 429, 500, 503},
    ("get", "/v1/ab/experiments/{name}"): {400, 401, 403, 404, 500},
    ("get", "/v1/admin/status"): {401, 403, 500},
}
ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}


@pytest.fixture(scope="module")
def doc():
    return document()


def _schema(doc, path, method, status, media="application/json"):
    return doc["paths"][path][method]["responses"][str(status)]["content"][media]["schema"]


def _check(doc, schema, instance) -> None:
    """Validate ``instance`` against a schema of the document (its ``$ref``s resolve in ``components``)."""
    OAS31Validator({**schema, "components": doc["components"]}).validate(instance)


def test_committed_document_is_the_generated_one(doc):
    assert COMMITTED.read_text() == render(doc), "run: python -m livethink.serve.api.openapi --out docs/openapi.json"
    assert main(["--out", str(COMMITTED), "--check"]) == 0


def test_serve_openapi_flag_writes_the_document(tmp_path):
    out = tmp_path / "openapi.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "livethink.cli", "serve", "--openapi", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert out.read_text() == COMMITTED.read_text()


def test_check_flag_fails_on_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n")
    assert main(["--out", str(stale), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["--out", str(stale)]) == 0 and main(["--out", str(stale), "--check"]) == 0


def test_document_is_valid_openapi_3(doc):
    assert doc["openapi"].startswith("3.")
    validate(doc)  # openapi-spec-validator: raises on any violation of the OpenAPI 3.1 schema


def test_every_route_documents_its_body_and_responses(doc):
    app = create_app(make_config("unused"))
    routes = {
        (m.lower(), r.path) for r in app.routes if getattr(r, "include_in_schema", False) for m in r.methods
    }
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert routes == documented == set(STATUSES)
    schemas = doc["components"]["schemas"]
    for (method, path), errors in STATUSES.items():
        op = doc["paths"][path][method]
        statuses = {int(s) for s in op["responses"]}
        assert statuses == {200} | errors, (method, path)
        assert "422" not in op["responses"]  # validation errors are 400s on this server
        for status in errors:
            response = op["responses"][str(status)]
            assert response["content"]["application/json"]["schema"] == ERROR_REF, (path, status)
            if status in (429, 503):
                assert "Retry-After" in response["headers"], (path, status)
        success = op["responses"]["200"]["content"]
        if path == "/metrics":
            assert list(success) == ["text/plain"]
        else:
            assert success["application/json"]["schema"]["$ref"].split("/")[-1] in schemas
        if method == "post":
            ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            assert op["requestBody"]["required"] and ref.split("/")[-1] in schemas, path
        else:
            assert "requestBody" not in op
    chat = doc["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert "text/event-stream" in chat and "ChatCompletionChunk" in schemas
    assert "HTTPValidationError" not in schemas


def test_request_schemas_match_the_models(doc):
    body = doc["paths"]["/v1/livestream/reply"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    _check(doc, body, LIVE_BODY)
    with pytest.raises(Exception, match="colour"):
        _check(doc, body, {**LIVE_BODY, "colour": "blue"})  # the livestream request rejects unknown fields
    chat = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    _check(doc, chat, {**CHAT_BODY, "stream": True, "stream_options": {"include_usage": True}, "deadline_ms": 900})
    with pytest.raises(Exception, match="messages"):
        _check(doc, chat, {"model": "rft"})
    outcome = doc["paths"]["/v1/ab/outcomes"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    _check(doc, outcome, {"event_id": "e1", "viewer_id": "v1", "experiment": "live1", "type": "order", "gmv": 9.5})


@pytest.fixture(scope="module")
def served():
    tokenizer = load_tokenizer(tiny_student_dir())
    config = make_config(tiny_student_dir(), **{"server.max_body_kb": 64})
    server = ServerThread(create_app(config, engine_set(SlowEngine(tokenizer, token_s=0.002))))
    yield server
    server.close()


def test_real_answers_match_the_document(doc, served):
    url = served.url
    with httpx.Client(base_url=url, timeout=20) as http:
        assert http.get("/openapi.json").json() == doc  # what the running server serves (and /docs shows)
        assert http.get("/docs").status_code == 200
        for path in ("/health", "/version", "/v1/models", "/v1/admin/status"):
            r = http.get(path)
            assert r.status_code == 200, r.text
            _check(doc, _schema(doc, path, "get", 200), r.json())
        r = http.post("/v1/livestream/reply", json=LIVE_BODY)
        assert r.status_code == 200, r.text
        _check(doc, _schema(doc, "/v1/livestream/reply", "post", 200), r.json())
        r = http.post("/v1/chat/completions", json=CHAT_BODY)
        assert r.status_code == 200, r.text
        _check(doc, _schema(doc, "/v1/chat/completions", "post", 200), r.json())
        r = http.post("/v1/chat/completions", json={**CHAT_BODY, "stream": True, "stream_options": {"include_usage": True}})
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [e.removeprefix("data: ") for e in r.text.split("\n\n") if e]
        assert events[-1] == "[DONE]"
        chunk = {"$ref": "#/components/schemas/ChatCompletionChunk"}
        for event in events[:-1]:
            _check(doc, chunk, json.loads(event))
        r = http.get("/metrics")
        media = r.headers["content-type"].split(";")[0]
        assert media in _schema_media(doc, "/metrics") and "# TYPE" in r.text
        errors = [
            (http.post("/v1/livestream/reply", json={**LIVE_BODY, "question": ""}), 400),
            (http.post("/v1/chat/completions", json={**CHAT_BODY, "model": "nope"}), 404),
            (http.post("/v1/ab/outcomes", json={"event_id": "e1"}), 404),  # no experiment on this server
            (http.get("/v1/ab/experiments/nope"), 404),
        ]
        for r, status in errors:
            assert r.status_code == status, r.text
            _check(doc, ERROR_REF, r.json())


def _schema_media(doc, path):
    return set(doc["paths"][path]["get"]["responses"]["200"]["content"])


def test_a_body_over_the_limit_is_a_413(doc, served):
    big = {**LIVE_BODY, "question": "x" * 70_000}  # over server.max_body_kb = 64
    with httpx.Client(base_url=served.url, timeout=20) as http:
        declared = http.post("/v1/livestream/reply", json=big)
        chunked = http.post(  # no Content-Length: the limit holds while the body is read
            "/v1/chat/completions", content=iter([b'{"model": "rft", "x": "', b"y" * 70_000, b'"}'])
        )
        small = http.post("/v1/livestream/reply", json={**LIVE_BODY, "question": "x" * 5000})
    for r in (declared, chunked):
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == "body_too_large" and "server.max_body_kb" in r.json()["error"]["message"]
        _check(doc, ERROR_REF, r.json())
    assert small.status_code == 400 and small.json()["error"]["param"] == "question"  # read whole, then validated


def test_a_generated_client_talks_to_the_server(served, tmp_path, monkeypatch):
    """openapi-python-client builds a typed client from docs/openapi.json; it answers, streams and reads errors."""
    config = tmp_path / "generator.yaml"
    config.write_text("post_hooks: []\n")  # no formatter run on the generated code
    out = tmp_path / "livethink_client"
    gen = subprocess.run(
        [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(COMMITTED), "--meta", "none",
         "--output-path", str(out), "--config", str(config)],  # fmt: skip
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert gen.returncode == 0 and "Warning" not in gen.stdout + gen.stderr, gen.stdout + gen.stderr
    monkeypatch.syspath_prepend(str(tmp_path))
    from livethink_client import Client
    from livethink_client.api.livestream import livestream_reply
    from livethink_client.api.openai import chat_completions
    from livethink_client.api.server import health
    from livethink_client.models import (
        ChatCompletion,
        ChatCompletionRequest,
        ErrorResponse,
        LivestreamReplyRequest,
        LivestreamReplyResponse,
    )

    client = Client(base_url=served.url, timeout=httpx.Timeout(20), raise_on_unexpected_status=True)
    assert health.sync(client=client).status.value == "ok"
    reply = livestream_reply.sync(client=client, body=LivestreamReplyRequest.from_dict(LIVE_BODY))
    assert isinstance(reply, LivestreamReplyResponse) and reply.reply and reply.timings.e2e_ms > 0
    chat = chat_completions.sync(client=client, body=ChatCompletionRequest.from_dict(CHAT_BODY))
    assert isinstance(chat, ChatCompletion) and chat.choices[0].message.content
    missing = chat_completions.sync_detailed(client=client, body=ChatCompletionRequest.from_dict({**CHAT_BODY, "model": "nope"}))
    assert missing.status_code == 404 and isinstance(missing.parsed, ErrorResponse)
    assert missing.parsed.error.param == "model" and missing.parsed.error.code == "model_not_found"


EXPERIMENT = """
name: live1
arms:
  - {name: a, weight: 0.5, variant: rft}
  - {name: b, weight: 0.5, variant: rft, budget: {thinking_budget: 0}}
min_viewers_per_arm: 2
"""


def test_auth_overload_and_ab_answers_match_the_document(doc, tmp_path):
    tokenizer = load_tokenizer(tiny_student_dir())
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    overrides = {"auth.api_keys": ["k1"], "auth.admin_keys": ["adm"], "auth.ab_keys": ["abk"],
                 "experiment": {"file": str(exp), "store": str(tmp_path / "ab.db")}}  # fmt: skip
    config = make_config(tiny_student_dir(), **overrides)
    server = ServerThread(create_app(config, engine_set(SlowEngine(tokenizer, token_s=0.002))))
    user, admin, ab = {"Authorization": "Bearer k1"}, {"Authorization": "Bearer adm"}, {"Authorization": "Bearer abk"}
    outcome = {"event_id": "o-1", "viewer_id": "viewer-1", "experiment": "live1", "type": "order", "gmv": 9.5}
    try:
        with httpx.Client(base_url=server.url, timeout=20) as http:
            assert http.post("/v1/livestream/reply", json=LIVE_BODY, headers=user).status_code == 200
            answers = [
                ("post", "/v1/ab/outcomes", http.post("/v1/ab/outcomes", json=outcome, headers=ab), 200),
                ("post", "/v1/ab/outcomes",
                 http.post("/v1/ab/outcomes", json={**outcome, "gmv": 1.0}, headers=ab), 409),
                ("post", "/v1/ab/outcomes", http.post("/v1/ab/outcomes", json=outcome, headers=user), 403),
                ("post", "/v1/ab/outcomes", http.post("/v1/ab/outcomes", json=outcome), 401),
                ("get", "/v1/ab/experiments/{name}", http.get("/v1/ab/experiments/live1", headers=admin), 200),
                ("get", "/v1/ab/experiments/{name}", http.get("/v1/ab/experiments/live1", headers=user), 403),
                ("post", "/v1/livestream/reply",
                 http.post("/v1/livestream/reply", json={**LIVE_BODY, "deadline_ms": 1}, headers=user), 429),
                ("get", "/health", http.get("/health"), 200),  # public
            ]  # fmt: skip
    finally:
        server.close()
    for method, path, r, status in answers:
        assert r.status_code == status, (path, r.text)
        _check(doc, _schema(doc, path, method, status), r.json())
        for header in doc["paths"][path][method]["responses"][str(status)].get("headers", {}):
            assert header in r.headers, (path, status, header)
