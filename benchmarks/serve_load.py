"""Serving load benchmark of the deployment users run: the `make demo` server (two A/B arms, trained students),
with latency by the client's clock, goodput per arm against the deadline, a cold start, and plain vLLM as the
reference.

    .venv/bin/python benchmarks/serve_load.py [--runs runs/tiny] [--data artifacts/tiny/data]
        [--model NAME=PATH ...] [--rates 4,8,16] [--duration 15] [--deadline-ms 1000] [--unloaded 30]
        [--deadlines 500,750,1000,1500,2500] [--sweep-requests 30] [--sweep-rate R] [--quick]
        [--skip-vllm] [--skip-cold] [--skip-sweep]

The full run, as published (2 CPU cores, tiny students, nothing else running), takes about 11 minutes (an
estimate: about 4 for scenarios 1-3, as measured before the sweep, and about 7 for the deadline sweep (4):
300 + 30 one-at-a-time requests, 6 x 60 arrivals at the load rate, 5 s pauses)::

    python benchmarks/serve_load.py --runs runs/tiny --rates 2,4,8 --duration 12 --unloaded 24

``--quick`` (rates 2,4 for 6 s, 8 questions per model and deadline, no cold start) takes about 5 minutes; it
is a smoke run, its intervals are too wide to quote.

Models: ``--model NAME=PATH`` (repeatable), by default ``rft`` = RUNS/rft/final and ``drpo`` =
RUNS/grpo/drpo_budget/final, the demo's DRPO student trained for the cut (``--rft`` / ``--drpo`` set those two
paths). When the models are exactly ``rft`` and ``drpo`` the server runs the ``drpo_vs_rft`` experiment as ``make demo`` does (viewers hashed to arms, an arm
forced with ``arm``); otherwise no experiment, and each request names its model (``model``): one at a time the
model is forced, under load the arrivals take the models in turn.

Scenarios, one server at a time on 127.0.0.1:

1. **deployment**: ``livethink serve --config configs/tiny/serve.yaml`` with the models above and, for rft and
   drpo, the ``drpo_vs_rft`` experiment, as ``livethink.demo_job`` starts it. First each arm alone, one request
   at a time (``--unloaded`` held-out questions per arm, the arm forced): the unloaded goodput. Then open-loop
   Poisson arrivals of ``POST /v1/livestream/reply`` (viewers hashed to arms by the experiment) at each
   ``--rates`` for ``--duration`` s, then 3x the sustainable rate.
2. **cold**: a freshly started single-student server with a student that never stops (untrained weights:
   thinks until forced, replies until cut) hit at once with the overload rate, then again once warm.
3. **plain vLLM**: ``python -m vllm.entrypoints.openai.api_server`` with the first model (the RFT student), the
   same prompt text (``/v1/completions``), the same token cap (thinking cap + reply reserve) and sampling, at
   the same rates.
4. **goodput against the deadline** (on the servers of 1 and 3): at each ``--deadlines``, each model one
   request at a time (``--sweep-requests`` questions, the same ones at every deadline), then
   ``--sweep-requests`` x models Poisson arrivals at the deployment's sustainable rate (the highest ``--rates``
   every arm sustains, by the rule below; the lowest rate when some arm sustains none; ``--sweep-rate``
   overrides), the same arrivals and questions at every deadline, 5 s apart. The deadline is the request's
   ``deadline_ms``. Plain vLLM does not know the deadline: it answers the same questions once one at a time
   and once at the same rate, and each reply counts at each deadline by its client time.

Goodput is the one definition of ``livethink.eval.goodput``: the share of the requests sent that got a reply
from the model (not the fallback, not a refusal) judged correct by ``RubricJudge``, within the deadline by the
client's clock; 95% Wilson interval in the deadline table. Helpfulness is a separate column (correct AND
helpful, same conditions).

Per rate (and per arm): requests, accepted, 429, fallback, errors, hangs (no answer within deadline + 10 s);
client latency p50/p99/max; the server's own figure beside it and the largest gap; share of accepted within
the deadline by the client's clock; goodput. Sustainable rate per arm: the highest rate with ≥ 99.9% of
accepted replies within the deadline, p99 ≤ deadline + 100 ms, and goodput ≥ 90% of the arm's unloaded one.
Per model, load and deadline (4): sent, answered, correct, fallback, refused (429), late, errors, goodput with
its interval, correct and helpful, client p50 / p95 of the 200 replies.
Results: ``benchmarks/results/serve_load.{json,md,png}`` (the plot: goodput against the deadline). Loopback only;
every phase is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from livethink.eval.goodput import ViewerOutcome
from livethink.eval.goodput import summarize as goodput_summary
from livethink.server_process import LOOPBACK, ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results"
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
DEADLINES_MS = (500, 750, 1000, 1500, 2500)
SETTLE_S = 5.0  # pause before each loaded phase of the deadline sweep: the controller's load estimates settle
FULL = {"rates": "4,8,16", "duration": 15.0, "unloaded": 30, "sweep_requests": 30}
QUICK = {"rates": "2,4", "duration": 6.0, "unloaded": 8, "sweep_requests": 8}


# -- servers ----------------------------------------------------------------------------------------------
def livethink_server(sets: list[str], workdir: Path, tag: str) -> ServerProcess:
    port = free_port(LOOPBACK)
    argv = [sys.executable, "-m", "livethink.serve.cli", "--config", str(ROOT / "configs/tiny/serve.yaml"),
            "--host", LOOPBACK, "--port", str(port), "--set", "server.log_level=warning"]
    for s in sets:
        argv += ["--set", s]
    return ServerProcess(argv, port=port, log_path=workdir / f"{tag}.log", ready_path="/health", host=LOOPBACK,
                         cwd=ROOT, env={**os.environ, **ENV}, startup_timeout_s=600, name=tag)


def vllm_server(model: Path, workdir: Path) -> ServerProcess:
    port = free_port(LOOPBACK)
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", LOOPBACK,
            "--port", str(port), "--max-model-len", "1024", "--dtype", "bfloat16", "--enforce-eager",
            "--served-model-name", "student"]
    return ServerProcess(argv, port=port, log_path=workdir / "vllm.log", ready_path="/health", host=LOOPBACK,
                         cwd=ROOT, env={**os.environ, **ENV}, startup_timeout_s=600, name="vllm")


# -- load -------------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    status: int  # HTTP status; 0 = no answer in time (hang) or a transport error
    client_ms: float
    arm: str | None = None
    server_ms: float | None = None
    fallback: bool = False
    fallback_reason: str | None = None
    forced: bool = False
    correct: bool | None = None  # the judge's verdicts on a model reply (after the load, not in the event loop)
    helpful: bool = False
    data: dict[str, Any] = field(default_factory=dict)
    task: Any = None
    reply: str | None = None


def live_body(task: Any, viewer: str, deadline_ms: int, arm: str | None = None,
              model: str | None = None) -> dict[str, Any]:
    body = {"viewer_id": viewer, "product_docs": [d.model_dump() for d in task.product_docs],
            "question": task.question, "history": [t.model_dump() for t in task.history], "deadline_ms": deadline_ms}
    if arm:
        body["arm"] = arm
    if model:
        body["model"] = model
    return body


def viewer_outcome(o: Outcome, deadline_ms: float) -> ViewerOutcome:
    """What the client saw, for the one goodput definition; ``deadline_ms`` is the one it is judged against."""
    model_reply = o.status == 200 and not o.fallback
    return ViewerOutcome(o.status or None, o.client_ms, deadline_ms, o.fallback, o.correct if model_reply else None)


class Client:
    """Sends one request and judges it. ``kind``: livethink (livestream endpoint) or vllm (completions).
    ``assign``: viewer id -> the A/B arm the server's experiment gives it, to label requests that got no answer."""

    def __init__(self, url: str, kind: str, deadline_ms: int, prompts: dict[str, str] | None = None,
                 vllm_params: dict[str, Any] | None = None, assign: Callable[[str], str | None] | None = None):
        from livethink.rewards.judge import RubricJudge

        self.url, self.kind, self.deadline_ms, self.assign = url, kind, deadline_ms, assign
        self.prompts, self.vllm_params = prompts or {}, vllm_params or {}
        self.judge = RubricJudge()

    async def one(self, client: httpx.AsyncClient, task: Any, viewer: str, arm: str | None = None,
                  model: str | None = None) -> Outcome:
        """``arm`` forces an A/B arm, ``model`` names the model; either labels the outcome when the server does not."""
        from livethink.rewards.parse import parse_completion

        label = arm or model or (self.assign(viewer) if self.assign else None)
        t0 = time.monotonic()
        try:
            if self.kind == "livethink":
                r = await client.post("/v1/livestream/reply",
                                      json=live_body(task, viewer, self.deadline_ms, arm, model))
            else:
                r = await client.post("/v1/completions",
                                      json={"model": "student", "prompt": self.prompts[task.id], **self.vllm_params})
            content = r.content
            ms = (time.monotonic() - t0) * 1000
        except httpx.HTTPError:
            return Outcome(0, (time.monotonic() - t0) * 1000, label)
        o = Outcome(r.status_code, ms, label)
        if r.status_code == 429 and self.kind == "livethink":
            error = json.loads(content)
            o.arm = error.get("arm") or label  # the A/B arm the refused viewer was assigned
            o.fallback_reason = (error.get("error") or {}).get("reason") or error.get("reason")  # why it was shed
        if r.status_code != 200:
            return o
        data = json.loads(content)
        if self.kind == "livethink":
            o.arm, o.server_ms = data.get("arm") or label, data["timings"]["e2e_ms"]
            o.fallback, o.fallback_reason = bool(data["fallback"]), data.get("fallback_reason")
            o.forced = bool(data["forced_end_of_thinking"])
            reply = data["reply"]
            o.data = {"reasoning_tokens": data["tokens"]["reasoning"], "reply_tokens": data["tokens"]["reply"]}
        else:
            text = "<think>\n" + data["choices"][0]["text"]
            reply = parse_completion(text).reply
            o.data = {"completion_tokens": data["usage"]["completion_tokens"]}
        o.task, o.reply = task, reply
        return o

    def judge_all(self, outs: list[Outcome]) -> list[Outcome]:
        for o in outs:
            if o.reply is not None and not o.fallback:
                v = self.judge.score(o.task, o.reply)
                o.correct, o.helpful = v.correct, v.helpful
        return outs


async def open_loop(c: Client, tasks: list, rate: float, duration_s: float, seed: int, tag: str,
                    max_requests: int = 2000, models: list[str] | None = None) -> tuple[list[Outcome], float]:
    """Poisson arrivals for ``duration_s`` (at most ``max_requests``; ``math.inf`` for exactly that many): request
    i leaves at its time whatever happened to the others. ``models``: request i names ``models[i % len]``."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=max_requests))
    arrivals = arrivals[arrivals < duration_s]
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=500)
    async with httpx.AsyncClient(base_url=c.url, timeout=c.deadline_ms / 1000 + 10, limits=limits) as client:
        await client.get("/health")  # the client's own first-use costs are not the server's

        async def at(i: int, when: float, t0: float) -> Outcome:
            await asyncio.sleep(max(0.0, t0 + when - time.monotonic()))
            model = models[i % len(models)] if models else None
            return await c.one(client, tasks[i % len(tasks)], f"{tag}-{seed}-{i}", model=model)

        t0 = time.monotonic()
        outs = await asyncio.gather(*(at(i, float(w), t0) for i, w in enumerate(arrivals)))
        wall = time.monotonic() - t0
    return c.judge_all(list(outs)), wall


async def one_at_a_time(c: Client, tasks: list, arm: str | None, tag: str, model: str | None = None) -> list[Outcome]:
    async with httpx.AsyncClient(base_url=c.url, timeout=c.deadline_ms / 1000 + 10) as client:
        await client.get("/health")
        outs = [await c.one(client, t, f"{tag}-{i}", arm, model) for i, t in enumerate(tasks)]
    return c.judge_all(outs)


# -- summaries --------------------------------------------------------------------------------------------
def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


def summarize(outs: list[Outcome], deadline_ms: int, wall_s: float | None = None) -> dict[str, Any]:
    n = len(outs)
    ok = [o for o in outs if o.status == 200]
    client = [o.client_ms for o in ok]
    gaps = [o.client_ms - o.server_ms for o in ok if o.server_ms is not None]
    within = [o for o in ok if o.client_ms <= deadline_ms]
    viewers = [viewer_outcome(o, deadline_ms) for o in outs]
    g = goodput_summary(viewers)
    helpful = sum(v.good and o.helpful for v, o in zip(viewers, outs, strict=True))
    return {
        "requests": n,
        "accepted": len(ok),
        "rejected_429": sum(o.status == 429 for o in outs),
        "rejected_below_min_thinking": sum(o.status == 429 and o.fallback_reason == "below_min_thinking" for o in outs),
        "hangs_or_transport_errors": sum(o.status == 0 for o in outs),
        "errors": sum(o.status not in (0, 200, 429) for o in outs),
        "fallback": sum(o.fallback for o in ok),
        "fallback_below_min_thinking": sum(o.fallback_reason == "below_min_thinking" for o in ok),
        "forced_end_of_thinking": sum(o.forced for o in ok),
        "client_ms": {"p50": _pct(client, 50), "p99": _pct(client, 99), "max": _pct(client, 100)},
        "server_ms": {"p50": _pct([o.server_ms for o in ok if o.server_ms is not None], 50),
                      "p99": _pct([o.server_ms for o in ok if o.server_ms is not None], 99)},
        "gap_ms": {"p50": _pct(gaps, 50), "max_abs": round(max(abs(g) for g in gaps), 1) if gaps else None},
        "within_deadline_of_accepted": round(len(within) / len(ok), 4) if ok else None,
        "goodput_share": round(g.goodput, 4) if n else None,
        "helpful_share": round(helpful / n, 4) if n else None,
        "goodput_rps": round(g.good / wall_s, 2) if wall_s else None,
    }


def deadline_stats(outs: list[Outcome], deadline_ms: float) -> dict[str, Any]:
    """One row of the goodput-against-the-deadline table: ``outs`` judged against ``deadline_ms`` by the client's
    clock with the one goodput definition (``livethink.eval.goodput``), its 95% Wilson interval, and client e2e
    percentiles of the 200 replies (model or fallback; refusals are fast and would flatter them)."""
    viewers = [viewer_outcome(o, deadline_ms) for o in outs]
    g = goodput_summary(viewers)
    lo, hi = g.goodput_interval()
    replied = [o.client_ms for o in outs if o.status == 200]
    return {"sent": g.sent, "answered": g.answered, "correct": g.correct, "fallback": g.fallback,
            "refused": g.refused, "late": g.late, "errors": g.errors, "good": g.good,
            "goodput": round(g.goodput, 4), "goodput_ci95": [round(lo, 4), round(hi, 4)],
            "helpful": sum(v.good and o.helpful for v, o in zip(viewers, outs, strict=True)),
            "client_ms": {"p50": _pct(replied, 50), "p95": _pct(replied, 95)}}


def sweep_row(server: str, model: str, load: str, rate: float | None, deadline_ms: float,
              outs: list[Outcome]) -> dict[str, Any]:
    return {"server": server, "model": model, "load": load, "rate": rate, "deadline_ms": deadline_ms,
            **deadline_stats(outs, deadline_ms)}


def by_arm(outs: list[Outcome], deadline_ms: int, wall_s: float | None) -> dict[str, dict[str, Any]]:
    arms = sorted({o.arm for o in outs if o.arm})
    return {a: summarize([o for o in outs if o.arm == a], deadline_ms, wall_s) for a in arms}


def meets_latency(s: dict[str, Any], deadline_ms: int) -> bool:
    p99 = s["client_ms"]["p99"]
    return (s["within_deadline_of_accepted"] or 0) >= 0.999 and p99 is not None and p99 <= deadline_ms + 100 \
        and not s["hangs_or_transport_errors"]


def sustains(s: dict[str, Any], unloaded_goodput: float, deadline_ms: int) -> bool:
    """An arm sustains a rate: the latency targets, and goodput ≥ 90% of the arm's unloaded goodput."""
    return meets_latency(s, deadline_ms) and (s["goodput_share"] or 0) >= 0.9 * unloaded_goodput


def sustainable_rates(load: list[dict[str, Any]], unloaded: dict[str, dict[str, Any]],
                      deadline_ms: int) -> dict[str, dict[str, Any]]:
    """Per arm: the highest tested rate it sustains, the highest that meets the latency targets alone."""
    out = {}
    for arm, u in unloaded.items():
        base = u["goodput_share"] or 0
        rows = [r for r in load if arm in r["arms"]]
        ok = [r["rate"] for r in rows if sustains(r["arms"][arm], base, deadline_ms)]
        lat = [r["rate"] for r in rows if meets_latency(r["arms"][arm], deadline_ms)]
        out[arm] = {"rate": max(ok) if ok else None, "latency_only_rate": max(lat) if lat else None,
                    "unloaded_goodput": base}
    return out


def deployment_rate(load: list[dict[str, Any]], unloaded: dict[str, dict[str, Any]],
                    deadline_ms: int) -> tuple[float, str]:
    """The rate of the deadline sweep's loaded phase: the highest tested rate that every arm sustains, else the
    lowest tested rate; with a line saying which."""
    common = [r["rate"] for r in load if all(
        arm in r["arms"] and sustains(r["arms"][arm], u["goodput_share"] or 0, deadline_ms)
        for arm, u in unloaded.items())]
    if common:
        return max(common), f"the highest tested rate every arm sustains at {deadline_ms} ms"
    lowest = min(r["rate"] for r in load)
    return lowest, f"no tested rate is sustained by every arm at {deadline_ms} ms: the lowest tested rate"


# -- report -----------------------------------------------------------------------------------------------
def _row(label: str, s: dict[str, Any]) -> str:
    c, sv, g = s["client_ms"], s["server_ms"], s["gap_ms"]
    w = s["within_deadline_of_accepted"]
    return (f"| {label} | {s['requests']} | {s['accepted']} | {s['rejected_429']} ({s.get('rejected_below_min_thinking', '–')}) | {s['fallback']} "
            f"({s['fallback_below_min_thinking']}) | {s['hangs_or_transport_errors']} | {s['errors']} | "
            f"{c['p50']} / {c['p99']} / {c['max']} | {sv['p50']} / {sv['p99']} | {g['p50']} / {g['max_abs']} | "
            f"{'-' if w is None else f'{100 * w:.1f}%'} | {100 * (s['goodput_share'] or 0):.1f}% | "
            f"{_share(s.get('helpful_share'))} |")


def _share(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


HEADER = ("| scenario | sent | ok | 429 (below floor) | fallback (below floor) | hang | err | client p50 / p99 / max ms | "
          "server p50 / p99 ms | gap p50 / max ms | within deadline (accepted, client) | goodput (of sent) | "
          "correct & helpful (of sent) |\n"
          "|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|")

SWEEP_HEADER = ("| server | model | load | deadline ms | sent | answered | correct | fallback | 429 | late | err | "
                "goodput [95% CI] | correct & helpful | client p50 / p95 ms |\n"
                "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")

GOODPUT_NOTE = ("goodput = the share of the requests sent answered by the model (not the fallback, not refused) "
                "correctly by `RubricJudge`, within the deadline by the client's clock (`livethink.eval.goodput`); "
                "'correct & helpful' also needs the judge's helpfulness.")
OLD_GOODPUT_NOTE = ("goodput = correct AND helpful by `RubricJudge`, not the fallback, within the deadline by the "
                    "client's clock, as a share of all requests sent.")


def series_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["server"], row["model"], row["load"]


def series_label(row: dict[str, Any]) -> str:
    server = "livethink" if row["server"] == "livethink" else "plain vLLM"
    load = "one at a time" if row["load"] == "unloaded" else f"{row['rate']:g} req/s"
    return f"{server} {row['model']}, {load}"


def sweep_table(rows: list[dict[str, Any]]) -> list[str]:
    """The goodput-against-the-deadline table, one line per server, model, load and deadline."""
    order = list(dict.fromkeys(series_key(r) for r in rows))
    lines = SWEEP_HEADER.split("\n")
    for r in sorted(rows, key=lambda r: (order.index(series_key(r)), r["deadline_ms"])):
        lo, hi = r["goodput_ci95"]
        c = r["client_ms"]
        load = "unloaded" if r["load"] == "unloaded" else f"{r['rate']:g} req/s"
        lines.append(f"| {'livethink' if r['server'] == 'livethink' else 'plain vLLM'} | {r['model']} | {load} | "
                     f"{r['deadline_ms']:g} | {r['sent']} | {r['answered']} | {r['correct']} | {r['fallback']} | "
                     f"{r['refused']} | {r['late']} | {r['errors']} | {100 * r['goodput']:.1f}% "
                     f"[{100 * lo:.1f}, {100 * hi:.1f}] | {_share(r['helpful'] / r['sent'] if r['sent'] else None)} | "
                     f"{'–' if c['p50'] is None else c['p50']} / {'–' if c['p95'] is None else c['p95']} |")
    return lines


def plot_sweep(sweep: dict[str, Any], path: Path) -> Path:
    """Goodput against the deadline with 95% intervals, one line per server, model and load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sweep["rows"]
    order = list(dict.fromkeys(series_key(r) for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows if r["server"] == "livethink"))
    colours = {m: plt.get_cmap("tab10")(i) for i, m in enumerate(models)}
    span = max(sweep["deadlines_ms"]) - min(sweep["deadlines_ms"]) or 1000
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, key in enumerate(order):
        pts = sorted((r for r in rows if series_key(r) == key), key=lambda r: r["deadline_ms"])
        dodge = (i - (len(order) - 1) / 2) * 0.006 * span  # side by side, so the intervals stay apart
        x = [r["deadline_ms"] + dodge for r in pts]
        y = [100 * r["goodput"] for r in pts]
        err = [[yi - 100 * r["goodput_ci95"][0] for yi, r in zip(y, pts, strict=True)],
               [100 * r["goodput_ci95"][1] - yi for yi, r in zip(y, pts, strict=True)]]
        vllm = key[0] != "livethink"
        ax.errorbar(x, y, yerr=err, label=series_label(pts[0]), capsize=3, linewidth=1.5,
                    color="black" if vllm else colours[key[1]], linestyle="--" if key[2] == "loaded" else "-",
                    marker="s" if vllm else "o", markersize=4, alpha=0.9)
    ax.set_xticks(sweep["deadlines_ms"])
    ax.set_xlabel("deadline (ms, the client's clock)")
    ax.set_ylabel("goodput (% of requests sent)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"Goodput against the deadline, one at a time and at {sweep['load_rate']:g} req/s (95% Wilson)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def latency_verdict(s: dict[str, Any], deadline_ms: int) -> str:
    """MET / NOT MET for one scenario's latency target, with its figures; none to judge when nothing was accepted."""
    if not s["accepted"]:
        below = s.get("rejected_below_min_thinking")
        floor = "" if below is None else f", {below} of them below the thinking floor"
        return f"nothing to judge: no request accepted ({s['rejected_429']} of {s['requests']} refused with 429{floor})"
    return (f"{'MET' if meets_latency(s, deadline_ms) else 'NOT MET'} "
            f"({100 * (s['within_deadline_of_accepted'] or 0):.2f}% within, p99 {s['client_ms']['p99']} ms)")


def target_lines(result: dict[str, Any]) -> list[str]:
    """The report's target verdicts, from the measured figures in ``result``."""
    dl, lines = result["deadline_ms"], []
    dep = result.get("deployment") or {}
    for r in dep.get("load", []):
        s, gap = r["all"], r["all"]["gap_ms"]["max_abs"]
        gap_verdict = ("nothing to judge" if gap is None
                       else f"{'MET' if gap <= 50 else 'NOT MET'} (max gap {gap} ms)")
        lines.append(f"{r['rate']} req/s{' (3×)' if r.get('overload') else ''}: ≥ 99.9% within {dl} ms and p99 ≤ "
                     f"{dl + 100} ms: {latency_verdict(s, dl)}; server figure within 50 ms of the client's: "
                     f"{gap_verdict}; hangs {s['hangs_or_transport_errors']}")
    for arm, v in dep.get("sustainable", {}).items():
        lines.append(f"{arm}: sustainable rate with goodput ≥ 90% of unloaded ({100 * v['unloaded_goodput']:.1f}%): "
                     f"{v['rate'] if v['rate'] is not None else 'none of the tested rates'} "
                     f"(latency targets alone: {v['latency_only_rate']})")
    cold = result.get("cold")
    for tag in ("cold", "warm") if cold else ():
        s = cold[tag]
        lines.append(f"{tag} never-stopping student at {cold['rate']} req/s: {latency_verdict(s, dl)}, "
                     f"{s['rejected_429']} of {s['requests']} refused")
    return lines


def write_report(result: dict[str, Any], out: Path, tag: str = "") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    result["targets"] = target_lines(result)
    stem = f"serve_load_{tag}" if tag else "serve_load"
    if result.get("deadline_sweep"):
        result["deadline_sweep"]["plot"] = plot_sweep(result["deadline_sweep"], out / f"{stem}.png").name
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    env = result["environment"]
    busy = (" **busy with other jobs when it started**" if env["loadavg_before"][0] >= env["cpus"] / 2 else "")
    lines = ["# Serving load benchmark: the `make demo` deployment (`benchmarks/serve_load.py`)", "",
             f"Command: `{result['command']}`  ",
             f"Machine: {env['cpus']} CPUs{busy} (load average before/after {env['loadavg_before']} / "
             f"{env['loadavg_after']}), Python {env['python']}, deadline "
             f"{result['deadline_ms']} ms, {env['total_s']} s in all. Latency by the client's clock (loopback "
             "HTTP, httpx); the server's own `timings.e2e_ms` beside it.", ""]
    lines += [f"**Note:** {n}  " for n in result["notes"]]
    d = result.get("deployment")
    if d:
        ab = d.get("experiment", True)  # results written before --model always ran the experiment
        lines += ["", "## Deployment: two arms, A/B on" if ab else f"## Deployment: {len(d['arms'])} model(s), no "
                  "experiment", "", f"Arms: {d['arms']}", "",
                  f"### Unloaded (one request at a time, {'arm' if ab else 'model'} forced)", "", HEADER]
        for arm, s in d["unloaded"].items():
            lines.append(_row(f"{arm} alone", s))
        lines += ["", f"### Poisson load ({'viewers hashed to arms' if ab else 'requests name the models in turn'})",
                  "", HEADER]
        for r in d["load"]:
            tag = " (3× sustainable)" if r.get("overload") else ""
            lines.append(_row(f"{r['rate']} req/s{tag}, all", r["all"]))
            for arm, s in r["arms"].items():
                lines.append(_row(f"{r['rate']} req/s{tag}, {arm}", s))
        lines += ["", "### Sustainable rate per arm", ""]
        for arm, v in d["sustainable"].items():
            lines.append(f"- {arm}: {v}")
    cold = result.get("cold")
    if cold:
        lines += ["", f"## Cold start vs warm: never-stopping student at {cold['rate']} req/s", "", HEADER,
                  _row("cold (first requests after start)", cold["cold"]), _row("warm (same server, again)", cold["warm"])]
    v = result.get("vllm")
    if v:
        lines += ["", f"## Plain vLLM OpenAI server, same model ({v.get('model', 'RFT')}) and token cap "
                  f"({v['max_tokens']})", "", HEADER]
        for r in v["load"]:
            lines.append(_row(f"{r['rate']} req/s", r["all"]))
    sw = result.get("deadline_sweep")
    if sw:
        models = ", ".join(dict.fromkeys(r["model"] for r in sw["rows"] if r["server"] == "livethink"))
        vllm = [r["model"] for r in sw["rows"] if r["server"] == "vllm"]
        lines += ["", "## Goodput against the deadline", "",
                  f"Models {models}: {sw['requests_per_model']} questions per model one at a time (unloaded), then "
                  f"{sw['loaded_requests']} Poisson arrivals at {sw['load_rate']:g} req/s ({sw['load_rate_source']}), "
                  f"the same questions and arrivals at each deadline (the request's `deadline_ms`)."
                  + (f" Plain vLLM ({vllm[0]}, same token cap) answered the same questions once one at a time and "
                     "once at the same rate; each reply counts at each deadline by its client time." if vllm else ""),
                  "", *sweep_table(sw["rows"]), ""]
        if sw.get("plot"):
            lines += [f"![goodput against the deadline]({sw['plot']})", "",
                      "Points of one deadline are shifted a little sideways so that their intervals stay apart.", ""]
    lines += ["", "## Targets", ""] + [f"- {t}" for t in result["targets"]] + [""]
    note = GOODPUT_NOTE if result.get("goodput_definition") == "correct" else OLD_GOODPUT_NOTE
    lines += [f"{note} Refused requests count as misses. 'gap' = client − server latency of the same reply.", ""]
    (out / f"{stem}.md").write_text("\n".join(lines))
    return out / f"{stem}.md"


# -- main -------------------------------------------------------------------------------------------------
def untrained_student(workdir: Path) -> Path:
    from livethink.models.student import untrained_student as build

    return build(workdir / "untrained-student")


def parse_models(items: list[str], runs: Path, rft: Path | None, drpo: Path | None,
                 notes: list[str]) -> dict[str, Path]:
    """``NAME=PATH`` items, in order; without any, rft and (where trained) drpo under ``runs``."""
    if not items:
        models = {"rft": rft or runs / "rft/final"}
        drpo = drpo or runs / "grpo/drpo_budget/final"
        if (drpo / "config.json").is_file():
            models["drpo"] = drpo
        else:
            notes.append(f"{drpo} does not exist (the compressed student is not trained yet): the deployment runs "
                         "the RFT arm only, without the experiment.")
        items = [f"{k}={v}" for k, v in models.items()]
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--model expects NAME=PATH, got {item!r}")
        if name in out:
            raise ValueError(f"--model {name}: given twice")
        if not (Path(path) / "config.json").is_file():
            raise ValueError(f"--model {name}={path}: not a model directory (run `make demo` first)")
        out[name] = Path(path)
    return out


def experiment_arms(path: Path) -> Callable[[str], str | None]:
    """Viewer id -> its arm in the experiment at ``path``: the server's hashing, computed by the client."""
    from livethink.ab_test.assignment import Assigner
    from livethink.ab_test.experiment import load_experiment

    assigner = Assigner(load_experiment(path))
    return lambda viewer: assigner(viewer).arm


def sweep_deployment_unloaded(url: str, tasks: list, deadlines: list[int], names: list[str], experiment: bool,
                              n: int) -> list[dict[str, Any]]:
    """Each model one request at a time at each deadline: the first ``n`` questions, the arm (or model) forced."""
    rows = []
    for dl in deadlines:
        c = Client(url, "livethink", dl)
        for name in names:
            arm, model = (name, None) if experiment else (None, name)
            outs = asyncio.run(one_at_a_time(c, tasks[:n], arm, f"su{dl}-{name}", model))
            rows.append(sweep_row("livethink", name, "unloaded", None, dl, outs))
            print(json.dumps({"sweep": name, "load": "unloaded", "deadline_ms": dl, **rows[-1]}), flush=True)
    return rows


def sweep_deployment_loaded(url: str, tasks: list, deadlines: list[int], names: list[str],
                            assign: Callable[[str], str | None] | None, rate: float, n: int,
                            seed: int) -> list[dict[str, Any]]:
    """``n`` Poisson arrivals at ``rate`` at each deadline, the same arrivals (viewers, questions) every time.
    ``assign``: the experiment's arms (None: no experiment, the requests name the models in turn)."""
    rows = []
    for dl in deadlines:
        time.sleep(SETTLE_S)
        c = Client(url, "livethink", dl, assign=assign)
        outs, _ = asyncio.run(open_loop(c, tasks, rate, math.inf, seed, "sweep", max_requests=n,
                                        models=None if assign else names))
        for name in names:
            rows.append(sweep_row("livethink", name, "loaded", rate, dl, [o for o in outs if o.arm == name]))
            print(json.dumps({"sweep": name, "load": "loaded", "deadline_ms": dl, **rows[-1]}), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny", help="where rft/final and grpo/drpo_budget/final are")
    p.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                   help="a model to serve (repeatable; default: rft and drpo under RUNS)")
    p.add_argument("--rft", type=Path, help="RFT student without --model (default: RUNS/rft/final)")
    p.add_argument("--drpo", type=Path, help="compressed student without --model (default: RUNS/grpo/drpo_budget/final)")
    p.add_argument("--data", type=Path, default=ROOT / "artifacts/tiny/data")
    p.add_argument("--split", default="validation", choices=["validation", "test"])
    p.add_argument("--rates", help=f"default {FULL['rates']} (--quick: {QUICK['rates']})")
    p.add_argument("--duration", type=float, help=f"s per rate; default {FULL['duration']:g} (--quick: {QUICK['duration']:g})")
    p.add_argument("--deadline-ms", type=int, default=1000, help="deadline of scenarios 1-3")
    p.add_argument("--unloaded", type=int,
                   help=f"questions per arm, one at a time; default {FULL['unloaded']} (--quick: {QUICK['unloaded']})")
    p.add_argument("--deadlines", default=",".join(map(str, DEADLINES_MS)), help="deadlines (ms) of the sweep")
    p.add_argument("--sweep-requests", type=int,
                   help="sweep: questions per model and deadline one at a time, and per model under load; "
                        f"default {FULL['sweep_requests']} (--quick: {QUICK['sweep_requests']})")
    p.add_argument("--sweep-rate", type=float, help="sweep's loaded rate (default: the deployment's sustainable one)")
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer rates and requests, no cold start")
    p.add_argument("--cold-rate", type=float, help="default: 3x the deployment's sustainable rate")
    p.add_argument("--skip-vllm", action="store_true")
    p.add_argument("--skip-cold", action="store_true")
    p.add_argument("--skip-sweep", action="store_true", help="no goodput-against-the-deadline sweep")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra config override for the livethink servers (e.g. engine.kind=transformers)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--tag", default="", help="results go to serve_load_<tag>.{json,md,png} (e.g. another deadline)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-only", action="store_true",
                   help="only rewrite the Markdown, plot (and target verdicts) of OUT/serve_load[_TAG].json; no serving")
    args = p.parse_args(argv)
    if args.report_only:
        stem = f"serve_load_{args.tag}" if args.tag else "serve_load"
        src = args.out / f"{stem}.json"
        if not src.is_file():
            p.error(f"--report-only: {src} does not exist (run the benchmark first)")
        print(write_report(json.loads(src.read_text()), args.out, args.tag).read_text())
        return 0
    preset = QUICK if args.quick else FULL
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    skip_cold = args.skip_cold or args.quick

    from livethink.data.io import read_tasks

    t_start = time.monotonic()
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    notes: list[str] = []
    try:
        arms = parse_models(args.model, args.runs, args.rft, args.drpo, notes)
        deadlines = sorted({int(d) for d in args.deadlines.split(",")})
    except ValueError as exc:
        p.error(str(exc))
    names = list(arms)
    experiment = set(names) == {"rft", "drpo"}
    first = names[0]
    workdir = Path(tempfile.mkdtemp(prefix="serve-load-"))
    tasks = read_tasks(args.data / f"{args.split}.jsonl")
    rates = [float(r) for r in args.rates.split(",")]
    dl = args.deadline_ms
    result: dict[str, Any] = {"deadline_ms": dl, "notes": notes, "split": args.split, "goodput_definition": "correct"}
    n_sweep = args.sweep_requests
    sweep_rows: list[dict[str, Any]] = []
    sweep_rate, sweep_rate_source = None, None

    # 1. the deployment (and 4., the deadline sweep on it)
    sets = ["models=" + json.dumps({k: {"path": str(v)} for k, v in arms.items()}), f"default_model={first}",
            *args.set]
    experiment_file = ROOT / "configs/ab/drpo_vs_rft.yaml"
    assign = None
    if experiment:
        sets += [f"experiment={{file: {experiment_file}, store: sqlite:///{workdir / 'ab.db'}}}"]
        assign = experiment_arms(experiment_file)
    route = None if experiment else names  # without the experiment, requests name their model in turn
    server = livethink_server(sets, workdir, "deployment")
    dep: dict[str, Any] = {"arms": {k: str(v) for k, v in arms.items()}, "experiment": experiment,
                           "startup_s": round(server.startup_s, 1)}
    try:
        c = Client(server.url, "livethink", dl, assign=assign)
        dep["models"] = httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"]
        unloaded = {}
        for arm in arms:
            forced_arm, model = (arm, None) if experiment else (None, arm)
            unloaded[arm] = summarize(asyncio.run(one_at_a_time(c, tasks[: args.unloaded], forced_arm, f"u-{arm}",
                                                                model)), dl)
            print(json.dumps({"unloaded": arm, **unloaded[arm]}), flush=True)
        dep["unloaded"] = unloaded
        if not args.skip_sweep:  # before any load: nothing to recover from
            sweep_rows += sweep_deployment_unloaded(server.url, tasks, deadlines, names, experiment, n_sweep)
        load = []
        for i, rate in enumerate(rates):
            outs, wall = asyncio.run(open_loop(c, tasks, rate, args.duration, args.seed + i, "load", models=route))
            row = {"rate": rate, "all": summarize(outs, dl, wall), "arms": by_arm(outs, dl, wall)}
            load.append(row)
            print(json.dumps({"rate": rate, **row["all"]}), flush=True)
        sustainable = sustainable_rates(load, unloaded, dl)
        lat_all = [r["rate"] for r in load if meets_latency(r["all"], dl)]
        over_rate = 3 * (max(lat_all) if lat_all else min(rates))
        outs, wall = asyncio.run(open_loop(c, tasks, over_rate, args.duration, args.seed + 99, "over", models=route))
        load.append({"rate": over_rate, "overload": True, "all": summarize(outs, dl, wall),
                     "arms": by_arm(outs, dl, wall)})
        print(json.dumps({"rate": over_rate, "overload": True, **load[-1]["all"]}), flush=True)
        dep["load"], dep["sustainable"] = load, sustainable
        if not args.skip_sweep:
            if args.sweep_rate:
                sweep_rate, sweep_rate_source = args.sweep_rate, "--sweep-rate"
            else:
                sweep_rate, sweep_rate_source = deployment_rate(load[:-1], unloaded, dl)
            sweep_rows += sweep_deployment_loaded(server.url, tasks, deadlines, names, assign, sweep_rate,
                                                  n_sweep * len(names), args.seed + 200)
        dep["controller"] = httpx.get(f"{server.url}/v1/admin/status", timeout=10).json()["controller"]
    finally:
        server.close()
    result["deployment"] = dep
    # 2. cold start with a never-stopping student
    if not skip_cold:
        cold_rate = args.cold_rate or over_rate
        student = untrained_student(workdir)
        server = livethink_server([f"models.rft.path={student}", *args.set], workdir, "cold")
        try:
            c = Client(server.url, "livethink", dl)
            cold, wall_c = asyncio.run(open_loop(c, tasks, cold_rate, args.duration, args.seed + 7, "cold"))
            warm, wall_w = asyncio.run(open_loop(c, tasks, cold_rate, args.duration, args.seed + 8, "warm"))
        finally:
            server.close()
        result["cold"] = {"rate": cold_rate, "startup_s": round(server.startup_s, 1),
                          "cold": summarize(cold, dl, wall_c), "warm": summarize(warm, dl, wall_w)}

    # 3. plain vLLM, same model and token cap (and 4., its replies at each deadline)
    if not args.skip_vllm:
        import yaml
        from transformers import AutoTokenizer

        from livethink.data.prompt import build_messages, render_prompt
        from livethink.data.reasoning_format import resolve

        cfg = yaml.safe_load((ROOT / "configs/tiny/serve.yaml").read_text())
        cap = int(cfg["budget"]["max_thinking_tokens"]) + int(cfg["budget"]["reply_reserve"])
        tok = AutoTokenizer.from_pretrained(str(arms[first]))
        fmt, _ = resolve("auto", tok, arms[first])
        prompts = {t.id: render_prompt(tok, build_messages(t), fmt, thinking=True) for t in tasks}  # as livethink
        params = {"max_tokens": cap, "temperature": cfg["sampling"]["temperature"], "top_p": cfg["sampling"]["top_p"]}
        server = vllm_server(arms[first], workdir)
        try:
            c = Client(server.url, "vllm", dl, prompts, params)
            vl = []
            for i, rate in enumerate([*rates, over_rate]):
                outs, wall = asyncio.run(open_loop(c, tasks, rate, args.duration, args.seed + i, "vllm"))
                vl.append({"rate": rate, "all": summarize(outs, dl, wall)})
                print(json.dumps({"vllm_rate": rate, **vl[-1]["all"]}), flush=True)
            if not args.skip_sweep:
                c = Client(server.url, "vllm", max(deadlines), prompts, params)
                alone = asyncio.run(one_at_a_time(c, tasks[:n_sweep], None, "vsu"))
                time.sleep(SETTLE_S)
                loaded, _ = asyncio.run(open_loop(c, tasks, sweep_rate, math.inf, args.seed + 200, "sweep",
                                                  max_requests=n_sweep * len(names)))
                for load_kind, outs, rate in (("unloaded", alone, None), ("loaded", loaded, sweep_rate)):
                    for d in deadlines:
                        sweep_rows.append(sweep_row("vllm", first, load_kind, rate, d, outs))
                        print(json.dumps({"sweep": "vllm", "load": load_kind, "deadline_ms": d, **sweep_rows[-1]}),
                              flush=True)
        finally:
            server.close()
        result["vllm"] = {"model": first, "max_tokens": cap, "startup_s": round(server.startup_s, 1), "load": vl}
    if not args.skip_sweep:
        result["deadline_sweep"] = {"deadlines_ms": deadlines, "requests_per_model": n_sweep,
                                    "loaded_requests": n_sweep * len(names), "load_rate": sweep_rate,
                                    "load_rate_source": sweep_rate_source, "settle_s": SETTLE_S, "rows": sweep_rows}

    result["environment"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "loadavg_before": loadavg_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                             "total_s": round(time.monotonic() - t_start, 1)}
    result["command"] = "python benchmarks/serve_load.py " + " ".join(argv if argv is not None else sys.argv[1:])
    md = write_report(result, args.out, args.tag)
    shutil.rmtree(workdir, ignore_errors=True)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
