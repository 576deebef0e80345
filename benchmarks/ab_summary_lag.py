"""Event-loop lag of the server while the A/B summary is requested every second over a large store (issue #58,
item 6: analysis out of the request path).

    .venv/bin/python benchmarks/ab_summary_lag.py [--events 1000000] [--duration-s 30] [--interval-s 1]
        [--no-thread-phase] [--results-dir benchmarks/results] [--out ab_summary_lag]

A SQLite store is filled with ``--events`` events of one experiment (exposures, responses and outcomes of
simulated viewers, written with ``executemany`` in batches: the rows the store would hold, without its per-event
validation). The server runs in this process: ``create_app`` served by uvicorn in a thread
(``tests/support/serve.py``'s ``ServerThread``) over the fault-injection ``SlowEngine``, with the experiment and
that store configured; its summaries are computed by the A/B summary worker (``livethink.ab_test.summary_worker``,
a child process). After a warm-up request (it starts the worker and computes the first summary), phases of
``--duration-s`` each:

1. **baseline**: nothing is requested;
2. **summary (worker)**: one client requests ``GET /v1/ab/experiments/{name}`` every ``--interval-s`` (the next
   request once the previous one answered), served as the server serves it: cached for 5 s, else recomputed in
   the worker while the event loop only awaits a future;
3. **summary (server thread)**, unless ``--no-thread-phase``: the same client on a benchmark route that computes
   the summary in a thread of the serving process (``asyncio.to_thread(experiment_summary, ...)``, the path
   before #58 item 6), for comparison.

Measured per phase: the event-loop lag (a task in the server's loop sleeps 5 ms and records how late it wakes:
p50, p99, max), the summary requests (status, latency, how many distinct summaries they got, i.e. computations)
and the CPU time of this process (the server and the client; the worker's is not in it).
Target (#58): lag p99 < 20 ms while the summary is requested every second over a 1,000,000-event store.

Results: ``<results-dir>/<out>.{json,md,png}`` (default ``benchmarks/results/ab_summary_lag.*``), with the load
average before and after (the machine is shared: a busy one shows in every phase). Loopback only; every phase is
bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from serve_common import OUT, ROOT, pct, untrained_student

sys.path.append(str(ROOT))  # tests.support (an installed checkout has it already; PYTHONPATH wins)

EXPERIMENT = "summary_lag"
EXPERIMENT_YAML = f"""
name: {EXPERIMENT}
arms:
  - {{name: control, weight: 0.5}}
  - {{name: treatment, weight: 0.5}}
primary_metric: order_rate
"""
TARGET_P99_MS = 20.0
BATCH = 50_000
HISTORY_S = 6 * 3600  # the events' timestamps span the last six hours


# -- the store ----------------------------------------------------------------------------------------------
def fill_store(path: Path, events: int, seed: int) -> dict[str, Any]:
    """Register the experiment, then write ``events`` rows straight into ``ab_events`` (``executemany`` in
    batches of ``BATCH``): per viewer an exposure, a response and, for every other viewer, an outcome."""
    import numpy as np

    from livethink.ab_test.experiment import load_experiment
    from livethink.ab_test.store import EventStore
    from livethink.ab_test.tables import events_table

    t0 = time.monotonic()
    exp_file = path.with_suffix(".yaml")
    exp_file.write_text(EXPERIMENT_YAML)
    start = time.time() - HISTORY_S - 60
    with EventStore(path) as store:
        store.register_experiment(load_experiment(exp_file), effective_at=start)
    cols = [c.name for c in events_table.columns]
    idx = {c: i for i, c in enumerate(cols)}
    sql = f"INSERT INTO {events_table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    viewers = int(events / 2.5) + 1
    rng = np.random.default_rng(seed)
    arm_of = rng.random(viewers) < 0.5
    latency = rng.lognormal(np.log(600), 0.4, viewers)
    clicks, orders = rng.random(viewers) < 0.3, rng.random(viewers) < 0.08
    base: list[Any] = [None] * len(cols)
    base[idx["experiment"]], base[idx["simulated"]], base[idx["digest"]] = EXPERIMENT, 1, "benchmark"
    step = HISTORY_S / viewers

    def row(**values: Any) -> tuple[Any, ...]:
        r = base.copy()
        for k, v in values.items():
            r[idx[k]] = v
        return tuple(r)

    seen = [0]  # viewers written

    def rows() -> Any:
        n = 0
        for i in range(viewers):
            seen[0] = i + 1
            vid, arm, ts = f"v{i:07d}", "treatment" if arm_of[i] else "control", start + 60 + i * step
            yield row(event_id=f"x{i}", kind="exposure", viewer_id=vid, arm=arm, ts=ts, received_at=ts,
                      request_id=f"r{i}", bucket=float(i % 1000) / 1000, hash_version=1)  # fmt: skip
            yield row(event_id=f"p{i}", kind="response", viewer_id=vid, arm=arm, ts=ts + 1, received_at=ts + 1,
                      request_id=f"r{i}", latency_ms=float(latency[i]), ttft_ms=float(latency[i]) / 3, tokens=40,
                      deadline_met=int(latency[i] < 1000), status="answered")  # fmt: skip
            n += 2
            if n >= events:
                return
            if i % 2 == 0:
                kind = "order" if orders[i] else "click" if clicks[i] else "add_to_cart"
                yield row(event_id=f"o{i}", kind="outcome", viewer_id=vid, ts=ts + 30, received_at=ts + 30,
                          outcome_type=kind, gmv=39.0 if kind == "order" else None)  # fmt: skip
                n += 1
                if n >= events:
                    return

    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    written, batch = 0, []
    for r in rows():
        batch.append(r)
        if len(batch) == BATCH:
            with conn:
                conn.executemany(sql, batch)
            written, batch = written + len(batch), []
    if batch:
        with conn:
            conn.executemany(sql, batch)
        written += len(batch)
    conn.close()
    return {"events": written, "viewers": seen[0], "fill_s": round(time.monotonic() - t0, 1),
            "db_mb": round(path.stat().st_size / 2**20, 1), "experiment_file": str(exp_file)}  # fmt: skip


# -- the server (this process) ------------------------------------------------------------------------------
def add_thread_summary(app: Any) -> None:
    """``/bench/summary-thread/{name}``: the summary computed in a thread of the serving process (the old path)."""
    from livethink.ab_test.hooks import experiment_summary

    async def summary_in_thread(name: str) -> dict[str, Any]:
        store = app.state.service.hooks.experiments[name].store
        return await asyncio.to_thread(experiment_summary, store, name, max_age_s=5.0)

    app.add_api_route("/bench/summary-thread/{name}", summary_in_thread, methods=["GET"])


def start_server(student: Path, exp_file: str, db: Path) -> Any:
    from serve_big_bodies import add_lag_probe

    from livethink.serve.api.app import create_app
    from tests.support.serve import ServerThread, SlowEngine, engine_set, load_tokenizer, make_config

    config = make_config(student, **{"engine.probe_interval_s": None,
                                     "experiment": {"file": exp_file, "store": str(db), "spool_dir": None}})  # fmt: skip
    app = create_app(config, engine_set(SlowEngine(load_tokenizer(student)), capacity=4))
    add_lag_probe(app)
    add_thread_summary(app)
    return ServerThread(app, startup_timeout=300)


# -- the client (the main thread) and the phases ------------------------------------------------------------
def poll(url: str, duration_s: float, interval_s: float) -> list[dict[str, Any]]:
    """GET ``url`` every ``interval_s`` for ``duration_s`` (the next request once the previous one answered)."""
    import httpx

    out: list[dict[str, Any]] = []
    end = time.monotonic() + duration_s
    next_at = time.monotonic()
    with httpx.Client(timeout=900) as client:
        while time.monotonic() < end:
            t0 = time.monotonic()
            r = client.get(url)
            body = r.json() if r.status_code == 200 else {}
            out.append({"status": r.status_code, "ms": (time.monotonic() - t0) * 1000,
                        "generated_at": body.get("generated_at")})  # fmt: skip
            next_at = max(next_at + interval_s, time.monotonic())
            time.sleep(max(0.0, next_at - time.monotonic()))
    return out


def phase(server_url: str, name: str, duration_s: float, summary_path: str | None,
          interval_s: float) -> dict[str, Any]:  # fmt: skip
    import httpx

    httpx.get(f"{server_url}/bench/lag/start", timeout=10)
    cpu0, t0 = time.process_time(), time.monotonic()
    if summary_path is None:
        time.sleep(duration_s)
        requests: list[dict[str, Any]] = []
    else:
        requests = poll(server_url + summary_path, duration_s, interval_s)
    lags = httpx.get(f"{server_url}/bench/lag/stop", timeout=900).json()["lags_ms"]  # a stalled loop answers late
    cpu_s, wall_s = time.process_time() - cpu0, time.monotonic() - t0
    statuses: dict[str, int] = {}
    for r in requests:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    ms = [r["ms"] for r in requests]
    return {
        "phase": name,
        "wall_s": round(wall_s, 1),
        "cpu_s": round(cpu_s, 2),
        "lag_ms": {"samples": len(lags), "p50": pct(lags, 50, 2), "p99": pct(lags, 99, 2),
                   "max": round(max(lags), 2) if lags else None,
                   "over_target": sum(x >= TARGET_P99_MS for x in lags)},  # fmt: skip
        "requests": {"n": len(requests), "statuses": statuses, "p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99),
                     "max_ms": round(max(ms), 1) if ms else None,
                     "computations": len({r["generated_at"] for r in requests if r["generated_at"] is not None})},
        "lags": [round(x, 3) for x in lags],
    }  # fmt: skip


def verdicts(phases: list[dict[str, Any]]) -> list[str]:
    worker = next(p for p in phases if p["phase"].startswith("summary (worker)"))
    p99 = worker["lag_ms"]["p99"]
    ok = worker["requests"]["statuses"].keys() == {"200"}
    return [
        f"event-loop lag p99 while the summary is requested every second (worker): {p99} ms "
        f"(target < {TARGET_P99_MS:g} ms): {'met' if p99 is not None and p99 < TARGET_P99_MS else 'NOT met'}",
        f"summary requests answered 200: {'all' if ok else worker['requests']['statuses']}",
    ]


# -- the report ---------------------------------------------------------------------------------------------
def write_report(result: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{stem}.{ext}" for ext in ("json", "md", "png")]
    paths[0].write_text(json.dumps(result, indent=2) + "\n")
    store = result["store"]
    md = ["# Event-loop lag while the A/B summary is requested every second", "",
          f"Command: `{result['command']}`  ", f"Machine: {result['environment']}  ",
          f"Load average (1, 5, 15 min) before: {result['loadavg_before']}, after: {result['loadavg_after']}  ",
          f"Store: SQLite, {store['events']:,} events ({store['viewers']:,} viewers, {store['db_mb']} MB), "
          f"filled in {store['fill_s']} s. First summary (worker start + computation): {result['first_summary_s']} s.",
          "", "## Target (issue #58, item 6)", ""]  # fmt: skip
    md += [f"- {line}" for line in result["verdicts"]]
    md += ["", "| phase | lag p50 (ms) | lag p99 (ms) | lag max (ms) | lag samples ≥ 20 ms | requests | statuses "
           "| request p50 / p99 / max (ms) | summaries computed | server-process CPU (s) |",
           "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in result["phases"]:
        lag, r = p["lag_ms"], p["requests"]
        md.append(f"| {p['phase']} | {lag['p50']} | {lag['p99']} | {lag['max']} | {lag['over_target']} / "
                  f"{lag['samples']} | {r['n']} | {', '.join(f'{k}: {n}' for k, n in r['statuses'].items()) or '-'} | "
                  f"{' / '.join(str(r[k]) for k in ('p50_ms', 'p99_ms', 'max_ms')) if r['n'] else '-'} | "
                  f"{r['computations']} | {p['cpu_s']} |")  # fmt: skip
    md += ["", "Lag: how late a 5 ms sleep in the server's event loop wakes. Summaries computed: distinct "
           "`generated_at` among the answers (the server caches a summary for 5 s). Server-process CPU: this "
           "process's CPU time in the phase (server and client; the summary worker's child process is not in it).",
           ""]  # fmt: skip
    paths[1].write_text("\n".join(md))
    plot(result, paths[2])
    return paths


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax, cdf) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    for p in result["phases"]:
        lags = np.asarray(p["lags"], dtype=float)
        if not len(lags):
            continue
        t = np.cumsum(5.0 + lags) / 1000  # each sample: a 5 ms sleep plus its lag
        line = ax.plot(t, np.maximum(lags, 0.01), lw=0.7, alpha=0.8,
                       label=f"{p['phase']} (p99 {p['lag_ms']['p99']} ms)")[0]  # fmt: skip
        srt = np.sort(np.maximum(lags, 0.01))
        cdf.step(srt, 1 - np.arange(len(srt)) / len(srt), where="post", color=line.get_color(), lw=1.2)
    ax.axhline(TARGET_P99_MS, color="red", ls="--", lw=1, label=f"target p99 < {TARGET_P99_MS:g} ms")
    ax.set(yscale="log", xlabel="time in the phase (s)", ylabel="event-loop lag (ms)",
           title=f"Event-loop lag, A/B summary every {result['settings']['interval_s']:g} s over "
                 f"{result['store']['events']:,} events")  # fmt: skip
    ax.legend(fontsize=8)
    cdf.axvline(TARGET_P99_MS, color="red", ls="--", lw=1)
    cdf.axhline(0.01, color="grey", ls=":", lw=1)  # the p99 line: a curve left of the target at 1% meets it
    cdf.set(xscale="log", yscale="log", xlabel="event-loop lag (ms)", ylabel="share of samples with a lag ≥ x",
            title="Lag distribution (dotted: 1%, i.e. p99)")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000, help="events in the store (default 1,000,000)")
    ap.add_argument("--duration-s", type=float, default=30, help="each phase's length")
    ap.add_argument("--interval-s", type=float, default=1.0, help="between summary requests")
    ap.add_argument("--no-thread-phase", action="store_true", help="skip the server-thread comparison phase")
    ap.add_argument("--student", help="a student checkpoint for the tokenizer (default: an untrained tiny one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--results-dir", default=str(OUT), help="where the results go (default benchmarks/results)")
    ap.add_argument("--out", default="ab_summary_lag", help="results stem")
    args = ap.parse_args()
    if args.events < 1000:
        ap.error("--events: at least 1000")
    import httpx

    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        store = fill_store(Path(tmp) / "ab.db", args.events, args.seed)
        student = Path(args.student) if args.student else untrained_student(Path(tmp))
        server = start_server(student, store.pop("experiment_file"), Path(tmp) / "ab.db")
        try:
            summary = f"/v1/ab/experiments/{EXPERIMENT}"
            t0 = time.monotonic()
            first = httpx.get(server.url + summary, timeout=900)
            first.raise_for_status()
            first_s = round(time.monotonic() - t0, 1)
            phases = [phase(server.url, "baseline", args.duration_s, None, args.interval_s),
                      phase(server.url, "summary (worker)", args.duration_s, summary, args.interval_s)]  # fmt: skip
            if not args.no_thread_phase:
                phases.append(phase(server.url, "summary (server thread, before)", args.duration_s,
                                    f"/bench/summary-thread/{EXPERIMENT}", args.interval_s))  # fmt: skip
        finally:
            server.close()
    result = {
        "command": " ".join(["python benchmarks/ab_summary_lag.py", *sys.argv[1:]]),
        "environment": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
                       f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}",  # fmt: skip
        "loadavg_before": load_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "settings": vars(args),
        "store": store,
        "first_summary_s": first_s,
        "phases": phases,
        "verdicts": verdicts(phases),
    }
    for path in write_report(result, Path(args.results_dir), args.out):
        print(path)
    print(json.dumps({k: v for k, v in result.items() if k != "phases"} | {
        "phases": [{k: v for k, v in p.items() if k != "lags"} for p in phases]}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
