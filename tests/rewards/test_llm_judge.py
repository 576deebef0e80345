"""LLM judge against a real local HTTP server (uvicorn on 127.0.0.1, random free port) returning canned answers.

The candidate reply carries a ``MODE=...`` marker that tells the server how to misbehave: malformed JSON,
HTTP 500/429, a slow response past the client timeout, or a sleep to measure concurrency.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from livethink.data.io import task_to_row
from livethink.rewards import composite_reward, make_judge
from livethink.rewards.llm_judge import (
    VERDICT_SCHEMA,
    JudgeError,
    LLMJudge,
    LLMJudgeConfig,
    judge_messages,
    parse_verdict,
)
from tests.rewards.test_fixtures import PRICE_ONE, think

GOOD = {"correct": True, "helpful": True, "reason": "matches the docs"}


class FakeEndpoint:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.inflight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.auth: list[str | None] = []
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self.chat)

    def total(self) -> int:
        return sum(self.calls.values())

    async def chat(self, request: Request):
        body = await request.json()
        user = body["messages"][-1]["content"]
        mode = re.search(r"MODE=(\w+)", user).group(1)
        self.auth.append(request.headers.get("authorization"))
        self.bodies.append(body)
        with self.lock:
            self.calls[mode] += 1
            n = self.calls[mode]
            self.inflight[mode] += 1
            self.peak[mode] = max(self.peak[mode], self.inflight[mode])
        try:
            return await self.answer(mode, n, body)
        finally:
            with self.lock:
                self.inflight[mode] -= 1

    async def answer(self, mode: str, n: int, body: dict):
        def reply(content: str):
            return {"id": "x", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}

        if mode == "ok":
            return reply(json.dumps(GOOD))
        if mode == "wrong":
            return reply('<think>the price is off</think>\n```json\n{"Correct": "false", "helpful": true, "reason": "bad price"}\n```')
        if mode == "malformed_once":
            return reply("Sure! {correct: maybe") if n == 1 else reply("Verdict: " + json.dumps(GOOD) + " done.")
        if mode == "bad_body_once":
            return PlainTextResponse("<html>gateway</html>") if n == 1 else reply(json.dumps(GOOD))
        if mode == "error500_once":
            return JSONResponse({"error": "boom"}, status_code=500) if n == 1 else reply(json.dumps(GOOD))
        if mode == "ratelimit_once":
            return JSONResponse({"error": "slow down"}, status_code=429, headers={"Retry-After": "0"}) if n == 1 else reply(json.dumps(GOOD))
        if mode == "slow_once":
            if n == 1:
                await asyncio.sleep(1.5)
            return reply(json.dumps(GOOD))
        if mode == "always500":
            return JSONResponse({"error": "down"}, status_code=503)
        if mode == "bad_request":
            return JSONResponse({"error": "bad model"}, status_code=400)
        if mode.startswith("sleepy"):
            await asyncio.sleep(0.25)
            return reply(json.dumps(GOOD))
        raise AssertionError(mode)


@pytest.fixture(scope="module")
def endpoint():
    fake = FakeEndpoint()
    server = uvicorn.Server(uvicorn.Config(fake.app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not server.started:
        assert time.time() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    fake.base_url = f"http://127.0.0.1:{port}/v1"
    yield fake
    server.should_exit = True
    thread.join(timeout=10)


def make(endpoint, tmp_path, **overrides) -> LLMJudge:
    options = dict(base_url=endpoint.base_url, model="judge-model", timeout_s=0.5, max_retries=3,
                   cache_path=str(tmp_path / "cache.sqlite"), api_key="test-key")
    options.update(overrides)
    return LLMJudge(LLMJudgeConfig(**options))


def score(judge: LLMJudge, mode: str, reply: str = "$76.80."):
    return judge.score(PRICE_ONE, think(f"{reply} MODE={mode}"))


def test_ok_verdict(endpoint, tmp_path):
    verdict = score(make(endpoint, tmp_path), "ok")
    assert (verdict.correct, verdict.helpful) == (True, True) and verdict.details["reason"] == "matches the docs"


def test_think_block_fences_string_booleans_and_helpful_implies_correct(endpoint, tmp_path):
    verdict = score(make(endpoint, tmp_path), "wrong")
    assert (verdict.correct, verdict.helpful, verdict.error) == (False, False, None)


@pytest.mark.parametrize("mode", ["malformed_once", "bad_body_once", "error500_once", "ratelimit_once", "slow_once"])
def test_retries_recover(endpoint, tmp_path, mode):
    judge = make(endpoint, tmp_path)
    verdict = score(judge, mode)
    assert verdict.correct and verdict.error is None
    assert judge.stats["retries"] == 1 and endpoint.calls[mode] == 2


def test_gives_up_after_retries(endpoint, tmp_path):
    judge = make(endpoint, tmp_path, max_retries=2)
    verdict = score(judge, "always500")
    assert not verdict.correct and "3 attempts" in verdict.error and "HTTP 503" in verdict.error
    assert endpoint.calls["always500"] == 3
    with pytest.raises(JudgeError):
        score(make(endpoint, tmp_path, max_retries=0, on_error="raise"), "always500")


def test_non_retryable_http_error(endpoint, tmp_path):
    before = endpoint.calls["bad_request"]
    verdict = score(make(endpoint, tmp_path), "bad_request")
    assert endpoint.calls["bad_request"] == before + 1
    assert verdict.error.startswith("no verdict after 1 attempt: http_400: HTTP 400 from http://127.0.0.1:")
    assert verdict.error.endswith("/v1/chat/completions: bad model")


def test_request_body_carries_schema_and_extra_body(endpoint, tmp_path):
    judge = make(endpoint, tmp_path, json_mode="schema", extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert score(judge, "ok", "schema body").correct
    body = endpoint.bodies[-1]
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT_SCHEMA}}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("judge-model", 0.0, 512)


def test_key_comes_from_the_configured_variable_only(endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-this-endpoint")
    monkeypatch.setenv("LIVETHINK_TEST_JUDGE_KEY", "judge-key")
    score(make(endpoint, tmp_path, api_key=None, api_key_env="LIVETHINK_TEST_JUDGE_KEY"), "ok", "key one")
    score(make(endpoint, tmp_path, api_key=None, api_key_env="LIVETHINK_TEST_NO_KEY"), "ok", "key two")
    score(make(endpoint, tmp_path), "ok", "key three")
    assert endpoint.auth[-3:] == ["Bearer judge-key", "Bearer EMPTY", "Bearer test-key"]


def test_unreachable_endpoint(tmp_path):
    judge = LLMJudge(LLMJudgeConfig(base_url="http://127.0.0.1:9/v1", max_retries=1, cache_path=None))
    error = judge.score(PRICE_ONE, think("$76.80.")).error
    assert error.startswith("no verdict after 2 attempts: connection: cannot reach http://127.0.0.1:9/v1/chat/completions")


def test_disk_cache_second_call_makes_no_request(endpoint, tmp_path):
    first = make(endpoint, tmp_path)
    assert score(first, "ok", "cached reply").details["cached"] is False
    first.close()
    before = endpoint.total()
    second = make(endpoint, tmp_path)  # a new process would see the same SQLite file
    verdict = score(second, "ok", "cached reply")
    assert verdict.correct and verdict.details["cached"] is True
    assert endpoint.total() == before and second.stats == {"requests": 0, "cache_hits": 1, "retries": 0, "failures": 0}
    score(make(endpoint, tmp_path, model="other-model"), "ok", "cached reply")  # key includes the model
    assert endpoint.total() == before + 1


def test_empty_reply_needs_no_request(endpoint, tmp_path):
    before = endpoint.total()
    verdict = make(endpoint, tmp_path).score(PRICE_ONE, "<think>\ncut off MODE=ok")
    assert not verdict.correct and endpoint.total() == before


def test_bounded_concurrency(endpoint, tmp_path):
    judge = make(endpoint, tmp_path, max_concurrency=2, timeout_s=5)
    items = [(PRICE_ONE, think(f"$76.80 number {i}. MODE=sleepy")) for i in range(6)]
    start = time.perf_counter()
    verdicts = judge.score_many(items)
    elapsed = time.perf_counter() - start
    assert all(v.correct for v in verdicts) and endpoint.peak["sleepy"] == 2
    assert elapsed >= 0.7  # 6 requests of 0.25 s, 2 at a time


def test_composite_reward_with_llm_judge_config(endpoint, tmp_path):
    reward = composite_reward(l_ref=100, judge={"name": "llm", "base_url": endpoint.base_url, "model": "m",
                                               "cache_path": str(tmp_path / "c.sqlite")})
    row = task_to_row(PRICE_ONE)
    out = reward(completions=[think("$76.80. MODE=ok", reasoning=" ".join(["w"] * 30))],
                 **{k: [v] for k, v in row.items()})
    assert out == [pytest.approx(1 + 1 + 0.5)]


def test_make_judge_builds_llm_judge(endpoint, tmp_path):
    judge = make_judge({"name": "llm", "base_url": endpoint.base_url, "model": "m", "cache_path": None})
    assert isinstance(judge, LLMJudge) and "api_key" not in judge.describe()


def test_prompt_carries_the_rubric_and_the_case():
    system, user = judge_messages(PRICE_ONE, "$76.80.")
    assert "verifiable in the product docs" in system["content"] and '"helpful"' in system["content"]
    for part in (PRICE_ONE.docs_text, PRICE_ONE.question, "$76.80", "# Reply to grade"):
        assert part in user["content"]
    assert "Reference answer" not in judge_messages(PRICE_ONE, "x", include_reference=False)[1]["content"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"correct": true, "helpful": false, "reason": "r"}', (True, False)),
        ('```json\n{"correct": "yes", "helpful": "yes"}\n```', (True, True)),
        ('<think>{"correct": true}</think>{"correct": false, "helpful": true}', (False, False)),
        ("Verdict -> correct: true, helpful: true", (True, True)),
    ],
)
def test_parse_verdict(content, expected):
    verdict = parse_verdict(content)
    assert (verdict["correct"], verdict["helpful"]) == expected


def test_parse_verdict_rejects_garbage():
    with pytest.raises(ValueError):
        parse_verdict("I think it is fine.")


def test_judge_settings_are_the_llm_judges_options():
    """One spelling: JudgeSettings' json_mode (none | json_object | schema) and options reach LLMJudgeConfig."""
    from dataclasses import fields

    from livethink.config_sections import ConfigError
    from livethink.rewards.judge_settings import LLM_ONLY, JudgeSettings

    assert set(LLM_ONLY) <= {f.name for f in fields(LLMJudgeConfig)}
    config = JudgeSettings(type="llm", base_url="http://127.0.0.1:9/v1", model="m", json_mode="json_object",
                           max_retries=1).judge_config()
    assert LLMJudgeConfig.from_dict({k: v for k, v in config.items() if k != "name"}).json_mode is True
    assert LLMJudgeConfig(json_mode="none").json_mode is False and LLMJudgeConfig(json_mode="schema").json_mode == "schema"
    with pytest.raises(ConfigError, match="judge_base_url: belongs to judge type 'llm'"):
        JudgeSettings(base_url="http://x")
    with pytest.raises(ConfigError, match="judge_max_retries"):
        JudgeSettings(type="llm", base_url="http://x", model="m", max_retries=-1)
