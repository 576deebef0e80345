"""Engine supervision: the state machine on hand-computed cases, then a real server (uvicorn in a thread) over the
fault-injection engine (``SlowEngine.die`` / ``wedge``) and over the transformers engine with its decode thread
killed: 503 + ``Retry-After`` while down (never a 500), ``/health`` 503 then 200, the restart, the retry budget
spent → exit requested, and the A/B record of every failed request."""

from __future__ import annotations

import asyncio
import ctypes
import threading
import time
from typing import Any

import httpx
import pytest

from livethink.serve.api.app import ENGINE_GAVE_UP_EXIT, create_app
from livethink.serve.engines.states import Policy, Status, backoff, on_poll, on_restarted, retry_after
from livethink.serve.telemetry.ab_hooks import ArmChoice, NoExperiment, ResponseRecord
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
P = Policy(poll_s=0.5, restart_max=2, restart_window_s=600, backoff_s=1.0, backoff_max_s=30, stall_s=5, stall_kill_s=30)


# -- the state machine ------------------------------------------------------------------------------------
def test_backoff_doubles_up_to_the_cap():
    assert [backoff(n, P) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]


def test_dead_then_restarting_then_ok():
    ok = Status(since=0.0)
    assert on_poll(ok, True, None, 50.0, P) == (ok, "none")
    dead, action = on_poll(ok, False, None, 100.0, P)
    assert action == "stop" and dead == Status("dead", "the engine died", 100.0, "died", (), 101.0)
    assert on_poll(dead, False, None, 100.5, P) == (dead, "none")  # backing off
    restarting, action = on_poll(dead, False, None, 101.0, P)
    assert action == "restart" and restarting == Status("restarting", "the engine died", 101.0, "died", (101.0,))
    assert on_poll(restarting, False, None, 120.0, P) == (restarting, "none")  # the restart is under way
    up, action = on_restarted(restarting, None, 131.0, P)
    assert action == "none" and up == Status("ok", None, 131.0, None, (101.0,))


def test_a_failed_restart_backs_off_longer_and_the_budget_ends_in_exit():
    s = Status("restarting", "the engine died", 101.0, "died", (101.0,))
    dead, action = on_restarted(s, "RuntimeError: no memory", 140.0, P)
    assert action == "stop" and dead.state == "dead" and dead.cause == "start_failed"
    assert dead.reason == "restart failed: RuntimeError: no memory" and dead.next_attempt == 142.0  # 1 s * 2**1
    again, action = on_poll(dead, False, None, 142.0, P)
    assert action == "restart" and again.restarts == (101.0, 142.0)
    failed, action = on_restarted(again, "RuntimeError: no memory", 150.0, P)
    assert action == "exit" and failed.state == "failed"
    assert "2 restarts within 600 s used up engine.restart_max (2)" in failed.reason


def test_old_restarts_leave_the_window():
    s = Status("ok", None, 0.0, None, (10.0, 20.0))
    dead, action = on_poll(s, False, None, 700.0, P)  # both restarts are older than restart_window_s
    assert action == "stop" and dead.restarts == () and dead.next_attempt == 701.0


def test_stall_is_reported_then_cleared_then_killed():
    ok = Status(since=0.0)
    assert on_poll(ok, True, 4.9, 10.0, P) == (ok, "none")
    stalled, action = on_poll(ok, True, 5.0, 10.0, P)
    assert action == "none" and stalled.state == "stalled" and stalled.since == 10.0
    assert stalled.reason == "engine stalled: no output for 5.0 s"
    still, _ = on_poll(stalled, True, 6.0, 11.0, P)
    assert still.since == 10.0  # the stall began at its first sighting
    assert on_poll(stalled, True, None, 12.0, P)[0] == Status("ok", None, 12.0)  # output came again
    dead, action = on_poll(stalled, True, 30.0, 35.0, P)
    assert action == "stop" and dead.state == "dead" and dead.cause == "stalled" and dead.next_attempt == 36.0


def test_retry_after():
    assert retry_after(Status("dead", "x", 0.0, "died", (), 12.0), 10.0, 3.0, P) == 5.0  # 2 s backoff + 3 s start
    assert retry_after(Status("restarting", "x", 9.0, "died"), 10.0, 3.0, P) == 2.0
    assert retry_after(Status("restarting", "x", 0.0, "died"), 10.0, 3.0, P) == 1.0  # at least 1 s
    assert retry_after(Status(), 10.0, 3.0, P) == 4.0  # died under a request before the poll saw it


# -- a real server over the fault-injection engine --------------------------------------------------------------
class RecordingHooks(NoExperiment):
    """Everyone in arm ``a`` of experiment ``exp``; exposures and response records kept in memory."""

    def __init__(self) -> None:
        self.exposures: list[str] = []
        self.responses: list[tuple[str, str, ResponseRecord]] = []

    def assign(self, viewer_id: str | None, forced_arm: str | None = None, **units: str | None) -> ArmChoice:
        return ArmChoice(experiment="exp", arm="a") if viewer_id else ArmChoice()

    def on_exposure(self, viewer_id: str, choice: ArmChoice, request_id: str, simulated: bool = False) -> None:
        self.exposures.append(request_id)

    def on_response(self, viewer_id: str, choice: ArmChoice, request_id: str, record: ResponseRecord,
                    simulated: bool = False) -> None:  # fmt: skip
        self.responses.append((choice.arm, request_id, record))


FAST = {"engine.restart_backoff_s": 0.5, "engine.stall_s": 1.0, "engine.stall_kill_s": 30.0}


def _serve(engine: Any, hooks: Any = None, **overrides: Any) -> ServerThread:
    config = make_config(tiny_student_dir(), **{**FAST, **overrides})
    return ServerThread(create_app(config, engine_set(engine), hooks))


def _until(predicate, timeout: float, step: float = 0.05) -> float:
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, f"not within {timeout} s"
        time.sleep(step)
    return time.monotonic() - t0


def test_dead_engine_gets_503_then_restarts_and_the_ab_record_keeps_the_errors():
    engine = SlowEngine(load_tokenizer(tiny_student_dir()), token_s=0.01, think_words=30)
    engine.start_s = 1.0
    hooks = RecordingHooks()
    server = _serve(engine, hooks)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.post("/v1/livestream/reply", json=LIVE_BODY).status_code == 200
            assert http.get("/health").json()["engine_state"]["rft"]["state"] == "ok"
            # one request in flight when the engine dies (non-streaming: 503), one streaming (an error event)
            results: dict[str, Any] = {}

            def call(name: str, **kw: Any) -> None:
                results[name] = httpx.post(f"{server.url}{kw.pop('path')}", timeout=10, **kw)

            body = {**LIVE_BODY, "viewer_id": "inflight", "deadline_ms": 5000}
            chat = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "stream": True, "user": "v2"}
            threads = [threading.Thread(target=call, args=("live",), kwargs={"path": "/v1/livestream/reply", "json": body}),
                       threading.Thread(target=call, args=("sse",), kwargs={"path": "/v1/chat/completions", "json": chat})]  # fmt: skip
            for t in threads:
                t.start()
            _until(lambda: len(engine.active) == 2, 5)
            engine.die()
            t_dead = time.monotonic()
            for t in threads:
                t.join(10)
            live, sse = results["live"], results["sse"]
            assert live.status_code == 503 and live.json()["error"]["code"] == "engine_unavailable", live.text
            assert int(live.headers["Retry-After"]) >= 1
            assert sse.status_code == 200 and '"code": "engine_unavailable"' in sse.text and sse.text.endswith(
                "data: [DONE]\n\n")  # fmt: skip
            timeline = []  # (s since the death, /health status, a reply's status)
            while True:
                h = http.get("/health")
                r = http.post("/v1/livestream/reply", json={**LIVE_BODY, "viewer_id": "later"})
                timeline.append((round(time.monotonic() - t_dead, 2), h.status_code, r.status_code))
                assert r.status_code in (200, 503) and h.status_code in (200, 503), r.text
                if r.status_code == 503:
                    assert r.json()["error"]["code"] == "engine_unavailable" and int(r.headers["Retry-After"]) >= 1
                if h.status_code == 200 and r.status_code == 200 and any(x[1] == 503 for x in timeline):
                    break
                assert time.monotonic() - t_dead < 20, timeline
                time.sleep(0.1)
            print("after the death (s, /health, reply):", timeline)
            first_503 = next(t for t, hs, _ in timeline if hs == 503)
            assert first_503 <= 2.0
            assert http.get("/health/live").status_code == 200
            metrics = http.get("/metrics").text
            assert 'livethink_engine_restarts_total{engine="rft",reason="died"} 1.0' in metrics
            assert 'livethink_engine_up{engine="rft"} 1.0' in metrics
            assert "livethink_requests_total" in metrics and 'status="error"' in metrics
    finally:
        server.close()
    assert engine.starts == 2
    errors = [(arm, rid) for arm, rid, rec in hooks.responses if rec.status == "error"]
    assert len(errors) >= 2 and {arm for arm, _ in errors} == {"a"}
    assert {rid for _, rid in errors} <= set(hooks.exposures)  # every error belongs to a logged exposure
    refused = [t for t in timeline if t[2] == 503]
    assert len(errors) >= 1 + len(refused)  # the in-flight livestream request + each refused one (viewer ids)


def test_restart_budget_spent_requests_exit():
    engine = SlowEngine(load_tokenizer(tiny_student_dir()))
    server = _serve(engine, **{"engine.restart_max": 1, "engine.restart_backoff_s": 0.1})
    exits: list[int] = []
    server.app.state.request_exit = lambda: exits.append(server.app.state.exit_code)
    try:
        engine.fail_starts = 5
        engine.die()
        _until(lambda: exits, 10)
        with httpx.Client(base_url=server.url, timeout=10) as http:
            h = http.get("/health")
            assert h.status_code == 503 and h.json()["engines"]["rft"]["state"] == "failed", h.text
            assert "engine.restart_max (1)" in h.json()["error"]["message"]
            r = http.post("/v1/livestream/reply", json=LIVE_BODY)
            assert r.status_code == 503 and r.json()["error"]["code"] == "engine_unavailable"
    finally:
        server.close()
    assert exits == [ENGINE_GAVE_UP_EXIT] and engine.starts == 2  # the first start, one failed restart


def test_wedged_engine_keeps_the_deadline_and_health_says_stalled():
    engine = SlowEngine(load_tokenizer(tiny_student_dir()), token_s=0.01)
    server = _serve(engine)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.post("/v1/livestream/reply", json=LIVE_BODY).status_code == 200
            engine.wedge()
            t0 = time.monotonic()
            for _ in range(3):
                t = time.monotonic()
                r = http.post("/v1/livestream/reply", json={**LIVE_BODY, "deadline_ms": 800})
                elapsed = (time.monotonic() - t) * 1000
                assert r.status_code == 200 and r.json()["fallback"] and elapsed <= 800, (elapsed, r.text)
            _until(lambda: http.get("/health").status_code == 503, 3)
            h = http.get("/health").json()
            assert h["engines"]["rft"]["state"] == "stalled" and "stalled" in h["error"]["message"]
            stalled_after = time.monotonic() - t0
            engine.unwedge()
            recovered = _until(lambda: http.get("/health").status_code == 200, 5)
            assert http.post("/v1/livestream/reply", json=LIVE_BODY).json()["fallback"] is False
            print(f"stalled reported {stalled_after:.1f} s after the wedge; ok {recovered:.1f} s after resuming")
    finally:
        server.close()
    assert engine.starts == 1  # a stall shorter than stall_kill_s is not a restart


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the injected SystemExit
def test_transformers_engine_with_a_dead_decode_thread_is_restarted():
    config = make_config(tiny_student_dir(), **FAST)
    server = ServerThread(create_app(config))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.post("/v1/livestream/reply", json=LIVE_BODY).status_code == 200
            engine = server.app.state.service.engines["rft"].inner
            thread = engine._thread
            # an exception raised inside the decode thread (as a crash there would) ends it
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(SystemExit))
            engine._jobs.put(None.__class__)  # wake it (any object): the pending exception fires at once
            thread.join(5)
            assert not thread.is_alive()
            down = _until(lambda: http.get("/health").status_code == 503, 2)
            up = _until(lambda: http.get("/health").status_code == 200, 30)
            r = http.post("/v1/livestream/reply", json=LIVE_BODY)
            assert r.status_code == 200, r.text
            assert engine._thread is not thread and engine._thread.is_alive()
            print(f"decode thread killed: /health 503 after {down:.2f} s, 200 again {up:.2f} s later")
    finally:
        server.close()


def test_a_server_stops_its_engines_together_and_one_failure_stops_none_of_the_others(caplog):
    """Shutdown: each engine's stop waits for its engine core (seconds on vLLM); a two-arm server stops both at
    once, and an engine whose stop raises is logged while the others still stop."""
    from livethink.serve.api.lifespan import stop_engines

    stopped: list[str] = []

    class Stopping:
        def __init__(self, key: str, fails: bool = False):
            self.key, self.fails = key, fails

        async def stop(self) -> None:
            await asyncio.sleep(0.5)
            if self.fails:
                raise RuntimeError("engine core already gone")
            stopped.append(self.key)

    t0 = time.monotonic()
    asyncio.run(stop_engines({"rft": Stopping("rft"), "drpo": Stopping("drpo", fails=True), "b": Stopping("b")}))
    assert sorted(stopped) == ["b", "rft"]
    assert time.monotonic() - t0 < 1.0  # together, not one after another (1.5 s)
    assert "engine drpo: stop failed" in caplog.text and "engine core already gone" in caplog.text
