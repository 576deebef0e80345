"""The HTTP server over real loopback HTTP (uvicorn in a thread) with a fault-injection engine: OpenAI client,
SSE framing, bad input, deadlines, cancellation, admission control (429), auth, metrics."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from livethink.ab_test.serving import SIMULATED_HEADER
from livethink.serve.api.app import create_app
from tests.support.serve import (
    LIVE_BODY,
    ServerThread,
    SlowEngine,
    engine_set,
    load_tokenizer,
    make_config,
    tiny_student_dir,
)

pytestmark = [pytest.mark.timing, pytest.mark.timeout(120)]
# One client for the module: a fresh httpx call builds an SSL context each time (~0.1 s on a busy machine),
# which would be counted as server latency.
HTTP = httpx.Client(timeout=10)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(tiny_student_dir())


def _serve(tokenizer, engine=None, capacity=4, **overrides):
    engine = engine or SlowEngine(tokenizer)
    config = make_config(tiny_student_dir(), **overrides)
    server = ServerThread(create_app(config, engine_set(engine, capacity)))
    return server, engine


@pytest.fixture(scope="module")
def served(tokenizer):
    server, engine = _serve(tokenizer, SlowEngine(tokenizer, token_s=0.002))
    yield server, engine
    server.close()


def _wait_idle(engine, timeout=3.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not engine.active:
            return True
        time.sleep(0.02)
    return False


# -- the basics -------------------------------------------------------------------------------------------
def test_health_models_version(served):
    server, _ = served
    assert HTTP.get(f"{server.url}/health").json()["status"] == "ok"
    ids = [m["id"] for m in HTTP.get(f"{server.url}/v1/models").json()["data"]]
    assert ids == ["rft", "auto"]
    assert HTTP.get(f"{server.url}/version").json()["version"]


def test_openai_client_non_streaming(served):
    server, _ = served
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=10)
    resp = client.chat.completions.create(model="rft", messages=[{"role": "user", "content": "How much?"}])
    choice = resp.choices[0]
    assert choice.message.content == "The hoodie costs $39. It ships in 2 days."
    assert choice.message.model_extra["reasoning"].startswith("step0")
    assert choice.finish_reason == "stop"
    assert resp.usage.completion_tokens_details.reasoning_tokens == 20
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_openai_client_streaming(served):
    server, _ = served
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=10)
    stream = client.chat.completions.create(
        model="rft",
        messages=[{"role": "user", "content": "How much?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    content, reasoning, finish, usage = "", "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            content += c.delta.content or ""
            reasoning += (c.delta.model_extra or {}).get("reasoning") or ""
            finish = c.finish_reason or finish
    assert content == "The hoodie costs $39. It ships in 2 days."
    assert reasoning.startswith("step0 step1")
    assert finish == "stop" and usage.completion_tokens > 0


def test_sse_framing_ends_with_done(served):
    server, _ = served
    body = {
        "model": "rft",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with HTTP.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=10) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    assert raw.endswith("data: [DONE]\n\n")
    events = raw.split("\n\n")[:-1]
    assert all(e.startswith("data: ") and "\n" not in e for e in events)
    payloads = [json.loads(e[6:]) for e in events[:-1]]
    assert all(p["object"] == "chat.completion.chunk" for p in payloads)
    assert payloads[0]["choices"][0]["delta"]["role"] == "assistant"
    assert payloads[-2]["choices"][0]["finish_reason"] == "stop"
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["total_tokens"] > 0
    assert len({p["id"] for p in payloads}) == 1


def test_livestream_reply_fields(served):
    server, _ = served
    r = HTTP.post(
        f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "include_reasoning": True}, timeout=10
    )
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["reply"] == "The hoodie costs $39. It ships in 2 days."
    assert d["reasoning"].startswith("step0") and d["arm"] is None and d["model"] == "rft"
    assert d["deadline_ms"] == 1000 and d["deadline_met"] and not d["fallback"]
    t = d["timings"]
    assert 0 <= t["queue_ms"] <= t["first_token_ms"] <= t["first_reply_token_ms"] <= t["e2e_ms"] < 1000
    assert d["tokens"]["total"] == d["tokens"]["prompt"] + d["tokens"]["reasoning"] + d["tokens"]["reply"]
    assert d["budget"]["reply_reserve"] >= 8


def test_livestream_prompt_reuses_build_messages(served, tokenizer):
    from livethink.data.prompt import build_messages
    from livethink.data.schema import Reference, Task

    server, engine = served
    HTTP.post(f"{server.url}/v1/livestream/reply", json=LIVE_BODY, timeout=10).raise_for_status()
    task = Task(
        id="x",
        split="test",
        product_docs=tuple(LIVE_BODY["product_docs"]),
        question=LIVE_BODY["question"],
        reference=Reference(kind="not_stated"),
        kind="attribute",
        difficulty=1,
    )
    text = tokenizer.apply_chat_template(build_messages(task), tokenize=False, add_generation_prompt=True)
    assert engine.requests[-1].prompt_token_ids == tokenizer.encode(
        text + "<think>\n", add_special_tokens=False
    )


# -- bad input --------------------------------------------------------------------------------------------
CHAT = "/v1/chat/completions"
LIVE = "/v1/livestream/reply"
MSG = [{"role": "user", "content": "hi"}]
LONG_DOC = [{"product_id": "p1", "title": "Hoodie", "text": "Price: $39. " * 400}]

BAD_INPUT = [
    # (path, body (str = raw), status, param, code)
    (CHAT, "{not json", 400, None, "invalid_json"),
    (CHAT, "", 400, None, "empty_body"),
    (CHAT, "[1, 2]", 400, None, "invalid_type"),
    (CHAT, {"model": "rft"}, 400, "messages", "missing"),
    (CHAT, {"model": "rft", "messages": "hi"}, 400, "messages", None),
    (CHAT, {"model": "rft", "messages": []}, 400, "messages", "too_short"),
    (CHAT, {"model": "rft", "messages": [{"content": "hi"}]}, 400, "messages.0.role", "missing"),
    (CHAT, {"model": "rft", "messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role", None),
    (CHAT, {"model": "rft", "messages": [{"role": "user"}]}, 400, "messages.0.content", "missing"),
    (CHAT, {"model": "rft", "messages": [*MSG, {"role": "assistant", "content": None}]}, 400, "messages.1.content", None),
    (CHAT, '"hi"', 400, None, "invalid_type"),
    (CHAT, b"\xff\xfe{", 400, None, "invalid_json"),
    (CHAT, {"model": "rft", "messages": MSG, "max_tokens": "10"}, 400, "max_tokens", "int_type"),
    (CHAT, {"model": "rft", "messages": MSG, "max_tokens": 0}, 400, "max_tokens", None),
    (CHAT, {"model": "rft", "messages": MSG, "temperature": 5}, 400, "temperature", None),
    (CHAT, {"model": "rft", "messages": MSG, "n": 2}, 400, "n", None),
    (CHAT, {"model": "rft", "messages": MSG, "stream": "yes"}, 400, "stream", None),
    (CHAT, {"model": "rft", "messages": MSG, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop", None),
    (CHAT, {"model": "gpt-9", "messages": MSG}, 404, "model", "model_not_found"),
    (CHAT, {"model": "rft", "messages": MSG, "deadline_ms": 0}, 400, "deadline_ms", None),
    (CHAT, {"model": "rft", "messages": MSG, "deadline_ms": 10_000_000}, 400, "deadline_ms", None),
    (
        CHAT,
        {"model": "rft", "messages": [{"role": "user", "content": "   "}]},
        400,
        "messages",
        "empty_prompt",
    ),
    (
        CHAT,
        {"model": "rft", "messages": [{"role": "user", "content": "Price: $39. " * 400}]},
        400,
        "messages",
        "context_length_exceeded",
    ),
    (CHAT, {"model": "rft", "messages": MSG, "arm": "treatment"}, 404, "arm", "arm_not_found"),
    (LIVE, {**LIVE_BODY, "viewer_id": None}, 400, "viewer_id", None),
    ({"path": LIVE, "drop": "viewer_id"}, None, 400, "viewer_id", "missing"),
    (LIVE, {**LIVE_BODY, "question": ""}, 400, "question", None),
    (LIVE, {**LIVE_BODY, "question": "   "}, 400, "question", None),
    (LIVE, {**LIVE_BODY, "product_docs": []}, 400, "product_docs", None),
    (
        LIVE,
        {**LIVE_BODY, "product_docs": [{"product_id": "p", "title": "t"}]},
        400,
        "product_docs.0.text",
        "missing",
    ),
    (LIVE, {**LIVE_BODY, "history": [{"role": "bot", "content": "x"}]}, 400, "history.0.role", None),
    (LIVE, {**LIVE_BODY, "deadline_ms": -5}, 400, "deadline_ms", None),
    (LIVE, {**LIVE_BODY, "deadline_ms": "fast"}, 400, "deadline_ms", None),
    (LIVE, {**LIVE_BODY, "colour": "blue"}, 400, "colour", "extra_forbidden"),
    (LIVE, {**LIVE_BODY, "product_docs": LONG_DOC}, 400, "product_docs", "context_length_exceeded"),
    (LIVE, {**LIVE_BODY, "model": "nope"}, 404, "model", "model_not_found"),
    (LIVE, {**LIVE_BODY, "arm": "b"}, 404, "arm", "arm_not_found"),
]


@pytest.mark.parametrize(("path", "body", "status", "param", "code"), BAD_INPUT)
def test_bad_input_is_a_4xx_naming_the_field(served, path, body, status, param, code):
    server, _ = served
    if isinstance(path, dict):
        body = {k: v for k, v in LIVE_BODY.items() if k != path["drop"]}
        path = path["path"]
    kwargs = {"content": body} if isinstance(body, str | bytes) else {"json": body}
    r = HTTP.post(f"{server.url}{path}", headers={"content-type": "application/json"}, timeout=10, **kwargs)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param
    if code is not None:
        assert err["code"] == code
    if param is not None:
        assert param.split(".")[0] in err["message"]
    assert "Traceback" not in r.text


def test_a_json_body_is_read_whatever_its_content_type(served):
    server, _ = served
    body = json.dumps({"model": "rft", "messages": MSG})
    for content_type in ("application/x-www-form-urlencoded", "text/plain", None):  # curl -d sends the first
        headers = {"content-type": content_type} if content_type else {}
        r = HTTP.post(f"{server.url}{CHAT}", content=body, headers=headers)
        assert r.status_code == 200, (content_type, r.text)


def test_unknown_route_and_method_are_json(served):
    server, _ = served
    r = HTTP.get(f"{server.url}/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = HTTP.get(f"{server.url}/v1/chat/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_engine_failure_is_a_clean_500(tokenizer):
    server, _ = _serve(tokenizer, SlowEngine(tokenizer, fail_after=3))
    try:
        r = HTTP.post(f"{server.url}/v1/livestream/reply", json=LIVE_BODY, timeout=10)
        assert r.status_code == 500
        assert r.json()["error"] == {
            "message": "internal server error",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        body = {"model": "rft", "messages": MSG, "stream": True}
        raw = HTTP.post(f"{server.url}{CHAT}", json=body, timeout=10).text
        assert '"type": "server_error"' in raw and raw.endswith("data: [DONE]\n\n") and "Traceback" not in raw
    finally:
        server.close()


# -- deadlines and cancellation ---------------------------------------------------------------------------
def test_hard_deadline_cuts_a_runaway_engine_and_flags_the_fallback(tokenizer):
    engine = SlowEngine(tokenizer, token_s=0.05, think_words=10_000, ignore_budget=True)
    server, _ = _serve(tokenizer, engine)
    try:
        t0 = time.monotonic()
        r = HTTP.post(f"{server.url}{LIVE}", json={**LIVE_BODY, "deadline_ms": 400}, timeout=10)
        elapsed = (time.monotonic() - t0) * 1000
        d = r.json()
        assert r.status_code == 200 and elapsed <= 500
        assert d["fallback"] and d["cut_at_deadline"] and d["deadline_met"]
        assert d["reply"] == "Good question! Let me check that and get right back to you."
        assert d["timings"]["e2e_ms"] <= 400
        assert _wait_idle(engine) and engine.cancelled  # the engine request was stopped
    finally:
        server.close()


def test_deadline_keeps_the_complete_sentences_of_a_cut_reply(tokenizer):
    reply = "It costs $39. " + " ".join(["and"] * 200)
    engine = SlowEngine(tokenizer, token_s=0.02, think_words=2, reply=reply, ignore_budget=True)
    server, _ = _serve(tokenizer, engine)
    try:
        d = HTTP.post(f"{server.url}{LIVE}", json={**LIVE_BODY, "deadline_ms": 500}, timeout=10).json()
        assert d["reply"] == "It costs $39." and not d["fallback"] and d["cut_at_deadline"]
        body = {"model": "rft", "messages": MSG, "deadline_ms": 500}
        t0 = time.monotonic()
        c = HTTP.post(f"{server.url}{CHAT}", json=body, timeout=10).json()
        assert time.monotonic() - t0 < 0.6
        assert c["choices"][0]["message"]["content"] == "It costs $39." and c["livethink"]["cut_at_deadline"]
    finally:
        server.close()


def test_budget_forcing_under_a_tight_deadline(tokenizer):
    """A well-behaved engine gets a thinking cap and deadline that leave room for the reply."""
    engine = SlowEngine(tokenizer, token_s=0.01, think_words=10_000)
    server, _ = _serve(tokenizer, engine, **{"budget.cold_factor": 1.0})  # the priors as they are
    try:
        d = HTTP.post(
            f"{server.url}{LIVE}",
            json={**LIVE_BODY, "deadline_ms": 800, "include_reasoning": True},
            timeout=10,
        ).json()
        assert d["forced_end_of_thinking"] and not d["fallback"] and d["deadline_met"]
        assert d["reply"] == "The hoodie costs $39. It ships in 2 days."
        budget = engine.budgets[-1]
        assert budget.thinking_cap == d["budget"]["thinking_cap"] and budget.thinking_deadline is not None
    finally:
        server.close()


def test_client_disconnect_aborts_the_stream(tokenizer):
    engine = SlowEngine(tokenizer, token_s=0.02, think_words=10_000, ignore_budget=True)
    server, _ = _serve(tokenizer, engine)
    try:
        body = {"model": "rft", "messages": MSG, "stream": True, "deadline_ms": 20_000}
        with HTTP.stream("POST", f"{server.url}{CHAT}", json=body, timeout=10) as r:
            lines = r.iter_lines()
            got = [next(lines) for _ in range(6)]
        assert any("reasoning" in line for line in got)
        assert _wait_idle(engine), "the engine still runs the abandoned request"
        assert engine.cancelled and engine.aborted == engine.cancelled
        metrics = HTTP.get(f"{server.url}/metrics").text
        assert 'livethink_engine_aborts_total{model="rft",reason="disconnect"} 1.0' in metrics
    finally:
        server.close()


def test_client_disconnect_aborts_a_non_streaming_request(tokenizer):
    engine = SlowEngine(tokenizer, token_s=0.02, think_words=10_000, ignore_budget=True)
    server, _ = _serve(tokenizer, engine)
    try:
        body = {"model": "rft", "messages": MSG, "deadline_ms": 20_000}
        with pytest.raises(httpx.ReadTimeout):
            HTTP.post(f"{server.url}{CHAT}", json=body, timeout=0.3)
        assert _wait_idle(engine), "the engine still runs the abandoned request"
        assert engine.cancelled
    finally:
        server.close()


def test_overload_sheds_with_429_and_accepted_requests_keep_the_deadline(tokenizer):
    engine = SlowEngine(tokenizer, ttft_s=0.02, token_s=0.01, think_words=30)
    server, _ = _serve(tokenizer, engine, capacity=1)
    try:
        HTTP.post(f"{server.url}{LIVE}", json=LIVE_BODY, timeout=10).raise_for_status()  # learn the pace

        async def burst():
            async with httpx.AsyncClient(timeout=5) as client:

                async def one(i):
                    t0 = time.monotonic()
                    r = await client.post(f"{server.url}{LIVE}", json={**LIVE_BODY, "viewer_id": f"v{i}"})
                    return r, (time.monotonic() - t0) * 1000

                return await asyncio.gather(*(one(i) for i in range(12)))

        results = asyncio.run(burst())
        rejected = [r for r, _ in results if r.status_code == 429]
        accepted = [(r, ms) for r, ms in results if r.status_code == 200]
        assert len(rejected) + len(accepted) == 12
        assert rejected and accepted
        for r in rejected:
            assert int(r.headers["Retry-After"]) >= 1
            assert (
                r.json()["error"]["type"] == "rate_limit_error"
                and r.json()["error"]["param"] == "deadline_ms"
            )
        assert max(ms for _, ms in accepted) <= 1000 + 100
        assert all(r.json()["deadline_met"] for r, _ in accepted)
        metrics = HTTP.get(f"{server.url}/metrics").text
        assert (
            'livethink_rejections_total{arm="none",endpoint="livestream",model="rft",reason="deadline_unreachable"}'
            in metrics
        )
    finally:
        server.close()


# -- metrics, auth, A/B -----------------------------------------------------------------------------------
def test_metrics_are_labelled_by_arm_and_model(served):
    server, _ = served
    HTTP.post(f"{server.url}{LIVE}", json=LIVE_BODY, timeout=10).raise_for_status()
    text = HTTP.get(f"{server.url}/metrics").text
    for needle in (
        'livethink_requests_total{arm="none",endpoint="livestream",model="rft",status="ok"}',
        'livethink_time_to_first_token_seconds_bucket{arm="none",endpoint="livestream",le="0.1",model="rft"}',
        'livethink_e2e_seconds_count{arm="none",endpoint="livestream",model="rft"}',
        'livethink_tokens_total{arm="none",endpoint="livestream",kind="reasoning",model="rft"}',
        'livethink_deadline_hit_rate{arm="none",model="rft"} 1.0',
        'livethink_deadline_met_total{arm="none",endpoint="livestream",model="rft"}',
    ):
        assert needle in text, needle


def test_bearer_auth(tokenizer):
    server, _ = _serve(tokenizer, **{"auth.api_keys": ["k1"], "auth.admin_keys": ["adm"]})
    try:
        url = server.url
        assert HTTP.get(f"{url}/health").status_code == 200  # public
        r = HTTP.get(f"{url}/v1/models")
        assert r.status_code == 401 and r.json()["error"]["param"] == "Authorization"
        assert r.headers["WWW-Authenticate"] == "Bearer"
        assert HTTP.get(f"{url}/v1/models", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert HTTP.get(f"{url}/v1/models", headers={"Authorization": "Bearer k1"}).status_code == 200
        assert HTTP.get(f"{url}/v1/admin/status", headers={"Authorization": "Bearer k1"}).status_code == 403
        assert HTTP.get(f"{url}/v1/admin/status", headers={"Authorization": "Bearer adm"}).status_code == 200
        assert HTTP.get(f"{url}/metrics").status_code == 401
        for body in ("{not json", "x" * 300_000):  # the key is checked before the body is read
            assert HTTP.post(f"{url}/v1/chat/completions", content=body).status_code == 401
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k1", max_retries=0, timeout=10)
        assert client.chat.completions.create(model="rft", messages=MSG).choices[0].message.content
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="bad", max_retries=0).models.list()
    finally:
        server.close()


EXPERIMENT = """
name: budget_ab
arms:
  - {name: think, weight: 0.5, variant: rft, budget: {thinking_budget: 64}}
  - {name: nothink, weight: 0.5, variant: rft, budget: {thinking_budget: 0, deadline_ms: 800}}
min_viewers_per_arm: 2
"""


def test_ab_hooks_choose_the_budget_and_log_events(tokenizer, tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    server, engine = _serve(tokenizer, **{"experiment": {"file": str(exp), "store": str(tmp_path / "ab.db")}})
    try:
        url = server.url
        seen: dict[str, str] = {}
        engine_answered = 0
        for i in range(12):
            body = {**LIVE_BODY, "viewer_id": f"viewer-{i}"}
            d = HTTP.post(f"{url}{LIVE}", json=body, headers={SIMULATED_HEADER: "1"}, timeout=10).json()
            assert d["experiment"] == "budget_ab" and d["arm"] in ("think", "nothink")
            seen[body["viewer_id"]] = d["arm"]
            assert d["deadline_ms"] == (800 if d["arm"] == "nothink" else 1000)
            if d.get("fallback_reason"):  # a loaded machine may answer with the fallback, without the engine
                continue
            engine_answered += 1
            req = engine.requests[-1]
            assert req.thinking == (d["arm"] == "think")
            if d["arm"] == "think":
                assert engine.budgets[-1].thinking_cap <= 64
        assert set(seen.values()) == {"think", "nothink"}
        assert engine_answered >= 6
        again = HTTP.post(f"{url}{LIVE}", json={**LIVE_BODY, "viewer_id": "viewer-3"}, timeout=10,
                          headers={"X-Request-Id": "trace-viewer-3"}).json()  # fmt: skip
        assert again["arm"] == seen["viewer-3"]  # sticky
        assert again["request_id"] == "trace-viewer-3"  # the client's id: on the reply and on its A/B events
        forced = HTTP.post(f"{url}{LIVE}", json={**LIVE_BODY, "arm": "nothink"}, timeout=10).json()
        assert forced["arm"] == "nothink"
        # outcomes
        ok = HTTP.post(
            f"{url}/v1/ab/outcomes",
            json={"event_id": "o-1", "viewer_id": "viewer-1", "experiment": "budget_ab", "type": "click"},
        )
        assert ok.status_code == 200 and ok.json()["status"] == "stored"
        unknown = HTTP.post(
            f"{url}/v1/ab/outcomes",
            json={"event_id": "o-2", "viewer_id": "v", "experiment": "nope", "type": "click"},
        )
        assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "experiment"
        bad = HTTP.post(
            f"{url}/v1/ab/outcomes",
            json={"event_id": "o-3", "viewer_id": "v", "experiment": "budget_ab", "type": "purchase"},
        )
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "type"
        summary = HTTP.get(f"{url}/v1/ab/experiments/budget_ab", timeout=20)
        assert summary.status_code == 200, summary.text
        assert set(summary.json()["arms"]) == {"think", "nothink"}
        # ?view=full: the whole analysis (what the demo's Experiment tab draws its tables and plot from)
        full = HTTP.get(f"{url}/v1/ab/experiments/budget_ab", params={"view": "full"}, timeout=20)
        assert full.status_code == 200, full.text
        assert {"comparisons", "timeseries", "guardrails"} <= set(full.json()) and "tests" not in full.json()
        assert set(full.json()["arms"]) == {"think", "nothink"}
        bad_view = HTTP.get(f"{url}/v1/ab/experiments/budget_ab", params={"view": "everything"})
        assert bad_view.status_code == 400 and bad_view.json()["error"]["param"] == "view", bad_view.text
        assert HTTP.get(f"{url}/v1/ab/experiments/nope").status_code == 404
        text = HTTP.get(f"{url}/metrics").text
        assert 'arm="nothink"' in text and 'arm="think"' in text
        # the A/B package's own HTTP traffic simulator talks to this server unchanged
        from livethink.ab_test.simulate import simulate_http

        stats = asyncio.run(simulate_http(url, "budget_ab", requests=16, concurrency=4, seed=1))
        assert stats["replies_ok"] == 16 and stats["malformed"] == 0 and stats["errors"] == 0, stats
        assert stats["outcome_errors"] == 0 and set(stats["arms"]) == {"think", "nothink"}
    finally:
        server.close()
    from livethink.ab_test.store import EventStore

    with EventStore(tmp_path / "ab.db", create=False) as store:
        for kind in ("exposure", "response"):
            ids = {rid for (rid,) in store.fetch("budget_ab", kind, ["request_id"])}
            assert "trace-viewer-3" in ids, kind
