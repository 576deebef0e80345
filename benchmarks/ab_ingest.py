"""Durable ingest into SQLite (WAL, synchronous=FULL): events/s acknowledged after commit.

    .venv/bin/python benchmarks/ab_ingest.py                  # about a minute
    .venv/bin/python benchmarks/ab_ingest.py --events 50000

Three ways of writing, all through ``livethink.ab_test`` with full validation and idempotency checks:
1. ``EventStore.append`` with batches of 100 / 1,000 / 5,000 events (a collector that batches itself);
2. ``BatchWriter`` (group commit) fed by 64 concurrent asyncio producers that each submit one event and await
   its acknowledgement before sending the next — what the server does per request through the hooks.
Target: ≥ 5,000 durable events/s. Writes ab_ingest.{json,md,png} to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from ab_common import RESULTS, machine, write_results  # noqa: E402

from livethink.ab_test.experiment import parse_experiment  # noqa: E402
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


def bench_append(db: Path, n: int, batch: int) -> dict:
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


def bench_writer(db: Path, n: int, producers: int) -> dict:
    """Server-like: ``producers`` concurrent requests, each awaiting its event's ack before sending the next."""
    events = make_events(n, f"w{producers}-")
    latencies: list[float] = []
    with EventStore(db) as store:
        store.register_experiment(EXP)
        writer = BatchWriter(store)

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
        "mode": f"BatchWriter, {producers} concurrent producers awaiting each ack",
        "events": n,
        "seconds": dt,
        "events_per_s": n / dt,
        "commits": batches,
        "ack_latency_ms_p50": latencies[len(latencies) // 2] * 1000,
        "ack_latency_ms_p99": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--producers", type=int, default=64)
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for batch in (100, 1000, 5000):
            runs.append(bench_append(Path(tmp) / f"append{batch}.db", args.events, batch))
            print(runs[-1])
        for producers in (args.producers, 4 * args.producers):
            runs.append(bench_writer(Path(tmp) / f"writer{producers}.db", args.events, producers))
            print(runs[-1])
    best_writer = max(r["events_per_s"] for r in runs if r["mode"].startswith("BatchWriter"))
    best_append = max(r["events_per_s"] for r in runs if r["mode"].startswith("append"))
    data = {"runs": runs, "sqlite": {"journal_mode": "wal", "synchronous": "FULL"}, "target_events_per_s": 5000,
            "pass": best_append >= 5000 and best_writer >= 5000, "machine": machine()}  # fmt: skip
    md = [
        "# A/B event store: durable ingest into SQLite",
        "",
        f"`.venv/bin/python benchmarks/ab_ingest.py --events {args.events} --producers {args.producers}`",
        "",
        "SQLite WAL, `synchronous=FULL` (every commit fsynced), full validation, idempotency lookup per batch; an "
        "event counts once its commit returned. Mixed events (1/3 exposures, 1/3 responses, 1/3 orders).",
        "",
        "| mode | events | seconds | durable events/s | commits | ack p50 / p99 (ms) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lat = (
            f"{r['ack_latency_ms_p50']:.1f} / {r['ack_latency_ms_p99']:.1f}"
            if "ack_latency_ms_p50" in r
            else "–"
        )
        md.append(f"| {r['mode']} | {r['events']:,} | {r['seconds']:.2f} | {r['events_per_s']:,.0f} "
                  f"| {r.get('commits', '–')} | {lat} |")  # fmt: skip
    md += ["", f"**Target ≥ 5,000 durable events/s: {'PASS' if data['pass'] else 'FAIL'}.** Batches of 100 are "
           "shown for scale (per-commit fsync dominates). The kill -9 durability check is the test "
           "`tests/ab_test/test_crash.py`.", "", "![ingest](ab_ingest.png)", ""]  # fmt: skip
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.barh([r["mode"] for r in runs], [r["events_per_s"] for r in runs])
    ax.axvline(5000, color="red", ls="--", label="target 5,000/s")
    ax.set_xlabel("durable events/s (SQLite WAL, synchronous=FULL)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "ab_ingest.png", dpi=100)
    for p in write_results("ab_ingest", data, "\n".join(md)):
        print(p)


if __name__ == "__main__":
    main()
