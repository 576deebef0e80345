"""Serving load benchmark of the deployment users run: the `make demo` server (two A/B arms, trained students),
with latency by the client's clock, goodput per arm, a cold start, and plain vLLM as the reference.

    .venv/bin/python benchmarks/serve_load.py [--runs runs/tiny] [--data artifacts/tiny/data]
        [--rates 4,8,16] [--duration 15] [--deadline-ms 1000] [--unloaded 30] [--skip-vllm]

Scenarios, one server at a time on 127.0.0.1:

1. **deployment**: ``livethink serve --config configs/tiny/serve.yaml`` with ``models.rft`` = the RFT student,
   ``models.drpo`` = the compressed student and the ``drpo_vs_rft`` experiment, as ``livethink.demo_job``
   starts it. First each arm alone, one request at a time (``--unloaded`` held-out questions per arm, the arm
   forced): the unloaded goodput. Then open-loop Poisson arrivals of ``POST /v1/livestream/reply`` (viewers
   hashed to arms by the experiment) at each ``--rates`` for ``--duration`` s, then 3x the sustainable rate.
2. **cold**: a freshly started single-student server with a student that never stops (untrained weights:
   thinks until forced, replies until cut) hit at once with the overload rate, then again once warm.
3. **plain vLLM**: ``python -m vllm.entrypoints.openai.api_server`` with the RFT student, the same prompt text
   (``/v1/completions``), the same token cap (thinking cap + reply reserve) and sampling, at the same rates.

Per rate (and per arm): requests, accepted, 429, fallback, errors, hangs (no answer within deadline + 10 s);
client latency p50/p99/max; the server's own figure beside it and the largest gap; share of accepted within
the deadline by the client's clock; goodput = correct AND helpful (``RubricJudge``) within the deadline by the
client's clock, as a share of the requests sent. Sustainable rate per arm: the highest rate with ≥ 99.9% of
accepted replies within the deadline, p99 ≤ deadline + 100 ms, and goodput ≥ 90% of the arm's unloaded one.
Results: ``benchmarks/results/serve_load.{json,md}``. Loopback only; every phase is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from livethink.server_process import LOOPBACK, ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results"
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}


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
    good: bool = False  # correct and helpful (judged after the load, not in the client's event loop)
    data: dict[str, Any] = field(default_factory=dict)
    task: Any = None
    reply: str | None = None


def live_body(task: Any, viewer: str, deadline_ms: int, arm: str | None = None) -> dict[str, Any]:
    body = {"viewer_id": viewer, "product_docs": [d.model_dump() for d in task.product_docs],
            "question": task.question, "history": [t.model_dump() for t in task.history], "deadline_ms": deadline_ms}
    return {**body, "arm": arm} if arm else body


class Client:
    """Sends one request and judges it. ``kind``: livethink (livestream endpoint) or vllm (completions)."""

    def __init__(self, url: str, kind: str, deadline_ms: int, prompts: dict[str, str] | None = None,
                 vllm_params: dict[str, Any] | None = None):
        from livethink.rewards.judge import RubricJudge

        self.url, self.kind, self.deadline_ms = url, kind, deadline_ms
        self.prompts, self.vllm_params = prompts or {}, vllm_params or {}
        self.judge = RubricJudge()

    async def one(self, client: httpx.AsyncClient, task: Any, viewer: str, arm: str | None = None) -> Outcome:
        from livethink.rewards.parse import parse_completion

        t0 = time.monotonic()
        try:
            if self.kind == "livethink":
                r = await client.post("/v1/livestream/reply", json=live_body(task, viewer, self.deadline_ms, arm))
            else:
                r = await client.post("/v1/completions",
                                      json={"model": "student", "prompt": self.prompts[task.id], **self.vllm_params})
            content = r.content
            ms = (time.monotonic() - t0) * 1000
        except httpx.HTTPError:
            return Outcome(0, (time.monotonic() - t0) * 1000, arm)
        o = Outcome(r.status_code, ms, arm)
        if r.status_code == 429 and self.kind == "livethink":
            error = json.loads(content)
            o.arm = error.get("arm") or arm  # the A/B arm the refused viewer was assigned
            o.fallback_reason = (error.get("error") or {}).get("reason") or error.get("reason")  # why it was shed
        if r.status_code != 200:
            return o
        data = json.loads(content)
        if self.kind == "livethink":
            o.arm, o.server_ms = data.get("arm") or arm, data["timings"]["e2e_ms"]
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
                o.good = self.judge.score(o.task, o.reply).accepted
        return outs


async def open_loop(c: Client, tasks: list, rate: float, duration_s: float, seed: int, tag: str,
                    max_requests: int = 2000) -> tuple[list[Outcome], float]:
    """Poisson arrivals for ``duration_s``: request i leaves at its time whatever happened to the others."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=max_requests))
    arrivals = arrivals[arrivals < duration_s]
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=500)
    async with httpx.AsyncClient(base_url=c.url, timeout=c.deadline_ms / 1000 + 10, limits=limits) as client:
        await client.get("/health")  # the client's own first-use costs are not the server's

        async def at(i: int, when: float, t0: float) -> Outcome:
            await asyncio.sleep(max(0.0, t0 + when - time.monotonic()))
            return await c.one(client, tasks[i % len(tasks)], f"{tag}-{seed}-{i}")

        t0 = time.monotonic()
        outs = await asyncio.gather(*(at(i, float(w), t0) for i, w in enumerate(arrivals)))
        wall = time.monotonic() - t0
    return c.judge_all(list(outs)), wall


async def one_at_a_time(c: Client, tasks: list, arm: str | None, tag: str) -> list[Outcome]:
    async with httpx.AsyncClient(base_url=c.url, timeout=c.deadline_ms / 1000 + 10) as client:
        await client.get("/health")
        outs = [await c.one(client, t, f"{tag}-{i}", arm) for i, t in enumerate(tasks)]
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
    good = [o for o in within if o.good]
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
        "goodput_share": round(len(good) / n, 4) if n else None,
        "goodput_rps": round(len(good) / wall_s, 2) if wall_s else None,
    }


def by_arm(outs: list[Outcome], deadline_ms: int, wall_s: float | None) -> dict[str, dict[str, Any]]:
    arms = sorted({o.arm for o in outs if o.arm})
    return {a: summarize([o for o in outs if o.arm == a], deadline_ms, wall_s) for a in arms}


def meets_latency(s: dict[str, Any], deadline_ms: int) -> bool:
    p99 = s["client_ms"]["p99"]
    return (s["within_deadline_of_accepted"] or 0) >= 0.999 and p99 is not None and p99 <= deadline_ms + 100 \
        and not s["hangs_or_transport_errors"]


# -- report -----------------------------------------------------------------------------------------------
def _row(label: str, s: dict[str, Any]) -> str:
    c, sv, g = s["client_ms"], s["server_ms"], s["gap_ms"]
    w = s["within_deadline_of_accepted"]
    return (f"| {label} | {s['requests']} | {s['accepted']} | {s['rejected_429']} ({s.get('rejected_below_min_thinking', '–')}) | {s['fallback']} "
            f"({s['fallback_below_min_thinking']}) | {s['hangs_or_transport_errors']} | {s['errors']} | "
            f"{c['p50']} / {c['p99']} / {c['max']} | {sv['p50']} / {sv['p99']} | {g['p50']} / {g['max_abs']} | "
            f"{'-' if w is None else f'{100 * w:.1f}%'} | {100 * (s['goodput_share'] or 0):.1f}% |")


HEADER = ("| scenario | sent | ok | 429 (below floor) | fallback (below floor) | hang | err | client p50 / p99 / max ms | "
          "server p50 / p99 ms | gap p50 / max ms | within deadline (accepted, client) | goodput (of sent) |\n"
          "|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|")


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
        lines += ["", "## Deployment: two arms, A/B on", "", f"Arms: {d['arms']}", "",
                  "### Unloaded (one request at a time, arm forced)", "", HEADER]
        for arm, s in d["unloaded"].items():
            lines.append(_row(f"{arm} alone", s))
        lines += ["", "### Poisson load (viewers hashed to arms)", "", HEADER]
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
        lines += ["", f"## Plain vLLM OpenAI server, same model (RFT) and token cap ({v['max_tokens']})", "", HEADER]
        for r in v["load"]:
            lines.append(_row(f"{r['rate']} req/s", r["all"]))
    lines += ["", "## Targets", ""] + [f"- {t}" for t in result["targets"]] + [""]
    lines += ["goodput = correct AND helpful by `RubricJudge`, not the fallback, within the deadline by the client's "
              "clock, as a share of all requests sent (refused ones count as misses). 'gap' = client − server "
              "latency of the same reply.", ""]
    (out / f"{stem}.md").write_text("\n".join(lines))
    return out / f"{stem}.md"


# -- main -------------------------------------------------------------------------------------------------
def untrained_student(workdir: Path) -> Path:
    from livethink.models.student import untrained_student as build

    return build(workdir / "untrained-student")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny", help="where rft/final and grpo/drpo/final are")
    p.add_argument("--rft", type=Path, help="RFT student (default: RUNS/rft/final)")
    p.add_argument("--drpo", type=Path, help="compressed student (default: RUNS/grpo/drpo/final)")
    p.add_argument("--data", type=Path, default=ROOT / "artifacts/tiny/data")
    p.add_argument("--split", default="validation", choices=["validation", "test"])
    p.add_argument("--rates", default="4,8,16")
    p.add_argument("--duration", type=float, default=15.0)
    p.add_argument("--deadline-ms", type=int, default=1000)
    p.add_argument("--unloaded", type=int, default=30, help="questions per arm, one at a time")
    p.add_argument("--cold-rate", type=float, help="default: 3x the deployment's sustainable rate")
    p.add_argument("--skip-vllm", action="store_true")
    p.add_argument("--skip-cold", action="store_true")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra config override for the livethink servers (e.g. engine.kind=transformers)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--tag", default="", help="results go to serve_load_<tag>.{json,md} (e.g. another deadline)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-only", action="store_true",
                   help="only rewrite the Markdown (and target verdicts) of OUT/serve_load[_TAG].json; no serving")
    args = p.parse_args(argv)
    if args.report_only:
        stem = f"serve_load_{args.tag}" if args.tag else "serve_load"
        src = args.out / f"{stem}.json"
        if not src.is_file():
            p.error(f"--report-only: {src} does not exist (run the benchmark first)")
        print(write_report(json.loads(src.read_text()), args.out, args.tag).read_text())
        return 0

    from livethink.data.io import read_tasks

    t_start = time.monotonic()
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    workdir = Path(tempfile.mkdtemp(prefix="serve-load-"))
    notes: list[str] = []
    rft = args.rft or args.runs / "rft/final"
    drpo = args.drpo or args.runs / "grpo/drpo/final"
    if not (rft / "config.json").is_file():
        p.error(f"--rft {rft}: not a model directory (run `make demo` first)")
    arms = {"rft": rft}
    if (drpo / "config.json").is_file():
        arms["drpo"] = drpo
    else:
        notes.append(f"{drpo} does not exist (the compressed student is not trained yet): the deployment runs the "
                     "RFT arm only, without the experiment.")
    tasks = read_tasks(args.data / f"{args.split}.jsonl")
    rates = [float(r) for r in args.rates.split(",")]
    dl = args.deadline_ms
    result: dict[str, Any] = {"deadline_ms": dl, "notes": notes, "split": args.split}

    # 1. the deployment
    sets = [f"models.rft.path={rft}", *args.set]
    if "drpo" in arms:
        sets += [f"models.drpo={{path: {drpo}}}",
                 f"experiment={{file: {ROOT / 'configs/ab/drpo_vs_rft.yaml'}, store: sqlite:///{workdir / 'ab.db'}}}"]
    server = livethink_server(sets, workdir, "deployment")
    dep: dict[str, Any] = {"arms": {k: str(v) for k, v in arms.items()}, "startup_s": round(server.startup_s, 1)}
    try:
        c = Client(server.url, "livethink", dl)
        dep["models"] = httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"]
        unloaded = {}
        for arm in arms:
            outs = asyncio.run(one_at_a_time(c, tasks[: args.unloaded], arm if "drpo" in arms else None, f"u-{arm}"))
            for o in outs:
                o.arm = o.arm or arm
            unloaded[arm] = summarize(outs, dl)
            print(json.dumps({"unloaded": arm, **unloaded[arm]}), flush=True)
        dep["unloaded"] = unloaded
        load = []
        for i, rate in enumerate(rates):
            outs, wall = asyncio.run(open_loop(c, tasks, rate, args.duration, args.seed + i, "load"))
            if "drpo" not in arms:
                for o in outs:
                    o.arm = o.arm or "rft"
            row = {"rate": rate, "all": summarize(outs, dl, wall), "arms": by_arm(outs, dl, wall)}
            load.append(row)
            print(json.dumps({"rate": rate, **row["all"]}), flush=True)
        sustainable: dict[str, Any] = {}
        for arm in arms:
            base = unloaded[arm]["goodput_share"] or 0
            ok = [r["rate"] for r in load if arm in r["arms"] and meets_latency(r["arms"][arm], dl)
                  and (r["arms"][arm]["goodput_share"] or 0) >= 0.9 * base]
            lat = [r["rate"] for r in load if arm in r["arms"] and meets_latency(r["arms"][arm], dl)]
            sustainable[arm] = {"rate": max(ok) if ok else None, "latency_only_rate": max(lat) if lat else None,
                                "unloaded_goodput": base}
        lat_all = [r["rate"] for r in load if meets_latency(r["all"], dl)]
        over_rate = 3 * (max(lat_all) if lat_all else min(rates))
        outs, wall = asyncio.run(open_loop(c, tasks, over_rate, args.duration, args.seed + 99, "over"))
        if "drpo" not in arms:
            for o in outs:
                o.arm = o.arm or "rft"
        load.append({"rate": over_rate, "overload": True, "all": summarize(outs, dl, wall),
                     "arms": by_arm(outs, dl, wall)})
        print(json.dumps({"rate": over_rate, "overload": True, **load[-1]["all"]}), flush=True)
        dep["load"], dep["sustainable"] = load, sustainable
        dep["controller"] = httpx.get(f"{server.url}/v1/admin/status", timeout=10).json()["controller"]
    finally:
        server.close()
    result["deployment"] = dep
    # 2. cold start with a never-stopping student
    if not args.skip_cold:
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

    # 3. plain vLLM, same model and token cap
    if not args.skip_vllm:
        import yaml
        from transformers import AutoTokenizer

        from livethink.data.prompt import build_messages, render_prompt
        from livethink.data.reasoning_format import resolve

        cfg = yaml.safe_load((ROOT / "configs/tiny/serve.yaml").read_text())
        cap = int(cfg["budget"]["max_thinking_tokens"]) + int(cfg["budget"]["reply_reserve"])
        tok = AutoTokenizer.from_pretrained(str(rft))
        fmt, _ = resolve("auto", tok, rft)
        prompts = {t.id: render_prompt(tok, build_messages(t), fmt, thinking=True) for t in tasks}  # as livethink
        params = {"max_tokens": cap, "temperature": cfg["sampling"]["temperature"], "top_p": cfg["sampling"]["top_p"]}
        server = vllm_server(rft, workdir)
        try:
            c = Client(server.url, "vllm", dl, prompts, params)
            vl = []
            for i, rate in enumerate([*rates, over_rate]):
                outs, wall = asyncio.run(open_loop(c, tasks, rate, args.duration, args.seed + i, "vllm"))
                vl.append({"rate": rate, "all": summarize(outs, dl, wall)})
                print(json.dumps({"vllm_rate": rate, **vl[-1]["all"]}), flush=True)
        finally:
            server.close()
        result["vllm"] = {"max_tokens": cap, "startup_s": round(server.startup_s, 1), "load": vl}

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
