"""Durable ingest into SQLite (WAL, synchronous=FULL) and PostgreSQL (fsync on, synchronous_commit on): events/s
acknowledged after commit.

    .venv/bin/python benchmarks/ab_ingest.py                  # both stores, a few minutes
    .venv/bin/python benchmarks/ab_ingest.py --events 30000 --stores sqlite,postgresql

PostgreSQL is a throwaway local cluster (``livethink.ab_test.pg_cluster``: Debian's postgresql 15, default
durability settings) on a loopback port; each run writes into a fresh database.

Three ways of writing, all through ``livethink.ab_test`` with full validation and idempotency checks:
1. ``EventStore.append`` with batches of 100 / 1,000 / 5,000 events (a collector that batches itself);
2. ``BatchWriter`` (group commit) fed by 64 concurrent asyncio producers that each submit one event and await
   its acknowledgement before sending the next — what the server does per request through the hooks;
3. the same with the server's write-ahead spool (``livethink.ab_test.spool``), as ``livethink serve`` runs it.
Target: ≥ 5,000 durable events/s. Writes ab_ingest.{json,md,png} to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from ab_common import machine, publish  # noqa: E402

from livethink.ab_test.experiment import parse_experiment  # noqa: E402
from livethink.ab_test.pg_cluster import LocalPostgres  # noqa: E402
from livethink.ab_test.spool import Spool  # noqa: E402
from livethink.ab_test.store import EventStore  # noqa: E402
from livethink.ab_test.writer import BatchWriter  # noqa: E402

EXP = parse_experiment(
    {"name": "ingest", "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}]}
)


def make_events(n: int, prefix: str) -> list[dict]:
    now = time.time() - 60
    out = []
    for i in range(n):
        vid = f"viewer-{i % 50_000}"
        if i % 3 == 0:
            out.append({"kind": "exposure", "event_id": f"{prefix}{i}", "experiment": "ingest", "viewer_id": vid,
                        "arm": "AB"[i % 2], "ts": now, "request_id": f"r{i}"})  # fmt: skip
        elif i % 3 == 1:
            out.append({"kind": "response", "event_id": f"{prefix}{i}", "experiment": "ingest", "viewer_id": vid,
                        "arm": "AB"[i % 2], "ts": now, "request_id": f"r{i}", "latency_ms": 420.0, "tokens": 150,
                        "deadline_met": True, "correct": True, "helpful": False})  # fmt: skip
        else:
            out.append({"kind": "outcome", "event_id": f"{prefix}{i}", "experiment": "ingest", "viewer_id": vid,
                        "type": "order", "gmv": 19.9, "ts": now})  # fmt: skip
    return out


def bench_append(db: Path | str, n: int, batch: int) -> dict:
    events = make_events(n, f"a{batch}-")
    with EventStore(db) as store:
        store.register_experiment(EXP)
        t0 = time.perf_counter()
        stored = 0
        for k in range(0, n, batch):
            stored += sum(a.status == "stored" for a in store.append(events[k : k + batch]))
        dt = time.perf_counter() - t0
    assert stored == n
    return {"mode": f"append, batch {batch}", "events": n, "seconds": dt, "events_per_s": n / dt}


def bench_writer(db: Path | str, n: int, producers: int, spool: Path | None = None) -> dict:
    """Server-like: ``producers`` concurrent requests, each awaiting its event's ack before sending the next."""
    events = make_events(n, f"w{producers}-")
    latencies: list[float] = []
    with EventStore(db) as store:
        store.register_experiment(EXP)
        writer = BatchWriter(store, spool=None if spool is None else Spool(spool))

        async def produce(part: list[dict]) -> None:
            for ev in part:
                t = time.perf_counter()
                ack = await writer.asubmit(ev)
                latencies.append(time.perf_counter() - t)
                assert ack.status == "stored"

        async def run() -> None:
            await asyncio.gather(*(produce(events[i::producers]) for i in range(producers)))

        t0 = time.perf_counter()
        asyncio.run(run())
        dt = time.perf_counter() - t0
        batches = writer.batches
        writer.close()
    latencies.sort()
    return {
        "mode": f"BatchWriter{' + spool' if spool else ''}, {producers} concurrent producers awaiting each ack",
        "events": n,
        "seconds": dt,
        "events_per_s": n / dt,
        "commits": batches,
        "ack_latency_ms_p50": latencies[len(latencies) // 2] * 1000,
        "ack_latency_ms_p99": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def run_store(name: str, url_for: object, args: argparse.Namespace, tmp: Path) -> list[dict]:
    runs = []
    for batch in (100, 1000, 5000):
        runs.append({"store": name, **bench_append(url_for(f"append{batch}"), args.events, batch)})  # type: ignore[operator]
        print(runs[-1], flush=True)
    for producers in (args.producers, 4 * args.producers):
        runs.append({"store": name, **bench_writer(url_for(f"writer{producers}"), args.events, producers)})  # type: ignore[operator]
        print(runs[-1], flush=True)
    runs.append(
        {
            "store": name,
            **bench_writer(url_for("spooled"), args.events, args.producers, tmp / f"spool-{name}"),
        }
    )  # type: ignore[operator]
    print(runs[-1], flush=True)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--producers", type=int, default=64)
    ap.add_argument("--stores", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    args = ap.parse_args()
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    stores = [x.strip() for x in args.stores.split(",") if x.strip()]
    runs: list[dict] = []
    pg_settings: dict = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)  # the postgres user needs to reach its cluster directory
        if "sqlite" in stores:
            runs += run_store("sqlite", lambda k: tmp / f"{k}.db", args, tmp)
        if "postgresql" in stores:
            with LocalPostgres(tmp / "pg") as pg:
                import psycopg

                with psycopg.connect(pg.dsn()) as conn:
                    pg_settings = {k: conn.execute(f"SHOW {k}").fetchone()[0]
                                   for k in ("server_version", "fsync", "synchronous_commit", "wal_sync_method")}  # fmt: skip
                runs += run_store("postgresql", lambda k: pg.create_database(f"bench_{k}"), args, tmp)
    best = {
        st: min(
            max(r["events_per_s"] for r in runs if r["store"] == st and r["mode"].startswith(kind))
            for kind in ("append", "BatchWriter")
        )
        for st in stores
    }
    data = {"runs": runs, "sqlite": {"journal_mode": "wal", "synchronous": "FULL"}, "postgresql": pg_settings,
            "target_events_per_s": 5000, "pass": {st: b >= 5000 for st, b in best.items()},
            "machine": machine(), "loadavg_before": loadavg_before,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip
    md = [
        "# A/B event store: durable ingest into SQLite and PostgreSQL",
        "",
        f"`.venv/bin/python benchmarks/ab_ingest.py --events {args.events} --producers {args.producers} "
        f"--stores {args.stores}`",
        "",
        "SQLite WAL, `synchronous=FULL` (every commit fsynced); PostgreSQL "
        f"{pg_settings.get('server_version', '')} local cluster with its default durability (fsync "
        f"{pg_settings.get('fsync', '?')}, synchronous_commit {pg_settings.get('synchronous_commit', '?')}), over "
        "loopback TCP. Full validation, idempotency lookup per batch; an event counts once its commit returned. "
        "Mixed events (1/3 exposures, 1/3 responses, 1/3 orders). Machine: 2 cores; load average (1, 5, 15 min) "
        f"before {data['loadavg_before']}, after {data['loadavg_after']}.",
        "",
        "| store | mode | events | seconds | durable events/s | commits | ack p50 / p99 (ms) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lat = (
            f"{r['ack_latency_ms_p50']:.1f} / {r['ack_latency_ms_p99']:.1f}"
            if "ack_latency_ms_p50" in r
            else "–"
        )
        md.append(f"| {r['store']} | {r['mode']} | {r['events']:,} | {r['seconds']:.2f} | {r['events_per_s']:,.0f} "
                  f"| {r.get('commits', '–')} | {lat} |")  # fmt: skip
    verdict = ", ".join(f"{st} {'PASS' if ok else 'FAIL'}" for st, ok in data["pass"].items())
    md += ["", f"**Target ≥ 5,000 durable events/s (best batch size and best writer run): {verdict}.** Batches of "
           "100 are shown for scale (per-commit fsync dominates). Kill -9 and outage durability are tested in "
           "`tests/ab_test/test_crash.py`, `test_spool.py` and `test_replicas.py`.", "", "![ingest](ab_ingest.png)",
           ""]  # fmt: skip
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(runs) + 1))
    ax.barh([f"{r['store']}: {r['mode']}" for r in runs], [r["events_per_s"] for r in runs])
    ax.axvline(5000, color="red", ls="--", label="target 5,000/s")
    ax.set_xlabel("durable events/s")
    ax.legend()
    publish("ab_ingest", data, "\n".join(md), fig)


if __name__ == "__main__":
    main()
