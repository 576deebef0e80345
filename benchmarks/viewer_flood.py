"""One viewer floods the server: the per-viewer rate limit refuses it, and every other viewer is served as before.

    .venv/bin/python benchmarks/viewer_flood.py [--runs runs/tiny] [--split holdout] [--rate 1] [--duration 120]
        [--flood-rps 20] [--limit-rps 2]

``make demo``'s server (vLLM, the RFT student of ``--runs``) with ``limits.per_viewer_rps: --limit-rps`` (burst
the same). The other viewers: open-loop Poisson arrivals at ``--rate`` for ``--duration`` s, each a different
viewer asking a task of ``--split`` at the product's 1,000 ms, judged by the claim-checking rubric. Three phases on
the same server, with the same arrivals and tasks (paired request for request): **unflooded**, **flooded** (one
viewer sends ``--flood-rps`` requests per second beside them, open loop) and **unflooded again** (the drift
between two quiet runs, the noise floor). Per phase: the others' goodput (correct, not the fallback, within the
deadline by the client's clock, of requests sent), their in-time share and refusals; the flooder's statuses and
whether every 429 names ``limits.per_viewer_rps``. Target (issue #59): the others' goodput flooded within 1 point
of unflooded. Writes ``benchmarks/results/viewer_flood.{json,md,png}``; a run on ``holdout`` is logged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the serving helpers, by name

from serve_common import OUT, RunRecord, pct, runs_label, save_figure, trained_student, write_outputs  # noqa: E402
from serve_load_client import Client, Outcome, live_body, livethink_server, open_loop  # noqa: E402

from livethink.eval.intervals import paired_bootstrap  # noqa: E402

PHASES = ("unflooded", "flooded", "unflooded again")


async def flood(url: str, task: Any, rps: float, duration_s: float, deadline_ms: int) -> list[dict[str, Any]]:
    """One viewer, ``rps`` requests per second (open loop) for ``duration_s``: status and the limit a 429 names."""
    rows: list[dict[str, Any]] = []
    body = live_body(task, "flooder", deadline_ms)
    async with httpx.AsyncClient(base_url=url, timeout=deadline_ms / 1000 + 10) as client:

        async def one() -> None:
            try:
                r = await client.post("/v1/livestream/reply", json=body)
            except httpx.HTTPError as exc:
                rows.append({"status": 0, "error": str(exc)})
                return
            limit = r.json().get("limit") if r.status_code == 429 else None
            rows.append({"status": r.status_code, "limit": limit, "retry_after": r.headers.get("retry-after")})

        tasks, t0 = [], time.monotonic()
        for k in range(int(rps * duration_s)):
            await asyncio.sleep(max(0.0, t0 + k / rps - time.monotonic()))
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return rows


def others(outs: list[Outcome], deadline_ms: int) -> dict[str, Any]:
    good = [int(o.status == 200 and not o.fallback and bool(o.correct) and o.client_ms <= deadline_ms) for o in outs]
    ok = [o for o in outs if o.status == 200]
    return {"requests": len(outs), "answered": len(ok), "refused": sum(o.status == 429 for o in outs),
            "errors": sum(o.status not in (200, 429) for o in outs),
            "in_time": sum(o.client_ms <= deadline_ms for o in ok), "good": sum(good),
            "goodput": round(sum(good) / len(outs), 4) if outs else None,
            "answered_p99_ms": pct([o.client_ms for o in ok], 99), "good_flags": good}  # fmt: skip


async def run(url: str, args: argparse.Namespace, tasks: list[Any]) -> dict[str, Any]:
    c = Client(url, "livethink", args.deadline_ms)
    out: dict[str, Any] = {}
    for k, phase in enumerate(PHASES):
        quiet = open_loop(c, tasks, args.rate, args.duration, seed=5, tag=f"viewer{k}")
        if phase == "flooded":
            (outs, _), flooder = await asyncio.gather(
                quiet, flood(url, tasks[0], args.flood_rps, args.duration, args.deadline_ms))
        else:
            (outs, _), flooder = await quiet, []
        out[phase] = {"others": others(outs, args.deadline_ms), "flooder": flooder}
        print(f"{phase}: goodput {out[phase]['others']['goodput']:.1%}", flush=True)
    return out


def markdown(r: dict[str, Any]) -> str:
    rows = ["| phase | other viewers' requests | answered | in time | refused (429) | errors | answered p99 | **goodput** "
            "| flooder: sent / 200 / 429 naming the limit |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for phase in PHASES:
        o, f = r["phases"][phase]["others"], r["phases"][phase]["flooder"]
        fl = "—" if not f["sent"] else f"{f['sent']} / {f['ok']} / {f['limited']}"
        rows.append(f"| {phase} | {o['requests']} | {o['answered']} | {o['in_time']} | {o['refused']} | {o['errors']} | "
                    f"{o['answered_p99_ms']} ms | **{o['goodput']:.1%}** | {fl} |")
    d, n = r["paired"]["flooded"], r["paired"]["unflooded again"]
    met = abs(d["difference"]) <= 0.01
    return "\n".join([
        "# One viewer floods the server: the others' goodput", "",
        f"Command: `{r['command']}`  ",
        f"Server: `configs/tiny/serve.yaml`, the RFT student of `{r['runs']}` on vLLM, `limits.per_viewer_rps: "
        f"{r['limit_rps']:g}` (burst {r['limit_rps']:g}). Other viewers: Poisson arrivals at {r['rate']:g} req/s for "
        f"{r['duration_s']:g} s, tasks of `{r['split']}`, deadline {r['deadline_ms']:,} ms by the client's clock, the same "
        f"arrivals and tasks in each phase; the flooder: {r['flood_rps']:g} req/s.  ",
        f"Machine: {r['environment']}; load average (1, 5, 15 min) before {r['loadavg_before']}, after "
        f"{r['loadavg_after']}; {r['wall_s']:.0f} s.", "",
        *rows, "",
        f"Others' goodput, flooded − unflooded: **{100 * d['difference']:+.1f} points** [{100 * d['ci'][0]:+.1f}, "
        f"{100 * d['ci'][1]:+.1f}] (paired bootstrap, 95%); two unflooded runs differ by {100 * n['difference']:+.1f} "
        f"[{100 * n['ci'][0]:+.1f}, {100 * n['ci'][1]:+.1f}].", "",
        "## Target (issue #59)", "",
        f"- a flooder at {r['flood_rps']:g} req/s over a limit of {r['limit_rps']:g} req/s gets 429 naming the limit beyond "
        f"its bucket: {'met' if r['flood_limited_ok'] else 'MISSED'}",
        f"- every other viewer's goodput within 1 point of an unflooded run: {100 * d['difference']:+.1f} points, "
        + ("met" if met else "MISSED"), "",
        "![goodput per phase](viewer_flood.png)", "",
    ])  # fmt: skip


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    vals = [100 * r["phases"][p]["others"]["goodput"] for p in PHASES]
    ax.bar(PHASES, vals, color=["tab:blue", "tab:orange", "tab:blue"])
    ax.set_ylabel("other viewers' goodput (%)")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny", help="make demo's runs folder")
    p.add_argument("--data", type=Path, default=ROOT / "artifacts/tiny/data")
    p.add_argument("--split", default="holdout", choices=("validation", "holdout"))
    p.add_argument("--rate", type=float, default=1.0)
    p.add_argument("--duration", type=float, default=120.0)
    p.add_argument("--flood-rps", type=float, default=20.0)
    p.add_argument("--limit-rps", type=float, default=2.0)
    p.add_argument("--deadline-ms", type=int, default=1000)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    student = trained_student(p, args.runs)
    from livethink.data.io import read_tasks

    tasks = read_tasks(args.data / f"{args.split}.jsonl")
    sets = ["models=" + json.dumps({"rft": {"path": str(student)}}), "default_model=rft",
            f"limits.per_viewer_rps={args.limit_rps}", f"limits.per_viewer_burst={max(1.0, args.limit_rps)}"]  # fmt: skip
    record = RunRecord("viewer_flood.py", argv)
    server = livethink_server(sets, Path(tempfile.mkdtemp(prefix="viewer-flood-")), "server")
    try:
        phases = asyncio.run(run(server.url, args, tasks))
    finally:
        server.close()
    for ph in phases.values():
        f = ph["flooder"]
        ph["flooder"] = {"sent": len(f), "ok": sum(x["status"] == 200 for x in f),
                         "limited": sum(x["status"] == 429 and x["limit"] == "limits.per_viewer_rps" for x in f),
                         "other": sum(x["status"] not in (200, 429) or (x["status"] == 429 and x["limit"] !=
                                                                          "limits.per_viewer_rps") for x in f)}  # fmt: skip
    base = phases["unflooded"]["others"]["good_flags"]
    paired = {}
    for phase in ("flooded", "unflooded again"):
        c = paired_bootstrap(np.asarray(phases[phase]["others"]["good_flags"], float), np.asarray(base, float))
        paired[phase] = {"difference": round(c.difference, 4), "ci": [round(c.low, 4), round(c.high, 4)]}
    fl = phases["flooded"]["flooder"]
    result = {
        **record.fields(), "runs": runs_label(args.runs), "split": args.split, "rate": args.rate, "duration_s": args.duration, "flood_rps": args.flood_rps,
        "limit_rps": args.limit_rps, "deadline_ms": args.deadline_ms, "phases": phases, "paired": paired,
        "flood_limited_ok": fl["limited"] > 0 and fl["other"] == 0
                            and fl["ok"] <= args.limit_rps * args.duration + max(1.0, args.limit_rps) + 1,
    }  # fmt: skip
    write_outputs(args.out, "viewer_flood", result, markdown(result), plot)
    from livethink.eval.holdout_log import record_holdout_eval

    n = int(phases["unflooded"]["others"]["requests"])
    record_holdout_eval(args.split, command=result["command"], models=[str(student)], n_tasks=min(n, len(tasks)),
                        computed=["goodput"], extra={"benchmark": "viewer_flood"})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
