"""Pure math of the latency budget and the controller, hand-computed; the think/reply splitter; configs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from livethink.serve.budget.controller import (
    BudgetController,
    EngineEstimator,
    EstimatorSettings,
    QueueState,
    tail_factor,
)
from livethink.serve.budget.estimates import (
    CurveSettings,
    Decayed,
    LevelCurve,
    ReplyLengths,
    decayed_update,
    interpolate,
    load_level,
    quantile,
    stream_timing,
)
from livethink.serve.budget.plan import (
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
from livethink.serve.budget.slots import SlotQueue, queue_wait
from livethink.serve.config import ConfigError, load_config, parse_config
from livethink.serve.dry_run import dry_run
from livethink.serve.errors import overloaded, validation_error
from livethink.serve.request_path.reasoning import ThinkSplitter, usable_reply

ROOT = Path(__file__).resolve().parents[2]
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
def test_load_levels_are_powers_of_two():
    assert [load_level(x) for x in (0, 0.5, 1, 1.5, 2, 3, 4, 4.5, 8, 9)] == [1, 1, 1, 2, 2, 4, 4, 8, 8, 16]


def test_decayed_mean_and_spread_by_hand():
    d = Decayed()
    for y in (1, 2, 3, 4):
        d = decayed_update(d, y, now=0.0, half_life_s=30.0, max_weight=100.0)
    assert (d.w, d.mean, d.m2) == pytest.approx((4.0, 2.5, 5.0)) and d.sd == pytest.approx(1.25**0.5)
    assert d.weight(30.0, 30.0) == pytest.approx(2.0) and d.weight(60.0, 30.0) == pytest.approx(1.0)
    # a capped weight follows a change: [1, 3] then 5 with max_weight 2 -> the old pair counts as one
    c = Decayed()
    for y in (1, 3):
        c = decayed_update(c, y, 0.0, 30.0, max_weight=2.0)
    c = decayed_update(c, 5, 0.0, 30.0, max_weight=2.0)
    assert (c.w, c.mean, c.m2) == pytest.approx((2.0, 3.5, 5.5))  # m2 = 2 * 0.5 + (5 - 2) * (5 - 3.5)
    # one half-life later the old state weighs 1: 0.5 * 2 -> mean of (3.5 weight 1, 7 weight 1)
    assert decayed_update(c, 7, 30.0, 30.0, 100.0).mean == pytest.approx(5.25)


def test_interpolation_between_levels_and_the_prior_slope_beyond():
    pts = [(1, 0.008), (8, 0.015)]
    assert interpolate(pts, 4, 0.0005) == pytest.approx(0.008 + 0.007 * 3 / 7)
    assert interpolate(pts, 16, 0.0005) == pytest.approx(0.019)  # 0.015 + 8 * 0.0005
    assert interpolate([(8, 0.015)], 1, 0.0005) == pytest.approx(0.0115)  # 0.015 - 7 * 0.0005
    assert interpolate([(8, 0.004)], 1, 0.001) == pytest.approx(0.001)  # never below a quarter


def test_stream_timing_counts_only_the_tokens_decoded_after_the_first_delta():
    # deltas of 8 tokens: the first at 0.10 s (8 tokens), the last at 0.30 s after 48 -> 40 tokens in 0.20 s
    ttft, tpot = stream_timing(0.0, 0.10, 8, 0.30, 48)
    assert tpot == pytest.approx(0.005) and ttft == pytest.approx(0.10 - 7 * 0.005)
    assert stream_timing(0.0, 0.02, 1, 0.12, 11) == (pytest.approx(0.02), pytest.approx(0.01))  # token by token
    assert stream_timing(0.0, 0.02, 8, 0.02, 8) == (pytest.approx(0.02), None)  # one delta: no decode rate
    assert stream_timing(0.0, None, 0, None, 0) == (None, None)


def test_quantile_and_reply_lengths():
    assert quantile([10, 20, 30, 40], 0.5) == 20 and quantile([10, 20, 30, 40], 0.9) == 40
    assert quantile([7], 0.1) == 7
    r = ReplyLengths(window=3)
    assert r.quantile(0.9) is None
    for n in (30, 10, 20, 40):  # the window keeps the last three: 10, 20, 40
        r.observe(n)
    assert list(r.values) == [10, 20, 40] and r.quantile(0.5) == 20 and r.quantile(0.9) == 40


def test_a_burst_never_sets_the_idle_estimate_and_fades_back():
    """The lock-out: one-at-a-time decoding measured at 8.5 ms, then a burst at load 8 measures 15 ms. The idle
    estimate stays 8.5 ms; the load-8 estimate fades back to the idle line within a few half-lives."""
    curve = LevelCurve(CurveSettings(prior=(0.010, 0.0005), half_life_s=30.0, max_weight=8.0))
    assert curve.predict(1, 0.0) == (pytest.approx(0.0105), 0.0)  # the prior line
    for i in range(3):
        curve.observe(1, 0.0085, now=float(i))
    for i in range(50):
        curve.observe(8, 0.015, now=10.0 + i * 0.3)
    assert curve.predict(1, 30.0)[0] == pytest.approx(0.0085)
    assert curve.predict(8, 30.0)[0] == pytest.approx((8 * 0.015 + 0.0085 + 7 * 0.0005) / 9, rel=0.02)
    assert curve.predict(4, 30.0)[0] == pytest.approx(0.0085 + (0.015 - 0.0085) * 3 / 7, rel=0.02)
    later = 25.0 + 5 * 30.0  # weight 8 / 32 < 0.5: level 8 no longer counts
    assert not curve.fresh(8, later) and curve.fresh(8, 30.0)
    assert curve.predict(8, later)[0] == pytest.approx(0.0085 + 7 * 0.0005)
    assert curve.predict(1, 1e6)[0] == pytest.approx(0.0085)  # the idle measurement never expires


def test_tail_factor():
    assert tail_factor(0.01, 0.0, 2.0, 2.5) == 1.0
    assert tail_factor(0.01, 0.001, 2.0, 2.5) == pytest.approx(1.2)
    assert tail_factor(0.01, 0.05, 2.0, 2.5) == 2.5  # capped
    assert queue_wait(0, 3, 4, 1.0) == 0.0
    assert queue_wait(0, 4, 4, 1.0) == pytest.approx(0.25)
    assert queue_wait(2, 4, 4, 1.0) == pytest.approx(0.75)


def test_estimator_learns_load_dependence():
    est = EngineEstimator(EstimatorSettings(safety=1.0, prior_tpot_slope_s=0.0))
    for _ in range(8):
        for load, tpot in [(1, 0.004), (8, 0.0055), (16, 0.007)]:
            est.observe(load, 0.02, tpot, 0.5, now=0.0)
    low, high = est.predict(1, 0.0), est.predict(16, 0.0)
    assert low.tpot_mean == pytest.approx(0.004)
    assert high.tpot_mean == pytest.approx((8 * 0.007 + 0.0055) / 9)  # shrunk towards the flat line from 8
    assert high.tpot == high.tpot_mean and high.tpot_hi == pytest.approx(high.tpot_mean)  # no spread


def test_plan_sizes_thinking_on_the_typical_reply_and_ends_it_for_the_tail():
    est = Estimates(wait=0.0, ttft=0.023, tpot=0.0115, tpot_hi=0.011, tpot_mean=0.01, ttft_mean=0.02, switch=0.02)
    plan = plan_budget(1.0, est, POLICY, now=100.0, reply_expected=20, reply_tail=30)
    # N_expected = floor((1.0 - 0.02 - 0.05) / 0.01) = 93 -> thinking 93 - 20 = 73; the reply keeps its reserve
    assert (plan.thinking_cap, plan.reply_reserve) == (73, 48)
    # thinking ends when the 30-token tail still fits: 100 + 1.0 - 0.05 - 30 * 0.011 - 0.02
    assert plan.thinking_deadline == pytest.approx(100.6)
    # expected: thinking to 100 + 0.02 + 0.73 = 100.75 > the time limit -> 100.6 + switch, then 20 tokens
    assert plan.expected_end == pytest.approx(100.6 + 0.02 + 0.2)


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


def test_a_refusal_is_trusted_only_on_fresh_estimates_and_stale_ones_get_a_trickle_of_probes():
    c = BudgetController(POLICY, {"e": 2}, trickle_s=2.0)
    c.observe("e", load=1, ttft_s=1.4, tpot_s=0.035, service_s=2.0, now=0.0)  # a cold start: pessimistic
    # still learning (fewer than cold_observations replies): a free slot takes a probe
    assert c.plan("e", 0.4, QueueState(running=1, waiting=0, capacity=2)) == TokenBudget(0, 8, probe=True)
    assert isinstance(c.plan("e", 0.4, QueueState(running=2, waiting=0, capacity=2)), Reject)
    for _ in range(c.estimators["e"].settings.cold_observations):
        c.observe("e", load=1, ttft_s=1.4, tpot_s=0.035, service_s=2.0, now=0.0)
    idle = QueueState(running=0, waiting=0, capacity=2)
    # fresh measurements say it cannot fit: refused, and refusing changes nothing for the next request
    assert [c.plan("e", 0.4, idle, now=1.0).reason for _ in range(3)] == ["deadline_unreachable"] * 3
    # five half-lives later the measurement is stale: one probe per trickle interval, with the thinking floor
    t = 150.0
    probe = c.plan("e", 0.4, idle, now=t, min_thinking=40)
    assert probe.probe and (probe.thinking_cap, probe.reply_reserve) == (40, 8)
    assert probe.thinking_deadline is not None and probe.thinking_deadline < t + 0.4
    assert isinstance(c.plan("e", 0.4, idle, now=t + 1.0), Reject)
    assert c.plan("e", 0.4, idle, now=t + 2.5).probe
    c.loop_lag.observe(0.5)  # one stall is not saturation: counted as wait, not refused for
    assert c.loop_lag.value == pytest.approx(0.15) and c.loop_lag.sustained == pytest.approx(0.025)
    assert getattr(c.plan("e", 0.4, idle, now=t + 9.0), "reason", None) != "frontend_saturated"
    for _ in range(30):  # a lag that lasts (0.6 s of samples) is: a saturated front end refuses even when idle
        c.loop_lag.observe(0.5)
    assert c.plan("e", 0.4, idle, now=t + 9.5).reason == "frontend_saturated"


def test_engines_sharing_a_device_count_each_others_load():
    """Two engines on one CPU: a request alone on engine a while b runs 7 decodes as at load 8, and is filed there,
    not under a's idle level; engines on their own devices count only their own load."""
    c = BudgetController(POLICY, {"a": 4, "b": 4}, EstimatorSettings(cold_observations=0), shared_compute=True)
    c.queues["b"].running = 7
    assert c.load("a", c.queue_state("a")) == 8 and c.running_load("a", extra=1) == 8
    c.observe("a", load=c.running_load("a", extra=1), ttft_s=0.02, tpot_s=0.02, service_s=1.0, now=0.0)
    assert set(c.estimators["a"].tpot.levels) == {8}
    c.queues["b"].running = 0
    assert c.load("a", c.queue_state("a")) == 1
    apart = BudgetController(POLICY, {"a": 4, "b": 4})
    apart.queues["b"].running = 7
    assert apart.load("a", apart.queue_state("a")) == 1 and apart.running_load("a") == 0


def test_a_request_is_filed_at_the_mean_load_it_ran_under(monkeypatch):
    """A request starts alone at t=0 and ends alone at t=10, while three others ran beside it from t=2 to t=6
    (and a request on the device's other engine from t=4 to t=8): its load is the time-weighted mean,
    (1·10 + 3·4 + 1·4) / 10 = 2.6 on a shared device and (10 + 12) / 10 = 2.2 on its own, not 1."""
    clock = {"t": 0.0}
    monkeypatch.setattr("livethink.serve.budget.slots.time.monotonic", lambda: clock["t"])
    shared = BudgetController(POLICY, {"a": 8, "b": 8}, shared_compute=True)
    apart = BudgetController(POLICY, {"a": 8, "b": 8})
    for c in (shared, apart):
        clock["t"] = 0.0
        c.queues["a"].running = 1
        start = c.busy_area("a", 0.0)
        for t, a, b in [(2.0, 4, 0), (4.0, 4, 1), (6.0, 1, 1), (8.0, 1, 0)]:
            clock["t"] = t
            c.queues["a"].running, c.queues["b"].running = a, b
        clock["t"] = 10.0
        assert c.running_load("a") == 1
    assert shared.mean_load("a", 0.0, 0.0, now=10.0) == pytest.approx(2.6)
    assert apart.mean_load("a", start, 0.0, now=10.0) == pytest.approx(2.2)
    assert apart.mean_load("a", 0.0, 10.0, now=10.0) == 1.0  # no time elapsed: the load now


def test_the_idle_estimate_survives_a_burst_in_the_controller():
    """Issue of the lock-out, end to end in the controller: idle 8.5 ms, a burst at 8 running requests at 15 ms,
    then an idle request at 2,500 ms: the floor of 192 thinking tokens fits again."""
    c = BudgetController(
        BudgetPolicy(margin_s=0.02, reply_reserve=48, min_reply_tokens=24, max_thinking_tokens=256, max_tokens=512),
        {"e": 24},
        EstimatorSettings(prior_ttft_s=0.05, prior_tpot_s=0.01, cold_observations=0),
    )
    for i in range(5):
        c.observe("e", load=1, ttft_s=0.02, tpot_s=0.0085, service_s=1.5, now=float(i))
    for i in range(60):
        c.observe("e", load=8, ttft_s=0.06, tpot_s=0.015, service_s=2.5, now=10.0 + 0.25 * i)
    plan = c.plan("e", 2.45, QueueState(0, 0, 24), now=30.0, min_thinking=192)
    assert isinstance(plan, TokenBudget) and not plan.probe and plan.thinking_cap >= 192
    assert c.estimators["e"].predict(1, 30.0).tpot_mean == pytest.approx(0.0085)


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


def test_plan_leaves_room_for_the_forced_end():
    from livethink.serve.budget.plan import BudgetPolicy, Estimates, plan_budget

    policy = BudgetPolicy(margin_s=0.0, reply_reserve=10, min_reply_tokens=4, max_thinking_tokens=500, max_tokens=500)
    est = Estimates(wait=0.0, ttft=0.0, tpot=0.01)
    # 1 s at 10 ms/token: 100 tokens; the reply keeps 10, a cut adds 3 (a 4-token forced end, 1 pre-filled)
    assert plan_budget(1.0, est, policy).thinking_cap == 90
    plan = plan_budget(1.0, est, policy, forced_end_tokens=3)
    assert (plan.thinking_cap, plan.reply_reserve) == (87, 10)
    capped = plan_budget(1.0, est, policy, max_tokens=40, forced_end_tokens=3)  # the caller's max_tokens holds
    assert capped.thinking_cap + 3 + capped.reply_reserve == 40
    assert plan_budget(1.0, est, policy, thinking_allowed=False, forced_end_tokens=3).reply_reserve == 10
