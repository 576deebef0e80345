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
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from livethink.ab_test.assignment import Assigner
from livethink.ab_test.errors import ExperimentConfigError
from livethink.ab_test.experiment import Experiment
from livethink.ab_test.serving import SIMULATED_HEADER
from livethink.ab_test.store import EventStore
from livethink.data.schema import Task
from livethink.eval.goodput import ViewerOutcome, summarize
from livethink.rewards.judge import Judge as RewardJudge
from livethink.rewards.judge import RubricJudge

MAX_REQUESTS = 100_000
_RUBRIC = RubricJudge()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OutcomeModel(_Strict):
    base_click: float = Field(default=0.25, gt=0, le=1)
    base_add_to_cart: float = Field(default=0.40, gt=0, le=1)
    base_order: float = Field(default=0.50, gt=0, le=1)
    correct_effect: float = Field(default=0.40, ge=0)
    helpful_effect: float = Field(default=0.25, ge=0)
    latency_effect_per_s: float = Field(default=0.30, ge=0)
    latency_ref_ms: float = Field(default=300.0, ge=0)
    error_effect: float = Field(default=1.0, ge=0)
    gmv_median: float = Field(default=40.0, gt=0)
    gmv_sigma: float = Field(default=0.6, ge=0)
    propensity_sigma: float = Field(default=0.5, ge=0)
    pre_period_orders: float = Field(default=0.3, ge=0)
    pre_period_clicks: float = Field(default=0.5, ge=0)
    lookback_days: float = Field(default=14.0, gt=0)

    def multiplier(self, correct: Any, helpful: Any, latency_ms: Any, ok: Any) -> np.ndarray:
        """m for arrays (or scalars) of judged correctness/helpfulness (NaN = not judged), latency, success."""
        correct, helpful = np.asarray(correct, dtype=float), np.asarray(helpful, dtype=float)
        log_m = -self.correct_effect * (correct == 0) - self.helpful_effect * (helpful == 0)
        log_m = (
            log_m
            - self.latency_effect_per_s * np.maximum(0.0, np.asarray(latency_ms) - self.latency_ref_ms) / 1000
        )
        return np.where(np.asarray(ok, dtype=bool), np.exp(log_m), math.exp(-self.error_effect))

    def draw(
        self, rng: np.random.Generator, multiplier: np.ndarray, order_lift: np.ndarray | float = 0.0
    ) -> dict:
        """Funnel outcomes for n viewers: boolean arrays click/cart/order, GMV, propensity u."""
        n = len(multiplier)
        s = self.propensity_sigma
        u = np.exp(s * rng.standard_normal(n) - s * s / 2)
        click = rng.random(n) < np.minimum(1.0, self.base_click * u * multiplier)
        cart = click & (rng.random(n) < self.base_add_to_cart)
        order = cart & (rng.random(n) < np.minimum(1.0, self.base_order * (1 + np.asarray(order_lift))))
        gmv = np.round(self.gmv_median * np.exp(self.gmv_sigma * rng.standard_normal(n)), 2)
        return {"click": click, "add_to_cart": cart, "order": order, "gmv": gmv, "u": u}


class ArmProfile(_Strict):
    """Synthetic replies of one arm (offline mode) and its true order lift (for power checks)."""

    latency_ms: float = Field(default=600.0, gt=0)
    latency_sigma: float = Field(default=0.35, ge=0)
    p_correct: float = Field(default=0.85, ge=0, le=1)
    p_helpful: float = Field(default=0.70, ge=0, le=1)
    tokens: float = Field(default=300.0, gt=0)
    p_error: float = Field(default=0.0, ge=0, le=1)
    deadline_ms: float = Field(default=1000.0, gt=0)
    order_lift: float = Field(default=0.0, gt=-1)


class SimulationConfig(_Strict):
    outcome_model: OutcomeModel = OutcomeModel()
    default_arm: ArmProfile = ArmProfile()
    arms: dict[str, ArmProfile] = {}

    def profile(self, arm: str) -> ArmProfile:
        return self.arms.get(arm, self.default_arm)


def load_simulation_config(path: str | Path | None) -> SimulationConfig:
    if path is None:
        return SimulationConfig()
    try:
        return SimulationConfig.model_validate(yaml.safe_load(Path(path).read_text()) or {})
    except FileNotFoundError:
        raise ExperimentConfigError(f"{path}: file not found") from None
    except ValidationError as exc:
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ExperimentConfigError(f"{path}: {msg}") from None


# -- offline --------------------------------------------------------------------------------------------


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
    met = ok & (latency <= per_arm("deadline_ms"))
    out = om.draw(rng, om.multiplier(correct, helpful, latency, ok), per_arm("order_lift"))
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
            yield {
                **base, "kind": "response", "event_id": f"{vid}:r", "arm": arm, "ts": t + latency[j] / 1000,
                "request_id": f"{vid}:q", "latency_ms": float(latency[j]), "ttft_ms": float(latency[j] * 0.3),
                "tokens": int(tokens[j]), "deadline_met": bool(met[j]), "correct": bool(correct[j]),
                "helpful": bool(helpful[j]), "status": "ok" if ok[j] else "error",
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
        "seconds": round(time.perf_counter() - t_start, 3),
    }


# -- over HTTP ------------------------------------------------------------------------------------------

BUILTIN_TASKS: tuple[dict, ...] = (
    {
        "product_docs": [{"product_id": "p1", "title": "Linen shirt", "text": "Price: $39. Sizes S-XL. Ships in 2 days. Free returns within 30 days."}],
        "question": "How many days until it ships?",
        "reference": {"kind": "number", "value": 2, "unit": "days"},
        "helpful_facts": [{"fact": "Free returns within 30 days.", "match": ["returns", "return"]}],
    },
    {
        "product_docs": [{"product_id": "p2", "title": "Trail shoes", "text": "Price: $89, 20% off today. Colours: black, olive. Waterproof."}],
        "question": "Are these waterproof?",
        "reference": {"kind": "yes_no", "value": True},
        "helpful_facts": [{"fact": "20% off today.", "match": ["20%", "off"]}],
    },
    {
        "product_docs": [{"product_id": "p3", "title": "Ceramic mug", "text": "Price: $12. Capacity 350 ml. Dishwasher safe."}],
        "question": "What colour is the mug?",
        "reference": {"kind": "not_stated", "value": None},
        "helpful_facts": [{"fact": "Dishwasher safe.", "match": ["dishwasher"]}],
    },
    {
        "product_docs": [{"product_id": "p4", "title": "Desk lamp", "text": "Price: $25. Brand: Lumo. Warranty 12 months."}],
        "question": "Which brand makes the lamp?",
        "reference": {"kind": "entity", "value": "Lumo"},
        "helpful_facts": [{"fact": "Warranty 12 months.", "match": ["warranty", "12 months"]}],
    },
)  # fmt: skip
_JUDGE_DEFAULTS = {"id": "sim", "split": "test", "kind": "attribute", "difficulty": 1}


def judge_task(record: dict) -> Task | None:
    """The judge's view of a viewer-question record: a ``Task`` (``id``, ``split``, ``kind`` and ``difficulty``
    default when absent), or None when it has no ``reference`` (nothing to judge correctness against).
    A record that does not fit the task schema raises ``ValueError`` naming the field."""
    if not record.get("reference"):
        return None
    fields = {**_JUDGE_DEFAULTS, **{k: v for k, v in record.items() if k in Task.model_fields}}
    try:
        return Task.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "task"
        raise ValueError(f"{where}: {first['msg']}") from exc


def judge_reply(task: dict | Task | None, reply: str, judge: RewardJudge | None = None) -> tuple[bool | None, bool | None]:
    """(correct, helpful) of a reply by the rubric judge (or ``judge``): the verdict eval and training use.

    None means not judged: correctness when the task has no reference, helpfulness when it lists no helpful
    facts (the rubric would call every reply unhelpful; the outcome model then applies no helpfulness effect)."""
    task = judge_task(task) if isinstance(task, dict) else task
    if task is None:
        return None, None
    verdict = (judge or _RUBRIC).score(task, reply or "")
    return bool(verdict.correct), (bool(verdict.helpful) if task.helpful_facts else None)


def load_tasks(path: str | Path | None) -> list[dict]:
    """Viewer questions from a JSONL of task records (``product_docs``, ``question``, ``history``, ``reference``)."""
    if path is None:
        return [dict(t) for t in BUILTIN_TASKS]
    tasks = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        for key in ("product_docs", "question"):
            if key not in rec:
                raise ValueError(f"{path}:{i}: {key}: missing")
        try:
            judge_task(rec)
        except ValueError as exc:
            raise ValueError(f"{path}:{i}: {exc}") from exc
        tasks.append(rec)
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks


def check_loopback(base_url: str) -> str:
    """Refuse anything but a loopback server (the simulator must never load real infrastructure)."""
    host = httpx.URL(base_url).host
    try:
        ok = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"base_url: the simulator only talks to loopback servers (got host {host!r})")
    return base_url.rstrip("/")


_REQUIRED = ("request_id", "arm", "reply", "timings", "deadline_met", "tokens")


async def simulate_http(
    base_url: str,
    experiment: str,
    *,
    requests: int = 100,
    viewers: int | None = None,
    tasks: Sequence[dict] | None = None,
    config: SimulationConfig | None = None,
    seed: int = 0,
    concurrency: int = 4,
    deadline_ms: int | None = None,
    timeout_s: float = 30.0,
    judge: RewardJudge | None = None,
    client: httpx.AsyncClient | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Send ``requests`` viewer questions to a running server and post the simulated outcomes.

    Replies are judged by ``judge`` (default: the rubric judge of ``livethink.rewards``, as in eval and training).
    ``deadline_ms`` is sent with every request when given; by default the server applies its own, so an experiment
    arm's ``budget.deadline_ms`` (or the endpoint's) is what the viewers get."""
    base = check_loopback(base_url)
    if not 1 <= requests <= MAX_REQUESTS:
        raise ValueError(f"requests: must be between 1 and {MAX_REQUESTS}")
    n_viewers = viewers or requests
    tasks = list(tasks or BUILTIN_TASKS)
    judged = []
    for i, task in enumerate(tasks):
        try:
            judged.append(judge_task(task))
        except ValueError as exc:
            raise ValueError(f"tasks[{i}]: {exc}") from exc
    om = (config or SimulationConfig()).outcome_model
    rng = np.random.default_rng(seed)
    run = run_id or f"h{seed}-{int(time.time())}"
    sem = asyncio.Semaphore(max(1, concurrency))
    stats: dict[str, Any] = {
        "replies_ok": 0, "rejected": 0, "errors": 0, "malformed": 0, "not_in_experiment": 0,
        "outcomes_posted": 0, "outcomes_acked": 0, "outcome_errors": 0, "arms": {}, "latency_ms": [],
        "error_samples": [], "refused_reasons": {},
    }  # fmt: skip
    own = client is None
    http = client or httpx.AsyncClient(timeout=timeout_s)
    headers = {SIMULATED_HEADER: "1"}
    seen: dict[str, list[ViewerOutcome]] = {}  # arm -> what its viewers' clients saw

    async def one(i: int) -> None:
        task = tasks[i % len(tasks)]
        vid = f"sim-{run}-{i % n_viewers:07d}"
        body = {
            "viewer_id": vid,
            "product_docs": task["product_docs"],
            "question": task["question"],
            "history": task.get("history", []),
        }
        if deadline_ms is not None:
            body["deadline_ms"] = deadline_ms
        err = ""
        async with sem:
            t0 = time.perf_counter()
            try:
                r = await http.post(f"{base}/v1/livestream/reply", json=body, headers=headers)
            except httpx.HTTPError as exc:
                r, err = None, str(exc)
            elapsed = (time.perf_counter() - t0) * 1000
        arm, ok, latency, correct, helpful = None, False, elapsed, None, None
        fallback, deadline = False, float(deadline_ms or "inf")  # the server's reply says which it applied
        if r is None or r.status_code >= 500 or (r.status_code >= 400 and r.status_code != 429):
            stats["errors"] += 1
            if len(stats["error_samples"]) < 5:
                stats["error_samples"].append(err if r is None else f"{r.status_code}: {r.text[:200]}")
            if r is not None:
                arm = _arm_from(r)
        elif r.status_code == 429:
            stats["rejected"] += 1
            arm = _arm_from(r)
            reason = _field(r, "reason") or "unknown"
            stats["refused_reasons"][reason] = stats["refused_reasons"].get(reason, 0) + 1
        else:
            data = r.json()
            missing = [k for k in _REQUIRED if k not in data]
            if missing or not isinstance(data.get("timings"), dict) or "e2e_ms" not in data["timings"]:
                stats["malformed"] += 1
                if len(stats["error_samples"]) < 5:
                    stats["error_samples"].append(f"reply missing {missing or ['timings.e2e_ms']}")
                return
            stats["replies_ok"] += 1
            ok, arm, latency = True, data["arm"], float(data["timings"]["e2e_ms"])
            fallback, deadline = bool(data.get("fallback")), float(data.get("deadline_ms") or deadline)
            correct, helpful = judge_reply(judged[i % len(tasks)], data["reply"], judge)
        stats["latency_ms"].append(latency)
        if arm is None:
            stats["not_in_experiment"] += 1
            return
        status = None if r is None else r.status_code
        seen.setdefault(arm, []).append(ViewerOutcome(status, elapsed, deadline, fallback, correct))
        stats["arms"][arm] = stats["arms"].get(arm, 0) + 1
        m = om.multiplier(
            np.nan if correct is None else float(correct),
            np.nan if helpful is None else float(helpful),
            latency,
            ok,
        )
        draw = om.draw(rng, np.atleast_1d(m))
        for kind in ("click", "add_to_cart", "order"):
            if not draw[kind][0]:
                break
            payload = {
                "event_id": f"{vid}:{i}:{kind}",
                "viewer_id": vid,
                "experiment": experiment,
                "type": kind,
                "simulated": True,
            }
            if kind == "order":
                payload["gmv"] = float(draw["gmv"][0])
            stats["outcomes_posted"] += 1
            try:
                ro = await http.post(f"{base}/v1/ab/outcomes", json=payload, headers=headers)
                good = ro.status_code < 300
            except httpx.HTTPError as exc:
                good, ro = False, None
                err = str(exc)
            stats["outcomes_acked"] += good
            if not good:
                stats["outcome_errors"] += 1
                if len(stats["error_samples"]) < 5:
                    stats["error_samples"].append(
                        err if ro is None else f"outcome {ro.status_code}: {ro.text[:200]}"
                    )

    try:
        await asyncio.gather(*(one(i) for i in range(requests)))
    finally:
        if own:
            await http.aclose()
    lat = np.array(stats.pop("latency_ms"))
    return {
        "mode": "http",
        "run_id": run,
        "base_url": base,
        "experiment": experiment,
        "requests": requests,
        **stats,
        "latency_p50_ms": float(np.percentile(lat, 50)) if len(lat) else None,
        "latency_p99_ms": float(np.percentile(lat, 99)) if len(lat) else None,
        "per_arm": {arm: summarize(rows).to_dict() for arm, rows in sorted(seen.items())},
    }


def stream_summary(result: dict[str, Any], target_answered: float = 0.95) -> list[str]:
    """Lines for people: the answered share of a ``simulate_http`` run against its target, and goodput per arm
    (correct, not the fallback, within the deadline by the client's clock, over the requests sent)."""
    arms = result.get("per_arm", {})
    sent = sum(a["sent"] for a in arms.values()) + result.get("not_in_experiment", 0)
    answered = sum(a["answered"] for a in arms.values())
    share = answered / sent if sent else 0.0
    verdict = "met" if share >= target_answered else "NOT met"
    lines = [f"answered {answered} of {sent} requests ({share:.1%}; target ≥ {target_answered:.0%}: {verdict})"]
    if result.get("refused_reasons"):
        lines.append("refused (429) for: " + ", ".join(f"{k} {v}" for k, v in sorted(result["refused_reasons"].items())))
    for arm, a in arms.items():
        lines.append(
            f"arm {arm}: {a['sent']} sent, {a['answered']} answered ({a['answered_share']:.1%}), "
            f"{a['fallback']} fallback, {a['refused']} refused (429), {a['errors']} errors; "
            f"goodput {a['goodput']:.1%} (correct, in the deadline, by the client's clock)"
        )
    return lines


def _field(r: httpx.Response, name: str) -> str | None:
    """A top-level field of a JSON answer (an error's ``arm`` or ``reason``), None when absent."""
    try:
        data = r.json()
    except ValueError:
        return None
    return data.get(name) if isinstance(data, dict) else None


def _arm_from(r: httpx.Response) -> str | None:
    return _field(r, "arm")
