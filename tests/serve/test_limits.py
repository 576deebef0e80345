"""Rate limits per viewer and per API key (token buckets, 429 naming the limit) and the A/B scope of forcing an arm
or posting outcomes, over real HTTP; the token bucket's arithmetic by hand."""

from __future__ import annotations

import httpx
import pytest

from livethink.serve.api.app import create_app
from livethink.serve.budget.token_bucket import Buckets, TokenBucket
from livethink.serve.config import ConfigError, parse_config
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
HTTP = httpx.Client(timeout=10)
LIVE = "/v1/livestream/reply"


# -- the arithmetic ---------------------------------------------------------------------------------------
def test_token_bucket_by_hand():
    b = TokenBucket.full(rate=2.0, burst=3.0, now=10.0)
    assert [b.take(10.0) for _ in range(3)] == [0.0, 0.0, 0.0]  # the burst
    assert b.take(10.0) == pytest.approx(0.5)  # empty: one token in 1 / 2 s
    assert b.tokens == pytest.approx(0.0)  # a refused request takes nothing
    assert b.take(10.25) == pytest.approx(0.25)  # 0.5 token earned: 0.5 more in 0.25 s
    assert b.take(10.5) == 0.0  # 1.0 token at 10.5: taken
    b.refill(100.0)
    assert b.tokens == 3.0  # never above the burst
    b.refill(50.0)  # a clock going back adds nothing
    assert b.tokens == 3.0 and b.updated == 100.0
    assert b.take(100.0, cost=2.5) == 0.0 and b.take(100.0, cost=1.0) == pytest.approx(0.25)  # (1 - 0.5) / 2
    with pytest.raises(ValueError, match="rate > 0"):
        TokenBucket.full(0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="burst >= 1"):
        TokenBucket.full(1.0, 0.5, 0.0)


def test_buckets_per_key_and_lru():
    bs = Buckets(rate=1.0, burst=1.0, max_keys=2)
    assert bs.take("a", 0.0) == 0.0 and bs.take("a", 0.0) == pytest.approx(1.0)
    assert bs.take("b", 0.0) == 0.0  # another key: its own bucket
    assert bs.take("a", 0.5) == pytest.approx(0.5)  # half a token earned; a is now the most recently used
    assert bs.take("c", 0.5) == 0.0 and len(bs) == 2  # b (least recently used) is forgotten
    assert bs.take("b", 0.5) == 0.0  # a forgotten key starts full (and pushes out a, now the oldest)
    assert bs.take("a", 0.5) == 0.0


def test_limits_config_is_checked():
    base = {"models": {"m": {"path": "m"}}, "default_model": "m"}
    assert parse_config(base).limits.per_viewer_rps is None  # off by default
    for field, bad in [("per_viewer_rps", 0), ("per_key_rps", -1), ("per_viewer_burst", 0.5)]:
        with pytest.raises(ConfigError, match=f"limits.{field}"):
            parse_config({**base, "limits": {field: bad}})
    with pytest.raises(ConfigError, match="limits.per_viewer_rsp"):
        parse_config({**base, "limits": {"per_viewer_rsp": 1}})


# -- over HTTP ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(tiny_student_dir())


def _serve(tokenizer, **overrides):
    engine = SlowEngine(tokenizer, think_words=2, token_s=0.001)
    config = make_config(tiny_student_dir(), **overrides)
    return ServerThread(create_app(config, engine_set(engine, 4)))


def _post(server, body, key, path=LIVE):
    return HTTP.post(server.url + path, json=body, headers={"Authorization": f"Bearer {key}"} if key else {})


def test_a_flooding_viewer_gets_429_naming_the_limit_and_others_are_served(tokenizer):
    server = _serve(tokenizer, **{"limits.per_viewer_rps": 0.5, "limits.per_viewer_burst": 2})
    try:
        flood = {**LIVE_BODY, "viewer_id": "flooder"}
        assert [_post(server, flood, None).status_code for _ in range(2)] == [200, 200]  # the burst
        r = _post(server, flood, None)
        assert r.status_code == 429
        err = r.json()
        assert err["error"]["code"] == "rate_limited" and err["error"]["param"] == "viewer_id"
        assert err["limit"] == "limits.per_viewer_rps" and "limits.per_viewer_rps" in err["error"]["message"]
        assert 1 <= int(r.headers["Retry-After"]) <= 2 and 0 < err["retry_after_ms"] <= 2000  # (1 - tokens) / 0.5
        assert _post(server, {**LIVE_BODY, "viewer_id": "calm"}, None).status_code == 200  # another viewer
        chat = {"model": "rft", "messages": [{"role": "user", "content": "hi"}], "user": "chatter"}
        codes = [_post(server, chat, None, "/v1/chat/completions").status_code for _ in range(3)]
        assert codes == [200, 200, 429]  # chat: keyed on user without a viewer_id
        metrics = HTTP.get(server.url + "/metrics").text
        assert "livethink_rejections_total" in metrics
    finally:
        server.close()


def test_per_key_limit_comes_before_the_body(tokenizer):
    server = _serve(tokenizer, **{"auth.api_keys": ["k1", "k2"], "limits.per_key_rps": 0.5,
                                  "limits.per_key_burst": 2})  # fmt: skip
    try:
        assert [_post(server, {**LIVE_BODY, "viewer_id": f"v{i}"}, "k1").status_code for i in range(2)] == [200, 200]
        r = _post(server, {}, "k1")  # an invalid body: the limit answers first, before the body is read
        assert r.status_code == 429, r.text
        assert r.json()["error"]["param"] == "Authorization" and r.json()["limit"] == "limits.per_key_rps"
        assert "Retry-After" in r.headers
        assert _post(server, LIVE_BODY, "k2").status_code == 200  # another key: its own bucket
        assert HTTP.get(server.url + "/v1/models", headers={"Authorization": "Bearer k1"}).status_code == 200  # GET
    finally:
        server.close()


def test_forcing_an_arm_and_posting_outcomes_need_the_ab_scope(tokenizer):
    server = _serve(tokenizer, **{"auth.api_keys": ["k1"], "auth.admin_keys": ["adm"], "auth.ab_keys": ["abk"]})
    try:
        forced = {**LIVE_BODY, "arm": "b"}
        r = _post(server, forced, "k1")
        assert r.status_code == 403 and r.json()["error"]["code"] == "ab_scope_required"
        assert r.json()["error"]["param"] == "arm"
        chat = {"model": "rft", "messages": [{"role": "user", "content": "hi"}], "arm": "b"}
        assert _post(server, chat, "k1", "/v1/chat/completions").status_code == 403
        for key in ("abk", "adm"):  # scoped: past the check, to the arm's own validation (no experiment here)
            assert _post(server, forced, key).json()["error"]["code"] == "arm_not_found"
        assert _post(server, LIVE_BODY, "k1").status_code == 200  # no arm: any key
        outcome = {"viewer_id": "v", "experiment": "x", "event": "order"}
        r = _post(server, outcome, "k1", "/v1/ab/outcomes")
        assert r.status_code == 403 and r.json()["error"]["code"] == "ab_scope_required"
        assert _post(server, outcome, "abk", "/v1/ab/outcomes").status_code == 404  # scoped; no experiment
    finally:
        server.close()
    open_server = _serve(tokenizer)  # no keys: auth is off, an arm may be forced by anyone
    try:
        assert _post(open_server, {**LIVE_BODY, "arm": "b"}, None).json()["error"]["code"] == "arm_not_found"
    finally:
        open_server.close()
