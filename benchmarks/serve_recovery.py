"""Recovery and deadline use of the `make demo` deployment: the idle estimate against the measured decode time,
a burst and what follows it, and how much of the deadline forced replies use, all by the client's clock.

    .venv/bin/python benchmarks/serve_recovery.py [--runs runs/tiny] [--data artifacts/tiny/data]
        [--burst-s 15] [--after-s 30] [--forced 40] [--forced-deadline-ms 1000]

1. **idle decode**: the deployment as ``livethink.demo_job`` starts it (two arms, the ``drpo_vs_rft`` experiment
   at its arms' 2,500 ms). After warm-up, the controller's idle per-token estimate (``/v1/admin/status``) is read,
   then each model decodes a few long chat replies one at a time, streamed token by token: the client's
   inter-token time is the measured idle decode time.
2. **sustainable rate**: a closed loop of ``--sustain-viewers`` viewers for ``--sustain-s``; the rate of replies
   answered within the deadline (the deployment's capacity at its deadlines).
3. **burst and recover**: one-at-a-time requests (before), Poisson arrivals at 3x the sustainable rate for
   ``--burst-s`` (during), then one request at a time for ``--after-s`` (after), with ``/health`` and the
   estimates read along the way. Target: ≥ 99% of the requests from 5 s after the burst answered.
4. **forced replies**: the deployment restarted with ``endpoints.livestream.below_min_thinking=answer``; per arm
   ``--forced`` held-out questions one at a time at ``--forced-deadline-ms``. Share of the deadline used (client
   e2e / deadline), planned vs actual completion, goodput (rubric judge). Targets for the replies whose thinking
   the deadline ended (not the arm's own ``thinking_budget``, nor the model itself): p50 ≥ 85%, p99 ≤ 100%.

Results: ``benchmarks/results/serve_recovery.{json,md,png}``. Loopback only; every phase is bounded. Run it
with nothing else heavy on the machine: the load average before and after is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from serve_common import OUT, RFT_STUDENT, ROOT, SERVED_STUDENT, pct
from serve_load_client import live_body, livethink_server
from serve_recovery_report import write_report

from livethink.eval.goodput import ViewerOutcome, summarize

CHAT = [{"role": "user", "content": "Tell me everything about the hoodie, its sizes, colours and price."}]


# -- requests -------------------------------------------------------------------------------------------
async def livestream(client: httpx.AsyncClient, task: Any, viewer: str, deadline_ms: int | None,
                     arm: str | None = None) -> dict[str, Any]:
    """One livestream request; what the client saw, judged."""
    from livethink.ab_test.simulate import judge_reply

    body = live_body(task, viewer, deadline_ms or 0, arm)
    if deadline_ms is None:
        body.pop("deadline_ms")
    t0 = time.monotonic()
    try:
        r = await client.post("/v1/livestream/reply", json=body)
        status, data = r.status_code, r.json()
    except (httpx.HTTPError, ValueError):
        status, data = None, {}
    row: dict[str, Any] = {"sent": t0, "status": status, "client_ms": (time.monotonic() - t0) * 1000,
                           "arm": data.get("arm") or arm}
    if status == 200:
        row.update(deadline_ms=data["deadline_ms"], fallback=data["fallback"], server_ms=data["timings"]["e2e_ms"],
                   planned_ms=data["timings"].get("planned_ms"), forced=data["forced_end_of_thinking"],
                   cut=data["cut_at_deadline"], reasoning_tokens=data["tokens"]["reasoning"],
                   reply_tokens=data["tokens"]["reply"], thinking_cap=(data.get("budget") or {}).get("thinking_cap"))
        row["correct"] = judge_reply(task, data["reply"])[0] if not data["fallback"] else False
    elif status == 429:
        row["reason"] = data.get("reason")
    return row


def outcome(row: dict[str, Any], deadline_ms: float) -> ViewerOutcome:
    return ViewerOutcome(row["status"], row["client_ms"], row.get("deadline_ms", deadline_ms),
                         bool(row.get("fallback")), row.get("correct"))


async def idle_decode(url: str, models: list[str], n: int = 4, tokens: int = 160) -> dict[str, Any]:
    """Per model: the controller's idle estimate first, then the client's inter-token time of streamed replies."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        status = (await client.get("/v1/admin/status")).json()["controller"]
        out = {}
        for model in models:
            gaps: list[float] = []
            for i in range(n):
                body = {"model": model, "messages": CHAT, "stream": True, "max_tokens": tokens, "ignore_eos": True,
                        "seed": i, "deadline_ms": 30_000}
                stamps = []
                async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: {"):
                            stamps.append(time.monotonic())
                gaps += list(np.diff(stamps[2:]))  # after the role chunk and the first token
            measured = float(np.median(gaps) * 1000)
            estimate = status[model]["idle_tpot_ms"]
            out[model] = {"measured_idle_tpot_ms": round(measured, 3), "estimated_idle_tpot_ms": estimate,
                          "relative_error": round(estimate / measured - 1, 4), "tokens_timed": len(gaps)}
    return out


async def closed_loop(url: str, tasks: list, viewers: int, seconds: float) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    t_end = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=40) as client:
        async def viewer(k: int) -> None:
            i = 0
            while time.monotonic() < t_end:
                rows.append(await livestream(client, tasks[(k * 997 + i) % len(tasks)], f"s{k}-{i}", None))
                i += 1

        t0 = time.monotonic()
        await asyncio.gather(*(viewer(k) for k in range(viewers)))
        wall = time.monotonic() - t0
    ok = [r for r in rows if r["status"] == 200 and r["client_ms"] <= r["deadline_ms"]]
    return {"viewers": viewers, "requests": len(rows), "answered_in_deadline": len(ok), "wall_s": round(wall, 2),
            "rate": round(len(ok) / wall, 3)}


async def burst_and_recover(url: str, tasks: list, rate: float, burst_s: float, after_s: float,
                            seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * burst_s * 3) + 10))
    arrivals = arrivals[arrivals < burst_s]
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
    health: list[dict[str, Any]] = []
    estimates: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, timeout=40, limits=limits) as client:
        async def look(t_ref: float) -> None:
            h = (await client.get("/health")).json()
            s = (await client.get("/v1/admin/status")).json()["controller"]
            health.append({"t": round(time.monotonic() - t_ref, 2), "status": h["status"], "reason": h.get("reason")})
            estimates.append({"t": round(time.monotonic() - t_ref, 2),
                              **{m: {"idle_tpot_ms": v["idle_tpot_ms"], "tpot_ms_by_load": v["tpot_ms_by_load"]}
                                 for m, v in s.items()}})

        before = [await livestream(client, tasks[i], f"pre-{i}", None) for i in range(8)]
        t0 = time.monotonic()

        async def at(i: int, when: float) -> dict[str, Any]:
            await asyncio.sleep(max(0.0, t0 + when - time.monotonic()))
            return await livestream(client, tasks[(100 + i) % len(tasks)], f"burst-{seed}-{i}", None)

        during = await asyncio.gather(*(at(i, float(w)) for i, w in enumerate(arrivals)))
        t_end = t0 + burst_s
        await asyncio.sleep(max(0.0, t_end - time.monotonic()))
        after = []
        i = 0
        while time.monotonic() < t_end + after_s:
            await look(t_end)
            row = await livestream(client, tasks[(1000 + i) % len(tasks)], f"post-{seed}-{i}", None)
            row["after_s"] = round(row["sent"] - t_end, 2)
            after.append(row)
            i += 1
        await look(t_end)
    late_start = [r for r in after if r["after_s"] >= 5.0]

    def share(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"requests": len(rows), "answered": sum(r["status"] == 200 for r in rows),
                "refused": sum(r["status"] == 429 for r in rows),
                "answered_share": round(sum(r["status"] == 200 for r in rows) / len(rows), 4) if rows else None}

    bins = {}
    for lo in range(0, int(after_s), 5):
        bins[f"{lo}-{lo + 5} s"] = share([r for r in after if lo <= r["after_s"] < lo + 5])
    return {"rate": round(rate, 3), "burst_s": burst_s, "before": share(before), "during": share(during),
            "after": share(after), "after_from_5s": share(late_start), "after_bins": bins, "health": health,
            "estimates": estimates, "after_rows": [{k: r[k] for k in ("after_s", "status", "client_ms")} for r in after]}


def deadline_forced(row: dict[str, Any], arm_cap: int | None) -> bool:
    """Thinking was ended by the deadline: forced, and either the plan's cap was below the arm's own cap or the
    time limit came before the cap (a few tokens short of it: the prefilled ones count towards the cap)."""
    if not row.get("forced"):
        return False
    cap = row["thinking_cap"] or 0
    return arm_cap is None or cap < arm_cap or row["reasoning_tokens"] < cap - 4


async def forced_replies(url: str, tasks: list, arms: dict[str, int | None], deadline_ms: int) -> dict[str, Any]:
    """``arms``: arm -> its own thinking cap (the experiment's ``thinking_budget``), to tell what ended thinking."""
    out = {}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await client.get("/health")
        for arm in arms:
            rows = [await livestream(client, t, f"f-{arm}-{i}", deadline_ms, arm) for i, t in enumerate(tasks)]
            ok = [r for r in rows if r["status"] == 200]
            used = [r["client_ms"] / deadline_ms for r in ok]
            forced = [r["client_ms"] / deadline_ms for r in ok if deadline_forced(r, arms[arm])]
            err = [r["client_ms"] - r["planned_ms"] for r in ok if r.get("planned_ms") is not None]
            err_forced = [r["client_ms"] - r["planned_ms"] for r in ok
                          if r.get("planned_ms") is not None and deadline_forced(r, arms[arm])]
            s = summarize(outcome(r, deadline_ms) for r in rows)
            out[arm] = {
                "requests": len(rows), "answered": len(ok), "forced": sum(bool(r["forced"]) for r in ok),
                "deadline_forced": len(forced), "arm_thinking_budget": arms[arm],
                "cut_at_deadline": sum(bool(r.get("cut")) for r in ok),
                "fallback": sum(bool(r.get("fallback")) for r in ok),
                "deadline_used": {q: pct(used, q, digits=None) for q in ("50", "90", "99")} | {"max": max(used) if used else None},
                "forced_deadline_used": {q: pct(forced, q, digits=None) for q in ("50", "90", "99")}
                | {"max": max(forced) if forced else None},
                "within_deadline": sum(u <= 1.0 for u in used),
                "plan_error_ms": {"p50": pct(err, 50, digits=None), "p90": pct(err, 90, digits=None)},
                "plan_error_deadline_forced_ms": {"p50": pct(err_forced, 50, digits=None), "p90": pct(err_forced, 90, digits=None)},
                "reasoning_tokens_mean": float(np.mean([r["reasoning_tokens"] for r in ok])) if ok else None,
                "reply_tokens_mean": float(np.mean([r["reply_tokens"] for r in ok])) if ok else None,
                "correct_share": s.correct / s.sent if s.sent else None,
                "goodput": s.goodput,
                "used_values": [round(u, 4) for u in used],
            }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny", help=f"where {RFT_STUDENT} and {SERVED_STUDENT} are")
    p.add_argument("--data", type=Path, default=ROOT / "artifacts/tiny/data")
    p.add_argument("--sustain-s", type=float, default=20.0)
    p.add_argument("--sustain-viewers", type=int, default=8, help="closed-loop viewers measuring capacity")
    p.add_argument("--burst-s", type=float, default=15.0)
    p.add_argument("--after-s", type=float, default=30.0)
    p.add_argument("--forced", type=int, default=100, help="held-out questions per arm at the forced deadline")
    p.add_argument("--forced-deadline-ms", type=int, default=1000)
    p.add_argument("--skip", default="", help="comma-separated phases to skip: idle, burst, forced")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-only", action="store_true", help="rewrite the Markdown and plot from the JSON")
    args = p.parse_args(argv)
    if args.report_only:
        write_report(json.loads((args.out / "serve_recovery.json").read_text()), args.out)
        print((args.out / "serve_recovery.md").read_text())
        return 0
    from livethink.data.io import read_tasks

    skip = set(filter(None, args.skip.split(",")))
    t_start = time.monotonic()
    load_before = [round(x, 2) for x in os.getloadavg()]
    rft, drpo = args.runs / RFT_STUDENT, args.runs / SERVED_STUDENT
    for path in (rft, drpo):
        if not (path / "config.json").is_file():
            p.error(f"--runs {args.runs}: {path} is not a model directory (run `make demo` first)")
    tasks = read_tasks(args.data / "test.jsonl")
    workdir = Path(tempfile.mkdtemp(prefix="serve-recovery-"))
    exp = ROOT / "configs/ab/drpo_vs_rft.yaml"
    sets = [f"models.rft.path={rft}", f"models.drpo={{path: {drpo}}}",
            f"experiment={{file: {exp}, store: sqlite:///{workdir / 'ab.db'}}}"]
    result: dict[str, Any] = {"command": " ".join(["benchmarks/serve_recovery.py", *(argv or sys.argv[1:])]),
                              "environment": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                                             f"{platform.python_version()}",
                              "forced_deadline_ms": args.forced_deadline_ms, "notes": []}
    server = livethink_server(sets, workdir, "deployment")
    try:
        if "idle" not in skip:
            time.sleep(12)  # past warm-up: the idle probes have run once
            result["idle_decode"] = asyncio.run(idle_decode(server.url, ["rft", "drpo"]))
            print(json.dumps(result["idle_decode"]), flush=True)
        if "burst" not in skip:
            result["sustainable"] = asyncio.run(closed_loop(server.url, tasks, args.sustain_viewers, args.sustain_s))
            rate = 3 * max(result["sustainable"]["rate"], 0.5)
            time.sleep(5)
            result["burst"] = asyncio.run(burst_and_recover(server.url, tasks, rate, args.burst_s, args.after_s,
                                                            args.seed))
            print(json.dumps({k: result["burst"][k] for k in ("before", "during", "after", "after_from_5s")}),
                  flush=True)
    finally:
        server.close()
    if "forced" not in skip:
        server = livethink_server([*sets, "endpoints.livestream.below_min_thinking=answer"], workdir, "forced")
        try:
            time.sleep(5)
            from livethink.ab_test.experiment import load_experiment

            caps = {a.name: a.budget.thinking_budget for a in load_experiment(exp).arms}
            result["forced"] = asyncio.run(forced_replies(server.url, tasks[: args.forced], caps,
                                                          args.forced_deadline_ms))
        finally:
            server.close()
    result["loadavg_before"], result["loadavg_after"] = load_before, [round(x, 2) for x in os.getloadavg()]
    result["wall_s"] = time.monotonic() - t_start
    write_report(result, args.out)
    print((args.out / "serve_recovery.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
