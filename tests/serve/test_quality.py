"""Quality-aware admission: the thinking-cap curve and the floor it implies (pure, hand-computed), the floor
read from a calibration beside the checkpoint, what a request below it gets (``auto`` from the curve, or as
configured; pure, hand-computed), and the server shedding, falling back or answering below it (real uvicorn on
127.0.0.1, fault-injection engine)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from livethink.data.budget_forcing import ForcingTokens, thinking_opened
from livethink.data.prompt import render_prompt_ids
from livethink.data.reasoning_format import THINK
from livethink.eval.generation import Generation
from livethink.eval.harness import thinking_cap_prompts
from livethink.eval.thinking_curve import build_curve, load_curve, min_thinking, parse_caps, save_curve
from livethink.serve.api.app import create_app
from livethink.serve.config import EndpointConfig, EndpointsConfig, load_config
from livethink.serve.engines.base import FORCED_THINK_END
from livethink.serve.request_path.quality import (
    ThinkingFloor,
    below_floor_action,
    below_floor_summary,
    forced_correct,
    required_thinking,
)
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
ROOT = Path(__file__).resolve().parents[2]
LIVE = "/v1/livestream/reply"
CHAT_BODY = {"model": "rft", "messages": [{"role": "user", "content": "How much is the hoodie?"}]}


def test_min_thinking_is_the_first_cap_within_the_ratio():
    caps, correct = (0, 16, 32, 64), (0.10, 0.30, 0.38, 0.41)
    assert min_thinking(caps, correct, 0.40, 0.9) == 32  # 0.9 × 0.40 = 0.36 ≤ 0.38
    assert min_thinking(caps, correct, 0.40, 0.75) == 16  # 0.30 ≥ 0.30
    assert min_thinking(caps, correct, 0.50, 0.9) is None  # no cap reaches 0.45
    assert min_thinking(caps, correct, 0.0, 0.9) == 0
    with pytest.raises(ValueError, match="ratio"):
        min_thinking(caps, correct, 0.4, 0.0)


def test_parse_caps_names_the_flag():
    assert parse_caps("0,16, 32") == (0, 16, 32)
    for bad in ("", "16,8", "-1,4", "a,b"):
        with pytest.raises(ValueError, match="--thinking-caps"):
            parse_caps(bad)


def test_curve_round_trips_and_a_broken_file_is_an_error(tmp_path):
    curve = build_curve((0, 32), (0.1, 0.4), (0.5, 0.9), 0.42, 0.9, 0.9, 60, "validation", "livethink eval ...")
    assert curve.min_thinking_tokens == 32
    save_curve(curve, tmp_path)
    assert load_curve(tmp_path) == curve
    assert load_curve(tmp_path / "elsewhere") is None
    (tmp_path / "thinking_calibration.json").write_text('{"caps": [0]}')
    with pytest.raises(ValueError, match="not a thinking calibration"):
        load_curve(tmp_path)


def test_required_thinking():
    assert required_thinking(40, True, None) == 40
    assert required_thinking(40, True, 16) == 16  # the arm's own cap is lower: that is what it asked for
    assert required_thinking(40, False, None) == 0 and required_thinking(0, True, None) == 0


def test_forced_correct_reads_the_curve_at_the_cap():
    caps, correct = (0, 32, 64, 128), (0.0, 0.2, 0.3, 0.5)
    assert [forced_correct(caps, correct, c) for c in (0, 32, 64, 128)] == [0.0, 0.2, 0.3, 0.5]  # measured
    assert forced_correct(caps, correct, 16) == pytest.approx(0.1)  # halfway between 0.0 and 0.2
    assert forced_correct(caps, correct, 48) == pytest.approx(0.25)
    assert forced_correct(caps, correct, 96) == pytest.approx(0.4)
    assert forced_correct(caps, correct, 1) == pytest.approx(0.2 / 32)  # one token past a 0.0: > 0
    assert forced_correct(caps, correct, 500) == 0.5  # past the last cap: its share
    assert forced_correct((16, 32), (0.1, 0.3), 0) == 0.1  # before the first cap: its share
    assert forced_correct((16, 32), (0.1, 0.3), 24) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="one correct share per cap"):
        forced_correct((0, 32), (0.1,), 8)


def _floor(tokens, caps, correct, n_tasks=120, split="validation"):
    curve = build_curve(caps, correct, correct, correct[-1], correct[-1], 0.9, n_tasks, split)
    return ThinkingFloor(tokens, "calibration", "m/thinking_calibration.json", curve)


def test_auto_answers_while_a_forced_reply_can_be_right_else_falls_back():
    floor = _floor(128, (0, 32, 64, 128), (0.0, 0.2, 0.3, 0.5))
    at64 = below_floor_action("auto", floor, 64)
    assert at64.action == "answer"
    assert at64.why == ("forced reply 30.0% correct at cap 64 (m/thinking_calibration.json, 120 validation tasks) "
                        "> 0 for shed/fallback")
    at16 = below_floor_action("auto", floor, 16)
    assert at16.action == "answer" and at16.why.startswith("forced reply 10.0% correct at cap 16 (")
    assert "interpolated between caps 0 and 32" in at16.why
    at0 = below_floor_action("auto", floor, 0)  # the curve: a forced reply with no thinking is never right
    assert at0.action == "fallback" and at0.why.startswith("forced reply 0.0% correct at cap 0 (m/thinking")
    for setting in ("shed", "fallback", "answer"):  # configured: taken as it is, whatever the curve says
        assert below_floor_action(setting, floor, 0).action == setting
        assert below_floor_action(setting, floor, 64).action == setting
    configured = below_floor_action("auto", ThinkingFloor(64, "config"), 0)  # no curve: answer
    assert configured.action == "answer" and "no thinking calibration (the floor is set in the config)" in configured.why


def test_below_floor_summary_over_every_cap_under_the_floor():
    drpo = _floor(192, (0, 32, 64, 128, 192, 256), (0.1333, 0.15, 0.2917, 0.525, 0.5917, 0.5917))
    s = below_floor_summary("auto", drpo)
    assert (s["setting"], s["action"]) == ("auto", "answer")
    assert s["why"] == ("forced replies 13.3% correct at cap 0, 15.0% at cap 32, 29.2% at cap 64, 52.5% at cap 128 "
                        "(m/thinking_calibration.json, 120 validation tasks) > 0 for shed/fallback: answer below "
                        "the 192-token floor")
    mixed = below_floor_summary("auto", _floor(128, (0, 32, 64, 128), (0.0, 0.0, 0.3, 0.5)))
    assert mixed["action"] == "answer_or_fallback"  # 0.0 from cap 0 to 32, then > 0 (interpolated) up to 127
    assert mixed["why"].startswith("fallback at caps 0-32 (forced replies 0.0% correct there), answer at the other")
    gaps = below_floor_summary("auto", _floor(6, (0, 2, 3, 5, 6), (0.0, 0.0, 0.1, 0.0, 0.2)))
    assert gaps["why"].startswith("fallback at caps 0-2, 5 (")  # cap 4: halfway between 0.1 and 0.0
    never = below_floor_summary("auto", _floor(64, (0, 32, 64, 96), (0.0, 0.0, 0.0, 0.4)))
    assert never["action"] == "fallback" and never["why"].startswith(
        "forced replies 0.0% correct at every cap below the 64-token floor (m/thinking_calibration.json")
    assert below_floor_summary("shed", drpo)["action"] == "shed"
    assert below_floor_summary("auto", ThinkingFloor(64, "config"))["action"] == "answer"
    none = below_floor_summary("shed", ThinkingFloor(0, "none"))
    assert none["action"] == "answer" and none["why"].startswith("no thinking floor")


def test_auto_is_the_default_below_the_floor_and_in_every_shipped_serve_config():
    assert EndpointConfig().below_min_thinking == "auto"
    assert EndpointsConfig().livestream.below_min_thinking == EndpointsConfig().chat.below_min_thinking == "auto"
    shipped = sorted(ROOT.glob("configs/*/serve.yaml"))
    assert len(shipped) >= 3
    for path in shipped:
        endpoints = load_config(path).endpoints
        assert (endpoints.livestream.below_min_thinking, endpoints.chat.below_min_thinking) == ("auto", "auto"), path


def test_cap_prompts_cut_long_thinking_in_token_space_and_keep_short():
    tok = load_tokenizer(tiny_student_dir())
    tokens = ForcingTokens.of(tok, THINK)
    prompt = tuple(render_prompt_ids(tok, [{"role": "user", "content": "How much is the hoodie?"}], THINK, True))
    _, prefilled = thinking_opened(prompt, (), tokens)
    assert prefilled >= 1  # the "\n" after <think> counts towards the cap, as on the server

    def gen(task_id: str, text: str, finish: str = "stop") -> Generation:
        return Generation(task_id, "<think>\n" + text, finish, prompt, tuple(tok.encode(text, add_special_tokens=False)))

    long_reasoning = "the hoodie costs 39 and ships in 2 days so the answer is 39"
    gens = [gen("short", "price 39\n</think>\n\nIt costs $39."),
            gen("long", f"{long_reasoning}\n</think>\n\nIt costs $39."),
            gen("open", "still thinking", "length")]
    closes_at = gens[0].token_ids.index(tokens.close[0])  # output index of the short completion's </think>
    cap = prefilled + closes_at + 1  # the short one closed within its cap
    cut, kept = thinking_cap_prompts(gens, cap, tokens)
    assert kept == ["short"] and set(cut) == {"long", "open"}
    thought = cap - prefilled
    assert cut["long"] == [*prompt, *gens[1].token_ids[:thought], *tokens.forced_end]
    assert cut["open"] == [*prompt, *gens[2].token_ids, *tokens.forced_end]  # it stopped before the cap
    cut, kept = thinking_cap_prompts(gens, cap - 1, tokens)  # one less: the short one is cut where it closed
    assert kept == [] and cut["short"] == [*prompt, *gens[0].token_ids[:closes_at], *tokens.forced_end]
    cut0, _ = thinking_cap_prompts(gens, 0, tokens)
    assert set(cut0) == {"short", "long", "open"} and cut0["short"] == [*prompt, *tokens.forced_end]
    assert tok.decode(cut0["short"][len(prompt):]) == FORCED_THINK_END


# -- the server -----------------------------------------------------------------------------------------
def _serve(model_dir, engine, **overrides):
    config = make_config(model_dir, **overrides)
    return ServerThread(create_app(config, engine_set(engine)))


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """A checkpoint directory (the tiny student's files) with a calibration asking for 200 thinking tokens."""
    import shutil

    d = tmp_path_factory.mktemp("calibrated") / "student"
    shutil.copytree(tiny_student_dir(), d)
    save_curve(build_curve((0, 100, 200), (0.0, 0.2, 0.4), (0.3, 0.6, 0.8), 0.42, 0.8, 0.9, 30), d)
    return d


def test_floor_from_the_calibration_is_shown_and_a_tight_deadline_falls_back_or_sheds_as_configured(calibrated):
    tok = load_tokenizer(tiny_student_dir())
    engine = SlowEngine(tok, token_s=0.004, think_words=40)
    server = _serve(calibrated, engine, **{"budget.cold_factor": 1.0, "endpoints.livestream.below_min_thinking": "fallback",
                                            "endpoints.chat.below_min_thinking": "shed"})  # fmt: skip
    try:
        card = HTTP.get(f"{server.url}/v1/models").json()["data"][0]
        assert (card["min_thinking_tokens"], card["min_thinking_source"]) == (200, "calibration")
        assert HTTP.get(f"{server.url}/health").json()["min_thinking_tokens"] == {"rft": 200}
        # an engine measured at ~11 ms per token: 600 ms leave no room for 200 thinking tokens
        controller = server.app.state.service.controller
        for _ in range(controller.estimators["rft"].settings.cold_observations):
            controller.observe("rft", load=1, ttft_s=0.01, tpot_s=0.011, service_s=0.5)
        started = engine.started
        r = HTTP.post(f"{server.url}{LIVE}", json={**LIVE_BODY, "deadline_ms": 600}).json()
        assert r["fallback"] and r["fallback_reason"] == "below_min_thinking" and r["deadline_met"]
        assert r["reply"] == "Good question! Let me check that and get right back to you."
        assert engine.started == started  # no generation for it
        # ... the chat endpoint sheds with 429 + Retry-After, saying why
        resp = HTTP.post(f"{server.url}/v1/chat/completions", json={**CHAT_BODY, "deadline_ms": 600})
        assert resp.status_code == 429 and int(resp.headers["retry-after"]) >= 1
        assert resp.json()["reason"] == "below_min_thinking" and resp.json()["min_thinking_tokens"] == 200
        metrics = HTTP.get(f"{server.url}/metrics").text
        assert 'livethink_below_min_thinking_total{action="fallback",arm="none",endpoint="livestream"' in metrics
        assert 'livethink_below_min_thinking_total{action="shed",arm="none",endpoint="chat"' in metrics
        assert 'reason="below_min_thinking"' in metrics
        # a generous deadline gets the floor
        r = HTTP.post(f"{server.url}{LIVE}", json={**LIVE_BODY, "deadline_ms": 5000}).json()
        assert not r["fallback"] and r["budget"]["thinking_cap"] >= 200
    finally:
        server.close()


def test_auto_answers_where_the_curve_says_a_forced_reply_can_be_right_and_health_says_why(tmp_path):
    """Default ``auto``, a curve at 0.0 up to cap 100: a cap near 0 gets the fallback reply, a cap of about 150
    a forced reply; ``/health`` says what each endpoint does below the floor, the metrics what was done."""
    import shutil

    d = tmp_path / "student"
    shutil.copytree(tiny_student_dir(), d)
    save_curve(build_curve((0, 100, 200), (0.0, 0.0, 0.4), (0.3, 0.6, 0.8), 0.42, 0.8, 0.9, 30, "validation"), d)
    tok = load_tokenizer(tiny_student_dir())
    engine = SlowEngine(tok, token_s=0.004, think_words=40)
    server = _serve(d, engine, **{"budget.cold_factor": 1.0})
    try:
        below = HTTP.get(f"{server.url}/health").json()["below_min_thinking"]
        assert set(below) == {"livestream", "chat"} and below["livestream"] == below["chat"]
        live = below["livestream"]["rft"]
        assert (live["setting"], live["action"]) == ("auto", "answer_or_fallback")
        assert live["why"] == (
            "fallback at caps 0-100 (forced replies 0.0% correct there), answer at the other caps below the "
            f"200-token floor: forced replies 0.0% correct at cap 0, 0.0% at cap 100 ({d / 'thinking_calibration.json'}, "
            "30 validation tasks)")
        controller = server.app.state.service.controller
        for _ in range(controller.estimators["rft"].settings.cold_observations):  # ~11 ms per token
            controller.observe("rft", load=1, ttft_s=0.01, tpot_s=0.011, service_s=0.5)
        started = engine.started
        r = HTTP.post(f"{server.url}{LIVE}", json={**LIVE_BODY, "deadline_ms": 600}).json()  # a cap of a few tokens
        assert r["fallback"] and r["fallback_reason"] == "below_min_thinking" and r["deadline_met"]
        assert engine.started == started
        r = HTTP.post(f"{server.url}{LIVE}", json={**LIVE_BODY, "deadline_ms": 2300}).json()  # a cap of ~150
        assert not r["fallback"] and r["fallback_reason"] is None and r["deadline_met"]
        assert 100 < r["budget"]["thinking_cap"] < 200
        metrics = HTTP.get(f"{server.url}/metrics").text
        for action in ("fallback", "answer"):
            assert (f'livethink_below_min_thinking_total{{action="{action}",arm="none",endpoint="livestream",'
                    f'model="rft"}} 1.0') in metrics
        assert 'reason="below_min_thinking"' not in metrics  # nothing shed
    finally:
        server.close()


def test_dry_run_and_doctor_show_each_floor_and_its_source(calibrated, tmp_path, capsys):
    import json

    import yaml

    from livethink.doctor import serve_report
    from livethink.serve.cli import main as serve_main

    cfg = make_config(calibrated).model_dump(mode="json", exclude_none=True)
    cfg["models"]["fixed"] = {"path": str(tiny_student_dir()), "min_thinking_tokens": 64}
    cfg["models"]["bare"] = {"path": str(tiny_student_dir())}
    cfg["endpoints"] = {"chat": {"below_min_thinking": "shed"}}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert serve_main(["--config", str(path), "--dry-run"]) == 0
    report = json.loads(capsys.readouterr().out)
    models = report["models"]
    assert models["rft"]["thinking_floor"] == {
        "min_thinking_tokens": 200, "min_thinking_source": "calibration",
        "thinking_calibration": str(calibrated / "thinking_calibration.json")}  # fmt: skip
    assert models["fixed"]["thinking_floor"]["min_thinking_source"] == "config"
    assert models["bare"]["thinking_floor"] == {"min_thinking_tokens": 0, "min_thinking_source": "none"}
    below = report["below_min_thinking"]  # the shape of /health's
    assert below["livestream"]["rft"]["action"] == "answer_or_fallback"  # the curve: 0.0 at cap 0, 0.2 at 100
    assert below["livestream"]["rft"]["why"].startswith("fallback at caps 0 (forced replies 0.0% correct there)")
    assert below["chat"]["fixed"] == {"setting": "shed", "action": "shed", "why": (
        "configured; 429 at admission, the fallback reply when the wait for an engine slot ate the floor")}
    assert below["livestream"]["fixed"]["action"] == "answer"  # auto, a configured floor: no curve to read
    lines = serve_report(str(path))
    floors = {line.split()[1]: line for line in lines if line.startswith("floor")}
    assert floors["rft"].startswith("floor rft    200 thinking tokens (calibrated: ")
    assert floors["fixed"] == "floor fixed  64 thinking tokens (min_thinking_tokens in the config)"
    assert floors["bare"].startswith("floor bare   none")
    assert "below rft    livestream: answer_or_fallback (below_min_thinking: auto; fallback at caps 0 (" in "\n".join(lines)
    assert "below fixed  chat: shed (below_min_thinking: shed; configured; 429 at admission, " in "\n".join(lines)
    # a calibration that does not parse is a problem named by model, not a crash
    (calibrated / "thinking_calibration.json").rename(tmp_path / "kept.json")
    try:
        (calibrated / "thinking_calibration.json").write_text('{"caps": [0]}')
        assert serve_main(["--config", str(path), "--dry-run"]) == 2
        report = json.loads(capsys.readouterr().out)
        assert any(p.startswith("models.rft: ") and "not a thinking calibration" in p for p in report["problems"])
    finally:
        (tmp_path / "kept.json").replace(calibrated / "thinking_calibration.json")


def test_answer_mode_and_a_configured_floor(tmp_path):
    tok = load_tokenizer(tiny_student_dir())
    engine = SlowEngine(tok, token_s=0.004, think_words=40)
    server = _serve(tiny_student_dir(), engine, **{
        "models.rft.min_thinking_tokens": 500, "endpoints.chat.below_min_thinking": "answer",
        "budget.cold_factor": 1.0})
    try:
        card = HTTP.get(f"{server.url}/v1/models").json()["data"][0]
        assert (card["min_thinking_tokens"], card["min_thinking_source"]) == (500, "config")
        HTTP.post(f"{server.url}/v1/chat/completions", json=CHAT_BODY)  # the idle-engine probe
        d = HTTP.post(f"{server.url}/v1/chat/completions", json={**CHAT_BODY, "deadline_ms": 800}).json()
        assert d["livethink"]["fallback_reason"] is None and d["choices"][0]["message"]["content"]
    finally:
        server.close()


def test_a_probe_carries_the_floor_while_the_estimates_are_learnt():
    from livethink.serve.budget.controller import BudgetController, QueueState
    from livethink.serve.budget.plan import BudgetPolicy, TokenBudget

    c = BudgetController(BudgetPolicy(margin_s=0.0, reply_reserve=8, min_reply_tokens=8), {"e": 2})
    c.observe("e", load=1, ttft_s=0.0, tpot_s=0.01, service_s=0.5)  # ~0.0115 s per token with the safety
    idle = QueueState(0, 0, 2)
    plan = c.plan("e", 0.5, idle, min_thinking=100)  # ~43 tokens fit: below the floor, but still learning
    assert plan == TokenBudget(100, 8, probe=True)
    for _ in range(c.estimators["e"].settings.cold_observations):
        c.observe("e", load=1, ttft_s=0.0, tpot_s=0.01, service_s=0.5)
    learnt = c.plan("e", 0.5, idle, min_thinking=100)
    assert not learnt.probe and learnt.thinking_cap < 100  # the service then sheds or falls back
