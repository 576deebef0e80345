"""The traffic simulator against a running server (loopback only, bounded request count): ask, judge the reply,
draw the viewer's outcomes, post them. See ``livethink.ab_test.simulate`` for the outcome model."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from livethink.ab_test.serving import SIMULATED_HEADER
from livethink.ab_test.sim_config import SimulationConfig
from livethink.ab_test.sim_tasks import BUILTIN_TASKS, judge_reply, judge_task
from livethink.eval.goodput import ViewerOutcome, summarize
from livethink.rewards.judge import Judge as RewardJudge

MAX_REQUESTS = 100_000


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
        "outcomes_posted": 0, "outcomes_acked": 0, "outcome_errors": 0, "labels_posted": 0, "labels_acked": 0,
        "arms": {}, "latency_ms": [],
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
        t0 = time.perf_counter()
        try:
            r = await http.post(f"{base}/v1/livestream/reply", json=body, headers=headers)
        except httpx.HTTPError as exc:
            r, err = None, str(exc)
        elapsed = (time.perf_counter() - t0) * 1000
        arm, ok, latency, correct, helpful, rid = None, False, elapsed, None, None, None
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
            rid = data["request_id"]
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
        if rid and correct is not None:  # the judge's verdict, recorded as a label of the reply
            label = {"event_id": f"{vid}:{i}:correct", "viewer_id": vid, "experiment": experiment, "type": "correct",
                     "value": float(correct), "request_id": rid, "simulated": True}  # fmt: skip
            stats["labels_posted"] += 1
            if await _post(http, f"{base}/v1/ab/outcomes", label, headers, stats):
                stats["labels_acked"] += 1
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

    async def viewer(i: int) -> None:
        # a viewer holds its slot until its outcomes are posted: ``concurrency`` viewers at once, and no viewer's
        # judging or outcome posts share the client's loop with a request it is timing at concurrency 1
        async with sem:
            await one(i)

    try:
        await asyncio.gather(*(viewer(i) for i in range(requests)))
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
        "per_arm": {arm: summarize(rows).to_dict() | _client_latency(rows) for arm, rows in sorted(seen.items())},
    }


def _client_latency(rows: list[ViewerOutcome]) -> dict[str, float | None]:
    """The client's latency percentiles over an arm's answered requests (the model's replies)."""
    ms = [o.client_ms for o in rows if o.answered]
    if not ms:
        return {"answered_p50_ms": None, "answered_p99_ms": None}
    p50, p99 = np.percentile(ms, [50, 99])
    return {"answered_p50_ms": float(p50), "answered_p99_ms": float(p99)}


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


async def _post(http: httpx.AsyncClient, url: str, payload: dict, headers: dict, stats: dict[str, Any]) -> bool:
    """POST one outcome; a failure is counted in ``stats`` (with a sample), never raised."""
    try:
        ro = await http.post(url, json=payload, headers=headers)
    except httpx.HTTPError as exc:
        ro, err = None, str(exc)
    if ro is not None and ro.status_code < 300:
        return True
    stats["outcome_errors"] += 1
    if len(stats["error_samples"]) < 5:
        stats["error_samples"].append(err if ro is None else f"outcome {ro.status_code}: {ro.text[:200]}")
    return False


def _field(r: httpx.Response, name: str) -> str | None:
    """A top-level field of a JSON answer (an error's ``arm`` or ``reason``), None when absent."""
    try:
        data = r.json()
    except ValueError:
        return None
    return data.get(name) if isinstance(data, dict) else None


def _arm_from(r: httpx.Response) -> str | None:
    return _field(r, "arm")
