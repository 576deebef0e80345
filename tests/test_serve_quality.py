"""Quality-aware admission: the thinking-cap curve and the floor it implies (pure, hand-computed), the floor
read from a calibration beside the checkpoint, and the server shedding or falling back below it (real
uvicorn on 127.0.0.1, fault-injection engine)."""

from __future__ import annotations

import httpx
import pytest
from serve_fixtures import (
    LIVE_BODY,
    ServerThread,
    SlowEngine,
    engine_set,
    load_tokenizer,
    make_config,
    tiny_student_dir,
)

from livethink.data.budget_forcing import ForcingTokens, thinking_opened
from livethink.data.prompt import render_prompt_ids
from livethink.data.reasoning_format import THINK
from livethink.eval.generation import Generation
from livethink.eval.harness import thinking_cap_prompts
from livethink.eval.thinking_curve import build_curve, load_curve, min_thinking, parse_caps, save_curve
from livethink.serve.app import create_app
from livethink.serve.engines.base import FORCED_THINK_END
from livethink.serve.quality import required_thinking

pytestmark = pytest.mark.timeout(120)
HTTP = httpx.Client(timeout=10)
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


def test_floor_from_the_calibration_is_shown_and_a_tight_deadline_falls_back_or_sheds(calibrated):
    tok = load_tokenizer(tiny_student_dir())
    engine = SlowEngine(tok, token_s=0.004, think_words=40)
    server = _serve(calibrated, engine, **{"budget.cold_factor": 1.0})
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


def test_dry_run_and_doctor_show_each_floor_and_its_source(calibrated, tmp_path, capsys):
    import json

    import yaml

    from livethink.doctor import serve_report
    from livethink.serve.cli import main as serve_main

    cfg = make_config(calibrated).model_dump(mode="json", exclude_none=True)
    cfg["models"]["fixed"] = {"path": str(tiny_student_dir()), "min_thinking_tokens": 64}
    cfg["models"]["bare"] = {"path": str(tiny_student_dir())}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert serve_main(["--config", str(path), "--dry-run"]) == 0
    models = json.loads(capsys.readouterr().out)["models"]
    assert models["rft"]["thinking_floor"] == {
        "min_thinking_tokens": 200, "min_thinking_source": "calibration",
        "thinking_calibration": str(calibrated / "thinking_calibration.json")}  # fmt: skip
    assert models["fixed"]["thinking_floor"]["min_thinking_source"] == "config"
    assert models["bare"]["thinking_floor"] == {"min_thinking_tokens": 0, "min_thinking_source": "none"}
    floors = {line.split()[1]: line for line in serve_report(str(path)) if line.startswith("floor")}
    assert floors["rft"].startswith("floor rft    200 thinking tokens (calibrated: ")
    assert floors["fixed"] == "floor fixed  64 thinking tokens (min_thinking_tokens in the config)"
    assert floors["bare"].startswith("floor bare   none")
    # a calibration that does not parse is a problem named by model, not a crash
    (calibrated / "thinking_calibration.json").rename(tmp_path / "kept.json")
    try:
        (calibrated / "thinking_calibration.json").write_text('{"caps": [0]}')
        assert serve_main(["--config", str(path), "--dry-run"]) == 1
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
    from livethink.serve.budget import BudgetPolicy, TokenBudget
    from livethink.serve.controller import BudgetController, QueueState

    c = BudgetController(BudgetPolicy(margin_s=0.0, reply_reserve=8, min_reply_tokens=8), {"e": 2})
    c.observe("e", load=1, ttft_s=0.0, tpot_s=0.01, service_s=0.5)  # ~0.0115 s per token with the safety
    idle = QueueState(0, 0, 2)
    plan = c.plan("e", 0.5, idle, min_thinking=100)  # ~43 tokens fit: below the floor, but still learning
    assert plan == TokenBudget(100, 8, probe=True)
    for _ in range(c.estimators["e"].settings.cold_observations):
        c.observe("e", load=1, ttft_s=0.0, tpot_s=0.01, service_s=0.5)
    learnt = c.plan("e", 0.5, idle, min_thinking=100)
    assert not learnt.probe and learnt.thinking_cap < 100  # the service then sheds or falls back
