"""Recovery after bursts: the refusal window behind /health's ``degraded``, goodput accounting, idle probes, and
the lock-out scenario on a real two-arm vLLM deployment (a burst, then one request at a time)."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from livethink.ab_test.simulate import stream_summary
from livethink.eval.goodput import ViewerOutcome, summarize
from livethink.serve.api.app import create_app
from livethink.serve.engines.probes import IdleProber, ProbeTiming
from livethink.serve.telemetry.refusals import RecentRefusals, RefusalShare, refusing_while_idle
from tests.support.serve import (
    LIVE_BODY,
    CLIServer,
    ServerThread,
    SlowEngine,
    engine_set,
    load_tokenizer,
    make_config,
    tiny_student_dir,
)

pytestmark = pytest.mark.timing  # asserts wall-clock behaviour (tests/conftest.py)


# -- pure parts -----------------------------------------------------------------------------------------
def test_recent_refusals_count_the_window_only():
    r = RecentRefusals(window_s=60.0)
    for t, reason in [(0.0, "deadline_unreachable"), (10.0, None), (20.0, "below_min_thinking"),
                      (30.0, "below_min_thinking")]:  # fmt: skip
        r.record(reason, now=t)
    s = r.share(now=65.0)  # the first event (t=0) left the window
    assert s == RefusalShare(requests=3, refused=2, top_reason="below_min_thinking")
    assert s.share == pytest.approx(2 / 3)
    assert refusing_while_idle(s, engines_idle=True, threshold=0.5, min_requests=3)
    assert not refusing_while_idle(s, engines_idle=False, threshold=0.5, min_requests=3)  # overload, not a lock-out
    assert not refusing_while_idle(s, engines_idle=True, threshold=0.5, min_requests=4)  # too few to tell
    assert r.share(now=200.0) == RefusalShare(0, 0, None)


def test_goodput_counts_correct_model_replies_in_the_deadline_over_all_sent():
    rows = [
        ViewerOutcome(200, 900.0, 1000.0, correct=True),  # good
        ViewerOutcome(200, 1001.0, 1000.0, correct=True),  # late
        ViewerOutcome(200, 500.0, 1000.0, fallback=True),  # the fallback is not an answer
        ViewerOutcome(200, 700.0, 1000.0, correct=False),  # wrong
        ViewerOutcome(429, 3.0, 1000.0),
        ViewerOutcome(None, 30_000.0, 1000.0),  # no answer
    ]
    s = summarize(rows)
    assert (s.sent, s.answered, s.fallback, s.refused, s.errors) == (6, 3, 1, 1, 1)
    assert (s.in_deadline, s.correct, s.good) == (3, 2, 1)
    assert s.goodput == pytest.approx(1 / 6) and s.answered_share == pytest.approx(0.5)


def test_stream_summary_says_whether_the_answered_target_is_met():
    arm = summarize([ViewerOutcome(200, 100.0, 1000.0, correct=True)] * 19 + [ViewerOutcome(429, 1.0, 1000.0)])
    lines = stream_summary({"per_arm": {"drpo": arm.to_dict()}, "not_in_experiment": 0})
    assert lines[0] == "answered 19 of 20 requests (95.0%; target ≥ 95%: met)"
    assert "arm drpo: 20 sent, 19 answered (95.0%), 0 fallback, 1 refused (429)" in lines[1]
    assert "goodput 95.0%" in lines[1]
    worse = stream_summary({"per_arm": {"drpo": arm.to_dict()}, "not_in_experiment": 1})
    assert worse[0].endswith("NOT met)")


# -- in-process server (fault-injection engine) ---------------------------------------------------------
def test_health_says_degraded_while_refusing_everything_on_an_idle_engine():
    """A floor that never fits: every request is shed although nothing runs. /health says so, with the reason,
    and the gauges show it; it clears once requests are answered again."""
    tok = load_tokenizer(tiny_student_dir())
    engine = SlowEngine(tok, token_s=0.002)
    config = make_config(tiny_student_dir(), **{"models.rft.min_thinking_tokens": 100_000,
                                                "endpoints.livestream.below_min_thinking": "shed"})  # fmt: skip
    server = ServerThread(create_app(config, engine_set(engine)))
    try:
        svc = server.app.state.service
        est = svc.controller.estimators["rft"]
        for _ in range(est.settings.cold_observations):  # measured: no probe is owed
            svc.controller.observe("rft", load=1, ttft_s=0.01, tpot_s=0.002, service_s=0.1)
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.get("/health").json()["status"] == "ok"
            codes = [http.post("/v1/livestream/reply", json=LIVE_BODY).status_code for _ in range(6)]
            assert codes == [429] * 6
            health = http.get("/health").json()
            metrics = http.get("/metrics").text
            assert health["status"] == "degraded", health
            assert "refused 6 of the last 6 requests (100%, most for below_min_thinking)" in health["reason"]
            assert "livethink_refusing_while_idle 1.0" in metrics and "livethink_refused_share 1.0" in metrics
            svc.floors["rft"] = type(svc.floors["rft"])(0, "config")  # the operator lowers the floor
            for _ in range(12):
                assert http.post("/v1/livestream/reply", json=LIVE_BODY).status_code == 200
            assert http.get("/health").json()["status"] == "ok"
    finally:
        server.close()


def test_idle_prober_measures_an_idle_engine_and_yields_to_a_request():
    tok = load_tokenizer(tiny_student_dir())
    engine = SlowEngine(tok, token_s=0.003, think_words=1000)
    seen: list[ProbeTiming] = []
    idle = {"rft": 10.0}

    async def scenario() -> None:
        prober = IdleProber({"rft": (engine, "rft", [1, 2, 3])}, lambda k: idle[k], lambda k, t: seen.append(t),
                            interval_s=0.05, tokens=12)  # fmt: skip
        task = asyncio.create_task(prober.run())
        while not seen:
            await asyncio.sleep(0.01)
        # a request arrives: the running probe is cancelled (aborted in the engine) and nothing is reported
        prober.tokens = 5000
        while not engine.active:
            await asyncio.sleep(0.005)
        n = len(seen)
        idle["rft"] = 0.0
        prober.cancel("rft")
        await asyncio.sleep(0.1)
        assert not engine.active and len(seen) == n and engine.cancelled
        task.cancel()

    asyncio.run(scenario())
    # 6 thinking tokens, the 4-token forced end, 6 reply tokens; paced at 3 ms (the forced end comes at once)
    assert seen[0].tokens == 16 and seen[0].tpot_s == pytest.approx(0.003, rel=0.5)


# -- the lock-out, on a real two-arm vLLM deployment ----------------------------------------------------
EXPERIMENT = """
name: burst_ab
control: rft
arms:
  - {name: rft, weight: 0.5, variant: rft, budget: {deadline_ms: 2500}}
  - {name: drpo, weight: 0.5, variant: drpo, budget: {deadline_ms: 2500, thinking_budget: 256}}
primary_metric: order_rate
"""


def _post(http: httpx.Client, i: int, out: list, lock: threading.Lock) -> None:
    t0 = time.monotonic()
    try:
        r = http.post("/v1/livestream/reply", json={**LIVE_BODY, "viewer_id": f"v{i}"})
        row = (t0, r.status_code, time.monotonic() - t0)
    except httpx.HTTPError:
        row = (t0, None, time.monotonic() - t0)
    with lock:
        out.append(row)


BURST = 96  # 6 s at 16 requests/s
AFTER = 8  # requests one at a time after the burst
IDLE_FIT_MS = 13.0  # 128 thinking + 48 reply tokens at this pace, with the safety factor and TTFT, fit 2,500 ms
REFUSAL_WINDOW_S = 15.0  # /health's window (budget.refusal_window_s; 60 s by default), short to keep the test short


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.timeout(420)
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed")
def test_after_a_burst_the_two_arm_deployment_answers_again(tmp_path: Path):
    """The lock-out: two arms (two vLLM engines) with a thinking floor of 128 tokens at 2,500 ms (the calibrated
    floor of the demo's RFT student), which fits on an idle engine (up to ~13 ms per token, with the reply reserve)
    but not under load. A 6 s burst at 16 requests/s
    (enough to overload two engines of a student that never stops thinking on a fast, idle machine too), then one
    request at a time from 5 s after the burst (8 of them, or 30 s): all answered, and /health ok once the
    burst's refusals leave its refusal window (15 s here)."""
    second = tmp_path / "student-b"
    shutil.copytree(tiny_student_dir(), second)
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    config = {
        "models": {"rft": {"path": str(tiny_student_dir()), "min_thinking_tokens": 128},
                   "drpo": {"path": str(second), "min_thinking_tokens": 128}},
        "default_model": "rft",
        "engine": {"kind": "vllm", "max_model_len": 1024, "kv_cache_gib": 1, "max_concurrency": 24},
        "endpoints": {"livestream": {"below_min_thinking": "shed"}},
        "budget": {"refusal_window_s": REFUSAL_WINDOW_S},
        "experiment": {"file": str(exp), "store": f"sqlite:///{tmp_path / 'ab.db'}", "spool_dir": None},
        "auth": {"api_key_env": None, "admin_key_env": None},
        "server": {"log_level": "warning"},
    }  # fmt: skip
    server = CLIServer(config, tmp_path, startup_timeout=300)
    burst: list = []
    lock = threading.Lock()
    try:
        with httpx.Client(base_url=server.url, timeout=30, limits=httpx.Limits(max_connections=200)) as http:
            before = [http.post("/v1/livestream/reply", json={**LIVE_BODY, "viewer_id": f"b{i}"}).status_code
                      for i in range(4)]  # fmt: skip
            idle_before = [s["idle_tpot_ms"] for s in http.get("/v1/admin/status").json()["controller"].values()]
            threads = []
            t_start = time.monotonic()
            for i in range(BURST):  # 16/s, open loop
                time.sleep(max(0.0, t_start + i / 16 - time.monotonic()))
                th = threading.Thread(target=_post, args=(http, i, burst, lock))
                th.start()
                threads.append(th)
            t_end = time.monotonic()
            time.sleep(5.0)
            after = []
            while len(after) < AFTER and time.monotonic() < t_end + 5.0 + 30.0:
                r = http.post("/v1/livestream/reply", json={**LIVE_BODY, "viewer_id": f"a{len(after)}"})
                after.append(r.status_code)
            for th in threads:
                th.join(60)
            # /health counts the refused share over the refusal window (serve.refusals): it says ok again once the
            # burst's refusals have left it
            while (health := http.get("/health").json())["status"] != "ok" and \
                    time.monotonic() < t_end + REFUSAL_WINDOW_S + 5:
                time.sleep(1.0)
            status = http.get("/v1/admin/status").json()["controller"]
    finally:
        server.close()
    codes = [c for _, c, _ in burst]
    print(f"before {before}; burst: {codes.count(200)} answered, {codes.count(429)} refused of {len(codes)}; "
          f"after (from 5 s): {after.count(200)} of {len(after)} answered; idle tpot ms "
          f"{[s['idle_tpot_ms'] for s in status.values()]}, by load {[s['tpot_ms_by_load'] for s in status.values()]}")
    assert before == [200] * 4
    assert len(codes) == BURST and None not in codes and codes.count(429) > 0  # it was an overload
    idle_after = [s["idle_tpot_ms"] for s in status.values()]
    # the burst does not set the idle estimate: it is what one-at-a-time traffic measured before it
    assert all(a <= 2.0 * b + 3.0 for a, b in zip(idle_after, idle_before, strict=True)), (idle_before, idle_after)
    if max(idle_before) > IDLE_FIT_MS:  # the premise: the floor fits on this engine when it is idle
        pytest.skip(f"the engines measured {max(idle_before):.1f} ms per token idle before the burst: the 128-token "
                    f"floor at 2,500 ms needs at most {IDLE_FIT_MS} ms (a loaded machine)")
    assert len(after) == AFTER and after.count(200) / len(after) >= 0.99, after
    assert health["status"] == "ok", health
