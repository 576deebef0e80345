"""The chat endpoint keeps OpenAI's contract, checked with the clients avatar backends use: openai-python (sync,
async, streamed, raw headers) and langchain-openai's ``ChatOpenAI`` (invoke, stream), over real loopback HTTP
against the server with a fault-injection engine that writes a long reply."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from livethink.serve.protocol import FALLBACK_FINGERPRINT, OPENAI_UNSUPPORTED, SYSTEM_FINGERPRINT
from tests.support.serve import (
    LIVE_BODY,
    ServerThread,
    SlowEngine,
    load_tokenizer,
    make_config,
    serve_engine,
    tiny_student_dir,
)

pytestmark = [pytest.mark.timing, pytest.mark.timeout(120)]
LONG_REPLY = " ".join(f"word{i}" for i in range(120))  # longer than the reply reserve (48 in the tiny config)
MSG = [{"role": "user", "content": "Tell me everything about the hoodie."}]
HTTP = httpx.Client(timeout=10)


@pytest.fixture(scope="module")
def served():
    tokenizer = load_tokenizer(tiny_student_dir())
    engine = SlowEngine(tokenizer, token_s=0.001, think_words=5, reply=LONG_REPLY)
    server = serve_engine(engine)
    yield server, engine
    server.close()


def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=10)


def test_max_tokens_is_honoured_beyond_the_reply_reserve(served):
    server, engine = served
    reserve = make_config(tiny_student_dir()).budget.reply_reserve
    r = client(server).chat.completions.create(model="rft", messages=MSG, max_tokens=400)
    words = r.choices[0].message.content.split()
    assert len(words) == 120 > reserve, (len(words), reserve)
    assert r.choices[0].finish_reason == "stop"
    assert r.system_fingerprint == SYSTEM_FINGERPRINT
    assert r.usage.completion_tokens <= 400


def test_a_small_max_tokens_cuts_the_reply_with_length(served):
    server, _ = served
    r = client(server).chat.completions.create(model="rft", messages=MSG, max_completion_tokens=30)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens <= 30 + 4  # the forced end of thinking is the engine's few extra tokens


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("tools", [{"type": "function", "function": {"name": "price", "parameters": {"type": "object"}}}]),
        ("tool_choice", "auto"),
        ("response_format", {"type": "json_object"}),
        ("logprobs", True),
        ("top_logprobs", 3),
        ("logit_bias", {"50256": -100}),
        ("frequency_penalty", 0.5),
        ("presence_penalty", 1.0),
        ("reasoning_effort", "low"),
        ("store", True),
        ("n", 2),
        ("modalities", ["text", "audio"]),
        ("not_an_openai_field", 1),
    ],
)
def test_an_unsupported_parameter_is_a_400_naming_it(served, name, value):
    server, _ = served
    with pytest.raises(openai.BadRequestError) as info:
        client(server).chat.completions.create(model="rft", messages=MSG, extra_body={name: value})
    err = info.value.body
    assert err["param"] == name and name in err["message"], err


def test_every_openai_parameter_the_server_refuses_is_refused_by_name(served):
    server, _ = served
    for name, neutral in OPENAI_UNSUPPORTED.items():
        bad = {"x": 1} if neutral != ({},) else {"a": 1}
        if neutral and isinstance(neutral[0], bool):
            continue  # parallel_tool_calls: every bool is neutral without tools
        r = HTTP.post(f"{server.url}/v1/chat/completions", json={"model": "rft", "messages": MSG, name: bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == name, (name, r.text)
        for value in neutral:
            ok = HTTP.post(
                f"{server.url}/v1/chat/completions",
                json={"model": "rft", "messages": MSG, name: value, "max_tokens": 8},
            )
            assert ok.status_code == 200, (name, value, ok.text)


def test_neutral_values_and_langchain_defaults_are_accepted(served):
    server, _ = served
    r = client(server).chat.completions.create(
        model="rft", messages=MSG, max_tokens=8, tools=[], logprobs=False, frequency_penalty=0,
        response_format={"type": "text"}, n=1,
    )
    assert r.choices[0].message.content


def test_async_client_and_stream_with_usage(served):
    server, _ = served

    async def go() -> tuple[str, str | None, int]:
        aclient = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=10)
        stream = await aclient.chat.completions.create(
            model="rft", messages=MSG, max_tokens=400, stream=True, stream_options={"include_usage": True}
        )
        text, finish, usage = "", None, 0
        async for chunk in stream:
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
            if chunk.usage is not None:
                usage = chunk.usage.completion_tokens
            assert chunk.system_fingerprint == SYSTEM_FINGERPRINT
        await aclient.close()
        return text, finish, usage

    text, finish, usage = asyncio.run(go())
    assert text == LONG_REPLY and finish == "stop" and usage > 120


def test_the_first_chunk_leaves_with_the_first_engine_output(served):
    """The role chunk is not sent before the engine produced anything: a client's time to first token is the
    engine's (a slow first token is seen as slow)."""
    server, engine = served
    engine.ttft_s = 0.3
    try:
        t0 = time.monotonic()
        with HTTP.stream(
            "POST", f"{server.url}/v1/chat/completions",
            json={"model": "rft", "messages": MSG, "stream": True, "max_tokens": 16},
        ) as r:
            first = next(r.iter_lines())
            elapsed = time.monotonic() - t0
    finally:
        engine.ttft_s = 0.01
    assert first.startswith("data: ") and '"role": "assistant"' in first
    assert elapsed >= 0.29, elapsed


def test_retry_after_ms_is_the_header_openai_python_reads(served):
    server, _ = served
    raw = client(server).chat.completions.with_raw_response.create(model="rft", messages=MSG, max_tokens=8)
    assert raw.headers["content-type"].startswith("application/json")
    # a deadline that cannot be met: 429 with both headers
    r = HTTP.post(f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "deadline_ms": 1})
    assert r.status_code == 429, r.text
    assert int(r.headers["retry-after-ms"]) == r.json()["retry_after_ms"]
    assert int(r.headers["Retry-After"]) >= 1


def test_an_absolute_deadline_is_kept_by_a_retry(served):
    server, engine = served
    now_ms = int(time.time() * 1000)
    passed = HTTP.post(f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "deadline_at": now_ms - 50})
    assert passed.status_code == 400 and passed.json()["error"]["code"] == "deadline_passed"
    header = HTTP.post(
        f"{server.url}/v1/livestream/reply", json=LIVE_BODY, headers={"X-Request-Deadline": str(now_ms + 600)}
    )
    assert header.status_code == 200, header.text
    # the absolute deadline, not the endpoint's 1,000 ms (1 ms for the server's epoch-from-monotonic arrival time
    # against the client's whole-ms clock reading)
    assert header.json()["deadline_ms"] <= 601
    bad = HTTP.post(f"{server.url}/v1/livestream/reply", json=LIVE_BODY, headers={"X-Request-Deadline": "soon"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Request-Deadline"


def test_a_fallback_is_visible_to_a_standard_client(tmp_path):
    """An engine with nothing usable before the deadline: the fallback reply carries the fallback fingerprint."""
    tokenizer = load_tokenizer(tiny_student_dir())
    engine = SlowEngine(tokenizer, token_s=0.05, think_words=1000, ignore_budget=True)
    server = serve_engine(engine)
    try:
        r = client(server).chat.completions.create(model="rft", messages=MSG, extra_body={"deadline_ms": 400})
        assert r.model_extra["livethink"]["fallback"] is True
        assert r.system_fingerprint == FALLBACK_FINGERPRINT
    finally:
        server.close()


def test_langchain_chat_openai_invoke_and_stream(served):
    server, _ = served
    llm = ChatOpenAI(model="rft", base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=10,
                     max_tokens=400)
    msg = llm.invoke("Tell me everything about the hoodie.")
    assert msg.content == LONG_REPLY
    assert msg.response_metadata["system_fingerprint"] == SYSTEM_FINGERPRINT
    assert msg.response_metadata["finish_reason"] == "stop"
    streamed = "".join(chunk.content for chunk in llm.stream("Tell me everything about the hoodie."))
    assert streamed == LONG_REPLY
