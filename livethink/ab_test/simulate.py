"""Traffic simulator: synthetic viewers whose conversion depends on reply quality and latency.

Two modes, one outcome model:

- ``simulate_http``: replays viewer questions against a running livethink server (loopback only, bounded
  request count): ``POST /v1/livestream/reply`` (the server assigns the arm and logs the exposure), judge the
  reply (the rubric judge of ``livethink.rewards``, as in eval and training), draw outcomes,
  ``POST /v1/ab/outcomes``. Viewer ids start with ``sim-``, outcome payloads carry ``simulated: true`` and reply
  requests the ``X-Livethink-Simulated: 1`` header.
- ``simulate_offline``: no server; each arm's replies are drawn from an ``ArmProfile`` and all events are
  written straight to the event store, labelled simulated. Used by the power benchmark and the demo.

Outcome model (a funnel): P(click) = min(1, base_click · u · m), P(cart | click) = base_add_to_cart,
P(order | cart) = min(1, base_order · (1 + order_lift_arm)); u ~ lognormal with mean 1 (viewer propensity) and
m = exp(−correct_effect·[wrong] − helpful_effect·[not helpful] − latency_effect_per_s·max(0, latency − ref)),
or exp(−error_effect) when the request failed or was rejected. GMV ~ lognormal(ln gmv_median, gmv_sigma).

This module runs offline simulations and names the simulator's public API; its parts are ``sim_config`` (the
outcome model and arm profiles), ``sim_tasks`` (viewer questions, judging) and ``sim_http`` (the HTTP mode).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import numpy as np

from livethink.ab_test.assignment import Assigner
from livethink.ab_test.errors import ExperimentConfigError
from livethink.ab_test.experiment import Experiment
from livethink.ab_test.sim_config import ArmProfile, OutcomeModel, SimulationConfig, load_simulation_config
from livethink.ab_test.sim_http import MAX_REQUESTS, check_loopback, simulate_http, stream_summary
from livethink.ab_test.sim_tasks import BUILTIN_TASKS, judge_reply, judge_task, load_tasks
from livethink.ab_test.store import EventStore

__all__ = [
    "BUILTIN_TASKS",
    "MAX_REQUESTS",
    "ArmProfile",
    "OutcomeModel",
    "SimulationConfig",
    "check_loopback",
    "judge_reply",
    "judge_task",
    "load_simulation_config",
    "load_tasks",
    "simulate_http",
    "simulate_offline",
    "stream_summary",
]


def simulate_offline(
    experiment: Experiment,
    store: EventStore,
    *,
    viewers: int,
    seed: int = 0,
    config: SimulationConfig | None = None,
    end_ts: float | None = None,
    duration_s: float = 6 * 3600,
    batch_size: int = 5000,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Simulate ``viewers`` viewers (one question each) and write their events to ``store``.

    Deterministic in (experiment, seed, run_id, end_ts): re-running with all four fixed writes nothing new
    (event ids and contents repeat). Without ``run_id`` each run simulates new viewers.
    """
    if viewers < 1 or viewers > 10_000_000:
        raise ValueError("viewers: must be between 1 and 10,000,000")
    cfg = config or SimulationConfig()
    unknown = sorted(set(cfg.arms) - set(experiment.arm_names))
    if unknown:
        raise ExperimentConfigError(f"arms: simulation profiles for unknown arm(s) {unknown}")
    om = cfg.outcome_model
    end = (time.time() - 600) if end_ts is None else end_ts
    run = run_id or f"r{seed}-{int(end)}"
    rng = np.random.default_rng(seed)
    t_start = time.perf_counter()
    store.register_experiment(experiment)
    assigner = Assigner(experiment)
    ids = [f"sim-{run}-{i:07d}" for i in range(viewers)]
    arm_idx = np.array([assigner(v).variation for v in ids])
    keep = np.flatnonzero(arm_idx >= 0)
    n = len(keep)
    arms = experiment.arm_names
    a = arm_idx[keep]
    prof = [cfg.profile(x) for x in arms]

    def per_arm(attr: str) -> np.ndarray:
        return np.array([getattr(p, attr) for p in prof])[a]

    ts = np.sort(end - duration_s + duration_s * rng.random(n))
    latency = per_arm("latency_ms") * np.exp(per_arm("latency_sigma") * rng.standard_normal(n))
    ok = rng.random(n) >= per_arm("p_error")
    correct = np.where(ok, rng.random(n) < per_arm("p_correct"), False)
    helpful = np.where(ok, rng.random(n) < per_arm("p_helpful"), False)
    tokens = np.maximum(1, np.round(per_arm("tokens") * np.exp(0.3 * rng.standard_normal(n)))).astype(int)
    # refusals and fallbacks from their own stream (runs without them draw exactly what they drew before)
    rng2 = np.random.default_rng([seed, 1])
    v = rng2.random(n)
    refused = ok & (v < per_arm("p_refused"))
    fallback = ok & ~refused & (v < per_arm("p_refused") + per_arm("p_fallback"))
    latency = np.where(refused, 2 + 8 * rng2.random(n), np.where(fallback, per_arm("deadline_ms"), latency))
    correct &= ~(refused | fallback)
    helpful &= ~(refused | fallback)
    status = np.where(~ok, "error", np.where(refused, "refused", np.where(fallback, "fallback", "answered")))
    met = ok & ~refused & (latency <= per_arm("deadline_ms"))
    out = om.draw(rng, om.multiplier(correct, helpful, latency, ok & ~refused), per_arm("order_lift"))
    d_click, d_cart, d_order = (rng.uniform(lo, hi, n) for lo, hi in ((5, 120), (5, 60), (10, 300)))
    n_pre_o = rng.poisson(om.pre_period_orders * out["u"])
    n_pre_c = rng.poisson(om.pre_period_clicks * out["u"])
    lookback = om.lookback_days * 86400
    # pre-exposure history (CUPED covariate): times within the lookback window, GMV like any order
    pre_o_dt = rng.uniform(3600, lookback - 3600, int(n_pre_o.sum()))
    pre_o_gmv = np.round(om.gmv_median * np.exp(om.gmv_sigma * rng.standard_normal(len(pre_o_dt))), 2)
    pre_c_dt = rng.uniform(3600, lookback - 3600, int(n_pre_c.sum()))
    o_start = np.concatenate([[0], np.cumsum(n_pre_o)])
    c_start = np.concatenate([[0], np.cumsum(n_pre_c)])

    def events() -> Any:
        for j in range(n):
            vid, arm, t = ids[keep[j]], arms[a[j]], float(ts[j])
            base = {"experiment": experiment.name, "viewer_id": vid, "simulated": True}
            yield {
                **base,
                "kind": "exposure",
                "event_id": f"{vid}:x",
                "arm": arm,
                "ts": t,
                "request_id": f"{vid}:q",
            }
            st = str(status[j])
            replied = st in ("answered", "fallback")
            yield {
                **base, "kind": "response", "event_id": f"{vid}:r", "arm": arm, "ts": t + latency[j] / 1000,
                "request_id": f"{vid}:q", "latency_ms": float(latency[j]),
                "ttft_ms": float(latency[j] * 0.3) if st == "answered" else None,
                "first_reply_ms": float(latency[j] * 0.6) if st == "answered" else None,
                "tokens": int(tokens[j]) if st == "answered" else 0,
                "deadline_met": bool(met[j]) if replied else None,
                "correct": bool(correct[j]) if st == "answered" else None,
                "helpful": bool(helpful[j]) if st == "answered" else None, "status": st,
            }  # fmt: skip
            tc = t + d_click[j]
            if out["click"][j]:
                yield {**base, "kind": "outcome", "event_id": f"{vid}:c", "type": "click", "ts": tc}
            if out["add_to_cart"][j]:
                yield {
                    **base,
                    "kind": "outcome",
                    "event_id": f"{vid}:a",
                    "type": "add_to_cart",
                    "ts": tc + d_cart[j],
                }
            if out["order"][j]:
                yield {
                    **base, "kind": "outcome", "event_id": f"{vid}:o", "type": "order",
                    "ts": tc + d_cart[j] + d_order[j], "gmv": float(out["gmv"][j]),
                }  # fmt: skip
            for k in range(n_pre_o[j]):
                q = o_start[j] + k
                pre = {"type": "order", "ts": t - pre_o_dt[q], "gmv": float(pre_o_gmv[q])}
                yield {**base, "kind": "outcome", "event_id": f"{vid}:po{k}", **pre}
            for k in range(n_pre_c[j]):
                pre = {"type": "click", "ts": t - pre_c_dt[c_start[j] + k]}
                yield {**base, "kind": "outcome", "event_id": f"{vid}:pc{k}", **pre}

    stored = duplicates = 0
    it = events()
    while batch := list(itertools.islice(it, batch_size)):
        for ack in store.append(batch):
            stored += ack.status == "stored"
            duplicates += ack.status == "duplicate"
    return {
        "mode": "offline",
        "run_id": run,
        "viewers": viewers,
        "in_experiment": n,
        "arms": {arm: int((a == i).sum()) for i, arm in enumerate(arms)},
        "events_stored": stored,
        "events_duplicate": duplicates,
        "orders": {arm: int(out["order"][a == i].sum()) for i, arm in enumerate(arms)},
        "goodput": {arm: int((~refused & ~fallback & ok & correct & met)[a == i].sum()) for i, arm in enumerate(arms)},
        "seconds": round(time.perf_counter() - t_start, 3),
    }
