"""A rolling restart, or a frozen replica, of two replicas behind HAProxy under open-loop load: what the viewers
got, and the A/B log.

    .venv/bin/python benchmarks/rolling_restart.py [--scenario restart|freeze] [--rate 8] [--deadline-ms 1000]
        [--engine vllm] [--model runs/tiny/rft/final] [--before-s 10] [--freeze-s 20] [--after-s 10]

Two ``livethink serve`` replicas (``livethink.replicas.ReplicaSet``: HAProxy in front, a throwaway PostgreSQL
cluster as the shared A/B store, every request in a two-arm experiment) take open-loop Poisson arrivals of
``POST /v1/livestream/reply`` at ``--rate`` with the deadline ``--deadline-ms``, each with its own
``X-Request-Id``. After ``--before-s`` the set restarts one replica at a time (``ReplicaSet.rolling_restart``:
SIGTERM, the replica drains, exits, starts again, then the next); the load goes on until ``--after-s`` after the
last replica is back. ``--scenario freeze`` instead SIGSTOPs replica 0 for ``--freeze-s`` (``ReplicaSet.freeze``:
the kernel still accepts its connections, nothing answers them), then SIGCONTs it. Every answered reply gets a
click outcome posted through the front. Afterwards (the set stopped, so the writers have flushed) the store is read back. Reported, per phase (before, during, after):

- **failed**: a transport error or any status but 200 and 429 reaching the client (a freeze also allows 503: a
  replica that did not answer in time, refused by HAProxy); **late**: a 200 after the deadline by the client's
  clock; **held past the deadline**: any answer (200, 429, 503) after it; **refused**: 429 (admission control:
  the deadline cannot be met) and 503;
- **A/B events lost**: a reply (200 or 429) the client got without its response event in the store, and an
  outcome acknowledged (200) that is not in the store.

Targets (issue #59): 0 failed, 0 late, 0 lost; frozen, also none held past the deadline. Writes
``benchmarks/results/rolling_restart.{json,md,png}`` (``frozen_replica.*`` for a freeze).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the serving helpers, by name

from serve_common import OUT, RFT_STUDENT, RunRecord, pct, save_figure, write_outputs  # noqa: E402

EXPERIMENT = "name: rolling_ab\narms:\n  - {name: a, weight: 0.5, variant: rft}\n  - {name: b, weight: 0.5, variant: rft}\n"
DOCS = [{"product_id": "p1", "title": "Hoodie",
         "text": "Price: $39. Ships in 2 days. Free returns within 30 days. Colours: black, grey, navy."}]  # fmt: skip
OUTPUT = {"restart": "rolling_restart", "freeze": "frozen_replica"}  # the result files' name per --scenario
QUESTIONS = ("How much is the hoodie?", "When does it ship?", "Which colours are there?", "Can I return it?")


class Load:
    """Open-loop Poisson arrivals until ``stop`` is set; one row per request."""

    def __init__(self, url: str, rate: float, deadline_ms: int, seed: int) -> None:
        self.url, self.rate, self.deadline_ms = url, rate, deadline_ms
        self.rng = np.random.default_rng(seed)
        self.rows: list[dict[str, Any]] = []
        self.phase = "before"
        self.stop = asyncio.Event()
        self.t0 = time.monotonic()

    async def one(self, client: httpx.AsyncClient, i: int) -> None:
        rid, vid, phase = uuid.uuid4().hex, f"rr-viewer-{i}", self.phase
        body = {"viewer_id": vid, "question": QUESTIONS[i % len(QUESTIONS)], "product_docs": DOCS,
                "deadline_ms": self.deadline_ms}  # fmt: skip
        row: dict[str, Any] = {"i": i, "request_id": rid, "viewer_id": vid, "phase": phase,
                               "t": round(time.monotonic() - self.t0, 3)}  # fmt: skip
        t0 = time.perf_counter()
        try:
            r = await client.post("/v1/livestream/reply", json=body, headers={"X-Request-Id": rid})
            row["status"] = r.status_code
            data = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
            row["arm"] = data.get("arm")
            if r.status_code == 429:
                row["reason"] = data.get("reason")
        except httpx.HTTPError as exc:
            row["status"], row["error"] = 0, f"{type(exc).__name__}: {exc}"
        row["client_ms"] = (time.perf_counter() - t0) * 1000
        row["echoed_id"] = r.headers.get("x-request-id") if row["status"] else None
        self.rows.append(row)
        if row["status"] == 200:  # the viewer clicks: an outcome through the front, acknowledged or not
            event = {"event_id": f"rr-{i}-click", "viewer_id": vid, "experiment": "rolling_ab", "type": "click",
                     "request_id": rid}  # fmt: skip
            try:
                o = await client.post("/v1/ab/outcomes", json=event)
                row["outcome_status"] = o.status_code
                row["outcome_ack"] = o.json().get("status") if o.status_code == 200 else None
            except httpx.HTTPError as exc:
                row["outcome_status"], row["outcome_error"] = 0, str(exc)

    async def run(self) -> None:
        limits = httpx.Limits(max_connections=500, max_keepalive_connections=100)
        tasks: list[asyncio.Task] = []
        async with httpx.AsyncClient(base_url=self.url, timeout=self.deadline_ms / 1000 + 30, limits=limits) as c:
            await c.get("/health")  # the client's own first-use costs are not the server's (as serve_load does)
            i, t = 0, time.monotonic()
            while not self.stop.is_set():
                t += float(self.rng.exponential(1.0 / self.rate))
                await asyncio.sleep(max(0.0, t - time.monotonic()))
                tasks.append(asyncio.create_task(self.one(c, i)))
                i += 1
            await asyncio.gather(*tasks)


async def drive(rs: Any, args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[float], dict[str, float]]:
    load = Load(rs.url, args.rate, args.deadline_ms, seed=11)
    runner = asyncio.create_task(load.run())
    marks = {"start": load.t0}
    await asyncio.sleep(args.before_s)
    load.phase, marks["restart"] = "during", time.monotonic()
    if args.scenario == "freeze":
        rs.freeze(0)
        await asyncio.sleep(args.freeze_s)
        rs.thaw(0)
        took = [args.freeze_s]
    else:
        took = await asyncio.to_thread(rs.rolling_restart)
    load.phase, marks["restarted"] = "after", time.monotonic()
    await asyncio.sleep(args.after_s)
    load.stop.set()
    await runner
    marks["end"] = time.monotonic()
    return load.rows, took, {k: round(v - marks["start"], 1) for k, v in marks.items()}


def summarize(rows: list[dict[str, Any]], deadline_ms: int, missing_responses: set[str], missing_outcomes: set[str],
              allowed: tuple[int, ...]) -> dict[str, Any]:  # fmt: skip
    ok = [r for r in rows if r["status"] == 200]
    return {
        "requests": len(rows), "answered": len(ok), "refused_429": sum(r["status"] == 429 for r in rows),
        "refused_503": sum(r["status"] == 503 for r in rows), "failed": sum(r["status"] not in allowed for r in rows),
        "late": sum(r["client_ms"] > deadline_ms for r in ok),
        "held_past_deadline": sum(r["client_ms"] > deadline_ms for r in rows if r["status"]),
        "held_max_ms": round(max((r["client_ms"] for r in rows if r["status"]), default=0.0), 1),
        "answered_p50_ms": pct([r["client_ms"] for r in ok], 50), "answered_p99_ms": pct([r["client_ms"] for r in ok], 99),
        "outcomes_acknowledged": sum(r.get("outcome_status") == 200 for r in ok),
        "outcomes_not_acknowledged": sum(r.get("outcome_status") != 200 for r in ok),
        "responses_lost": sum(r["request_id"] in missing_responses for r in rows),
        "outcomes_lost": sum(f"rr-{r['i']}-click" in missing_outcomes for r in ok),
    }  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    frozen = result.get("scenario") == "freeze"
    head = ("| phase | requests | answered | refused (429 / 503) | failed | late | held past the deadline (slowest) "
            "| answered p50 / p99 | outcomes acknowledged | A/B events lost (responses / acknowledged outcomes) |")  # fmt: skip
    rows = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for phase, s in result["phases"].items():
        rows.append(f"| {phase} | {s['requests']} | {s['answered']} | {s['refused_429']} / {s.get('refused_503', 0)} | "
                    f"{s['failed']} | {s['late']} | {s.get('held_past_deadline', '–')} ({s.get('held_max_ms', '–')} ms) | "
                    f"{s['answered_p50_ms']} / {s['answered_p99_ms']} ms | {s['outcomes_acknowledged']} | "
                    f"{s['responses_lost']} / {s['outcomes_lost']} |")
    t = result["phases"]["all"]
    verdict = [f"failed {t['failed']} (target 0{', 503 allowed' if frozen else ''}): "
               f"{'met' if t['failed'] == 0 else 'MISSED'}",
               f"answered after the deadline {t['late']} (target 0): {'met' if t['late'] == 0 else 'MISSED'}",
               f"acknowledged A/B events lost {t['responses_lost'] + t['outcomes_lost']} (target 0): "
               + ("met" if t["responses_lost"] + t["outcomes_lost"] == 0 else "MISSED")]  # fmt: skip
    if frozen:
        verdict.append(f"any answer held past the deadline {t['held_past_deadline']} (target 0): "
                       f"{'met' if t['held_past_deadline'] == 0 else 'MISSED'}")
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(result["refused_reasons"].items())) or "none"
    event = (f"replica 0 was frozen (SIGSTOP) from {result['marks']['restart']} s to {result['marks']['restarted']} s"
             if frozen else f"the restart began at {result['marks']['restart']} s and ended at "
             f"{result['marks']['restarted']} s (each replica out of service "
             f"{', '.join(f'{s:.0f} s' for s in result['replica_out_s'])})")
    return "\n".join([
        "# A frozen replica under load" if frozen else "# A rolling restart of two replicas under load", "",
        f"Command: `{result['command']}`  ",
        f"Two `livethink serve` replicas ({result['engine']} engine, `{result['model']}`) behind HAProxy, A/B store "
        f"PostgreSQL; open-loop Poisson arrivals at {result['rate']:g} req/s, deadline {result['deadline_ms']:,} ms by the "
        f"client's clock; {event}.  ",
        f"Machine: {result['environment']}; load average (1, 5, 15 min) before {result['loadavg_before']}, after "
        f"{result['loadavg_after']}; {result['wall_s']:.0f} s.", "",
        *rows, "", f"Refused for: {reasons}.", "", "## Targets (issue #59)", "", *[f"- {v}" for v in verdict], "",
        f"![requests over time]({OUTPUT[result.get('scenario', 'restart')]}.png)", "",
    ])  # fmt: skip


def plot(result: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    colours = {200: "tab:green", 429: "tab:orange"}
    xs = np.array([r["t"] for r in rows])
    colours[503] = "tab:purple"
    for status, label in ((200, "answered"), (429, "refused (429)"), (503, "refused (503)"), (0, "other")):
        pick = [k for k, r in enumerate(rows) if (r["status"] == status if status else r["status"] not in colours)]
        ax.scatter(xs[pick], [rows[k]["client_ms"] for k in pick], s=5, c=colours.get(status, "tab:red"), label=label)
    ax.axhline(result["deadline_ms"], ls="--", c="grey", lw=0.8)
    ax.axvspan(result["marks"]["restart"], result["marks"]["restarted"], color="tab:blue", alpha=0.08,
               label="frozen" if result.get("scenario") == "freeze" else "restart")
    ax.set_xlabel("arrival (s)")
    ax.set_ylabel("client latency (ms)")
    ax.legend(fontsize=7, loc="upper right")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", default="restart", choices=tuple(OUTPUT))
    p.add_argument("--freeze-s", type=float, default=20.0, help="--scenario freeze: how long replica 0 is frozen")
    p.add_argument("--engine", default="vllm", choices=("vllm", "transformers"))
    p.add_argument("--model", type=Path, default=Path("runs/tiny") / RFT_STUDENT)
    p.add_argument("--rate", type=float, default=8.0)
    p.add_argument("--deadline-ms", type=int, default=1000)
    p.add_argument("--before-s", type=float, default=10.0)
    p.add_argument("--after-s", type=float, default=10.0)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    model = args.model if args.model.is_absolute() else ROOT / args.model
    if not (model / "config.json").exists():
        p.error(f"--model: no checkpoint at {model}; run `make demo` first")
    from livethink.ab_test.pg_cluster import LocalPostgres
    from livethink.ab_test.store import EventStore
    from livethink.replicas import ReplicaSet

    record = RunRecord("rolling_restart.py", argv)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        (tmp / "exp.yaml").write_text(EXPERIMENT)
        config = {"models": {"rft": {"path": str(model)}}, "default_model": "rft",
                  "engine": {"kind": args.engine, "kv_cache_gib": 1},
                  "auth": {"api_key_env": None, "admin_key_env": None},
                  "experiment": {"file": str(tmp / "exp.yaml")}, "server": {"log_level": "warning"}}  # fmt: skip
        with LocalPostgres(tmp / "pg") as pg:
            store = pg.create_database("rolling")
            with ReplicaSet(config, 2, tmp / "set", store=store) as rs:
                rows, took, marks = asyncio.run(drive(rs, args))
            with EventStore(store, create=False) as es:
                logged = {rid for (rid,) in es.fetch("rolling_ab", "response", ["request_id"])}
                outcomes = {eid for (eid,) in es.fetch("rolling_ab", "outcome", ["event_id"])}
    in_experiment = [r for r in rows if r["status"] in (200, 429) and r.get("arm")]
    missing_responses = {r["request_id"] for r in in_experiment} - logged
    acked = {f"rr-{r['i']}-click" for r in rows if r.get("outcome_status") == 200}
    missing_outcomes = acked - outcomes
    allowed = (200, 429, 503) if args.scenario == "freeze" else (200, 429)
    phases = {ph: summarize([r for r in rows if r["phase"] == ph], args.deadline_ms, missing_responses, missing_outcomes,
                            allowed) for ph in ("before", "during", "after")}  # fmt: skip
    phases["all"] = summarize(rows, args.deadline_ms, missing_responses, missing_outcomes, allowed)
    reasons: dict[str, int] = {}
    for r in rows:
        if r["status"] == 429:
            reasons[r.get("reason") or "unknown"] = reasons.get(r.get("reason") or "unknown", 0) + 1
    result = {
        **record.fields(), "scenario": args.scenario, "engine": args.engine, "model": str(args.model), "rate": args.rate, "deadline_ms": args.deadline_ms,
        "marks": marks, "replica_out_s": [round(s, 1) for s in took], "phases": phases, "refused_reasons": reasons,
        "in_experiment": len(in_experiment), "ids_echoed": sum(r.get("echoed_id") == r["request_id"] for r in rows if r["status"]),
        "failures": [{k: r.get(k) for k in ("i", "phase", "status", "error", "client_ms")}
                     for r in rows if r["status"] not in allowed][:20],
    }  # fmt: skip
    name = OUTPUT[args.scenario]
    write_outputs(args.out, name, result, markdown(result), lambda r, path: plot(r, rows, path),
                  data={**result, "rows": rows})
    held = phases["all"]["held_past_deadline"] if args.scenario == "freeze" else 0
    return 0 if phases["all"]["failed"] == 0 and phases["all"]["late"] == 0 and held == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
