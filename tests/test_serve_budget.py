"""Pure math of the latency budget and the controller, hand-computed; the think/reply splitter; configs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from livethink.serve.budget import (
    BudgetPolicy,
    Estimates,
    Reject,
    TokenBudget,
    hard_deadline,
    plan_budget,
    retry_after,
    split_budget,
    time_needed,
    token_capacity,
)
from livethink.serve.config import ConfigError, dry_run, load_config, parse_config
from livethink.serve.controller import (
    WLS,
    BudgetController,
    EngineEstimator,
    EstimatorSettings,
    QueueState,
    SlotQueue,
    queue_wait,
    safety_factor,
    wls_predict,
    wls_update,
)
from livethink.serve.errors import overloaded, validation_error
from livethink.serve.reasoning import ThinkSplitter, usable_reply

ROOT = Path(__file__).resolve().parents[1]
EST = Estimates(wait=0.0, ttft=0.05, tpot=0.01)
POLICY = BudgetPolicy(
    margin_s=0.05, reply_reserve=48, min_reply_tokens=8, max_thinking_tokens=256, max_tokens=512
)


# -- budget.py --------------------------------------------------------------------------------------------
def test_token_capacity_is_the_serving_note_formula():
    # (1.0 - 0 - 0.05 - 0.05) / 0.01 = 90 ; (0.999 - 0.1) / 0.01 = 89.9 -> 89
    assert token_capacity(1.0, EST, 0.05) == 90
    assert token_capacity(0.999, EST, 0.05) == 89
    assert token_capacity(0.05, EST, 0.05) == -5
    assert token_capacity(1.0, Estimates(0.5, 0.05, 0.01), 0.05) == 40
    with pytest.raises(ValueError, match="tpot"):
        token_capacity(1.0, Estimates(0, 0.05, 0.0), 0.05)


def test_time_needed_inverts_capacity():
    assert time_needed(90, EST, 0.05) == pytest.approx(1.0)


def test_split_budget_serves_the_reply_first():
    assert split_budget(90, 48, 256, 512) == (42, 48)
    assert split_budget(40, 48, 256, 512) == (0, 40)  # N_total < reserve: thinking off
    assert split_budget(90, 48, 10, 512) == (10, 48)  # thinking cap (arm / request)
    assert split_budget(90, 48, 256, 30) == (0, 30)  # the caller's max_tokens wins
    assert split_budget(90, 48, 256, 512, thinking_allowed=False) == (0, 48)
    assert split_budget(-3, 48, 256, 512) == (0, 0)


def test_plan_budget_normal_load_with_thinking_deadline():
    plan = plan_budget(1.0, EST, POLICY, now=100.0)
    assert isinstance(plan, TokenBudget)
    assert (plan.thinking_cap, plan.reply_reserve, plan.max_tokens) == (42, 48, 90)
    # thinking must end when only the reply still fits: 100 + 1.0 - 0.05 - 48 * 0.01
    assert plan.thinking_deadline == pytest.approx(100.47)


def test_pessimistic_tpot_times_the_end_of_thinking():
    est = Estimates(wait=0.0, ttft=0.05, tpot=0.01, tpot_hi=0.02)
    plan = plan_budget(1.0, est, POLICY, now=100.0)
    assert (plan.thinking_cap, plan.reply_reserve) == (42, 48)  # sized with the expected tpot
    assert plan.thinking_deadline == pytest.approx(99.99)  # 100 + 1.0 - 0.05 - 48 * 0.02


def test_plan_budget_short_deadline_disables_thinking():
    plan = plan_budget(0.5, EST, POLICY, now=0.0)
    assert isinstance(plan, TokenBudget)
    assert (plan.thinking_cap, plan.reply_reserve) == (0, 40)
    assert plan.thinking_deadline is None and not plan.thinking_enabled


def test_plan_budget_overrides():
    plan = plan_budget(1.0, EST, POLICY, max_thinking=10, reply_reserve=20)
    assert (plan.thinking_cap, plan.reply_reserve) == (10, 20)
    plan = plan_budget(1.0, EST, POLICY, reply_reserve=2)  # never below min_reply_tokens
    assert plan.reply_reserve == 8


def test_plan_budget_rejects_when_even_a_minimal_reply_cannot_fit():
    plan = plan_budget(0.15, EST, POLICY)  # (0.15 - 0.1) / 0.01 = 5 < 8 tokens
    assert isinstance(plan, Reject)
    assert plan.reason == "deadline_unreachable"
    assert plan.needed_s == pytest.approx(0.18)  # 0.05 + 0.05 + 8 * 0.01
    assert plan.retry_after_s == 1.0  # no queue to wait for: the minimum


def test_retry_after_is_the_queue_shortfall():
    est = Estimates(wait=2.0, ttft=0.05, tpot=0.01)
    # needed = 2.0 + 0.05 + 0.05 + 0.08 = 2.18 ; remaining 1.0 -> wait 1.18 s for the queue to drain
    assert retry_after(1.0, est, POLICY) == pytest.approx(1.18)
    plan = plan_budget(1.0, est, POLICY)
    assert isinstance(plan, Reject) and plan.retry_after_s == pytest.approx(1.18)
    # a deadline unreachable even when idle: the whole wait, never below the minimum
    assert retry_after(0.1, est, POLICY) == pytest.approx(2.0)
    assert retry_after(0.1, EST, POLICY) == 1.0


def test_hard_deadline():
    assert hard_deadline(10.0, 1.0, 0.015) == pytest.approx(10.985)
    assert hard_deadline(10.0, 0.01, 0.015) == 10.0


def test_policy_validation():
    with pytest.raises(ValueError, match="margin_s"):
        BudgetPolicy(margin_s=-1)
    with pytest.raises(ValueError, match="min_reply_tokens"):
        BudgetPolicy(min_reply_tokens=600, max_tokens=512)


# -- controller.py ----------------------------------------------------------------------------------------
def test_weighted_least_squares_by_hand():
    s = wls_update(wls_update(WLS(), 1, 0.010, 1.0), 3, 0.014, 1.0)
    assert (s.w, s.sx, s.sy, s.sxx, s.sxy) == pytest.approx((2, 4, 0.024, 10, 0.052))
    # mean (2, 0.012), Sxx_c = 2, Sxy_c = 0.004 -> slope 0.002 (no ridge); 0.001 with ridge 2 towards 0
    assert wls_predict(s, 5, (0.0, 0.0), ridge=0.0) == pytest.approx(0.018)
    assert wls_predict(s, 5, (0.0, 0.0), ridge=2.0) == pytest.approx(0.015)
    assert wls_predict(WLS(), 4, (0.01, 0.001), ridge=2.0) == pytest.approx(0.014)  # the prior line
    decayed = wls_update(s, 2, 0.012, 0.5)
    assert decayed.w == pytest.approx(2.0)  # 0.5 * 2 + 1


def test_slope_is_never_negative():
    s = wls_update(wls_update(WLS(), 1, 0.02, 1.0), 3, 0.01, 1.0)
    assert wls_predict(s, 10, (0.0, 0.0), ridge=0.0) == pytest.approx(0.015)  # the mean, flat


def test_queue_wait_and_safety_factor():
    assert queue_wait(0, 3, 4, 1.0) == 0.0
    assert queue_wait(0, 4, 4, 1.0) == pytest.approx(0.25)
    assert queue_wait(2, 4, 4, 1.0) == pytest.approx(0.75)
    assert safety_factor(None, 1.15, 1.5, 2.5) == 1.15
    assert safety_factor(0.04, 1.15, 1.5, 2.5) == pytest.approx(1.3)  # sigma 0.2
    assert safety_factor(4.0, 1.15, 1.5, 2.5) == 2.5  # capped


def test_estimator_learns_load_dependence():
    est = EngineEstimator(EstimatorSettings(safety=1.0, spread_k=0.0, decay=1.0, ridge=1e-9))
    for load, tpot in [(1, 0.004), (8, 0.0055), (16, 0.007), (1, 0.004), (16, 0.007)]:
        est.observe(load, 0.02, tpot, 0.5)
    low, high = est.predict(1)[2], est.predict(16)[2]
    assert low == pytest.approx(0.004, rel=0.05) and high == pytest.approx(0.007, rel=0.05)


def test_controller_plans_and_rejects_by_queue():
    c = BudgetController(
        POLICY,
        {"e": 2},
        EstimatorSettings(
            prior_ttft_s=0.05, prior_ttft_slope_s=0.0, prior_tpot_s=0.01, prior_tpot_slope_s=0.0, safety=1.0
        ),
    )
    plan = c.plan("e", 1.0, QueueState(running=0, waiting=0, capacity=2))
    assert isinstance(plan, TokenBudget) and (plan.thinking_cap, plan.reply_reserve) == (42, 48)
    c.estimators["e"].service_s = 1.0
    # 2 running, 3 waiting: wait = 4 * 1.0 / 2 = 2 s > 1 s deadline -> 429
    plan = c.plan("e", 1.0, QueueState(running=2, waiting=3, capacity=2))
    assert isinstance(plan, Reject) and plan.retry_after_s == pytest.approx(1.18)


def test_idle_engine_admits_a_probe_instead_of_refusing_forever():
    c = BudgetController(POLICY, {"e": 2})
    c.estimators["e"].observe(1, 1.4, 0.035, 2.0)  # a cold start: pessimistic estimates
    # still learning (fewer than cold_observations replies): a free slot takes a probe too
    assert c.plan("e", 0.4, QueueState(running=1, waiting=0, capacity=2)) == TokenBudget(0, 8, probe=True)
    assert isinstance(c.plan("e", 0.4, QueueState(running=2, waiting=0, capacity=2)), Reject)
    for _ in range(c.estimators["e"].settings.cold_observations):
        c.estimators["e"].observe(1, 1.4, 0.035, 2.0)
    assert isinstance(c.plan("e", 0.4, QueueState(running=1, waiting=0, capacity=2)), Reject)
    probe = c.plan("e", 0.4, QueueState(running=0, waiting=0, capacity=2))
    assert probe == TokenBudget(thinking_cap=0, reply_reserve=8, probe=True)
    # a probe gets the model's thinking floor (here 40 tokens), so that it answers well or falls back
    floor = c.plan("e", 0.4, QueueState(running=0, waiting=0, capacity=2), min_thinking=40)
    assert floor == TokenBudget(thinking_cap=40, reply_reserve=8, probe=True)
    c.loop_lag.value = 0.5  # a saturated front end refuses even when the engine is idle
    assert c.plan("e", 0.4, QueueState(0, 0, 2)).reason == "frontend_saturated"


def test_slot_queue_is_fifo_and_times_out():
    async def scenario() -> list[str]:
        q = SlotQueue(1)
        order: list[str] = []
        assert await q.acquire(0.1)

        async def waiter(name: str, timeout: float) -> None:
            if await q.acquire(timeout):
                order.append(name)
                await asyncio.sleep(0.01)
                q.release()
            else:
                order.append(f"{name}:timeout")

        tasks = [
            asyncio.create_task(waiter("a", 1.0)),
            asyncio.create_task(waiter("b", 0.01)),
            asyncio.create_task(waiter("c", 1.0)),
        ]
        await asyncio.sleep(0.05)
        assert q.waiting == 2  # b gave up
        q.release()
        await asyncio.gather(*tasks)
        assert q.running == 0 and q.waiting == 0
        return order

    assert asyncio.run(scenario()) == ["b:timeout", "a", "c"]


# -- reasoning.py -----------------------------------------------------------------------------------------
def test_think_splitter_handles_tags_split_across_deltas():
    s = ThinkSplitter()
    out = s.feed("Price is $39</thi") + s.feed("nk>\n\nThe hoodie") + s.feed(" costs $39.") + s.flush()
    assert out == [("reasoning", "Price is $39"), ("reply", "The hoodie"), ("reply", " costs $39.")]
    assert (s.reasoning, s.reply) == ("Price is $39", "The hoodie costs $39.")


def test_think_splitter_reply_only_and_held_prefix_flush():
    s = ThinkSplitter(phase="reply")
    assert s.feed("\n\nHi there") == [("reply", "Hi there")]
    s = ThinkSplitter()
    assert s.feed("thinking <") == [("reasoning", "thinking ")]
    assert s.flush() == [("reasoning", "<")]


def test_usable_reply_keeps_complete_sentences_only():
    assert usable_reply("The price is $39. It ships", complete=False) == "The price is $39."
    assert usable_reply("It costs $39.99 and", complete=False) == ""
    assert usable_reply("It costs $39.99 and", complete=True) == "It costs $39.99 and"
    assert usable_reply("  ", complete=False) == ""


# -- errors.py --------------------------------------------------------------------------------------------
def test_validation_errors_name_the_field():
    err = validation_error(
        [{"type": "int_type", "loc": ("body", "max_tokens"), "msg": "Input should be a valid integer"}]
    )
    assert err.status == 400 and err.param == "max_tokens" and "max_tokens" in err.message
    err = validation_error([{"type": "missing", "loc": ("messages", 0, "role"), "msg": "Field required"}])
    assert err.param == "messages.0.role" and "field required" in err.message
    err = overloaded("busy", 1.2)
    assert err.status == 429 and err.headers["Retry-After"] == "2"


# -- config.py --------------------------------------------------------------------------------------------
def _base(**extra):
    return {"models": {"rft": {"path": "/nowhere"}}, "default_model": "rft", **extra}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (_base(default_model="drpo"), "default_model"),
        (_base(models={"rft": {"path": "/a", "base": "x", "lora": "/b"}}), "models.rft"),
        (_base(models={"rft": {"path": "/a"}, "dot": {"base": "nope", "lora": "/b"}}), "models.dot.base"),
        (_base(budget={"deadline_ms": 0}), "budget.deadline_ms"),
        (_base(engine={"kind": "tgi"}), "engine.kind"),
        (_base(colour="blue"), "colour"),
        (_base(max_prompt_tokens=4096), "max_prompt_tokens"),
    ],
)
def test_config_errors_name_the_field(data, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_config(data)


def test_tiny_and_prod_configs_validate_without_gpu():
    tiny = load_config(ROOT / "configs/tiny/serve.yaml")
    assert tiny.deadline_ms("livestream") == 1000 and tiny.engine.kind == "auto"
    prod = load_config(ROOT / "configs/prod/serve.yaml")
    assert prod.engine.tensor_parallel_size > 1 and prod.experiment.store.startswith("postgresql")
    report = dry_run(prod)
    assert report["ok"], report["problems"]
    assert report["engine_groups"] == {"rft": {"rft": None, "drpo": prod.models["drpo"].lora}}
    assert set(report["experiment"]["experiments"]["drpo_vs_rft"]) == {"rft", "drpo"}


def test_cli_dry_run_exit_codes(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "livethink.serve.cli", "--config", "configs/prod/serve.yaml", "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"] is True
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: {rft: {path: /x}}\ndefault_model: nope\n")
    res = subprocess.run(
        [sys.executable, "-m", "livethink.serve.cli", "--config", str(bad), "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "default_model" in res.stderr
