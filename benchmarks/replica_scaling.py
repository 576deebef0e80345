"""One replica vs two behind HAProxy, sharing one PostgreSQL A/B store: the sustainable rate of each.

    .venv/bin/python benchmarks/replica_scaling.py [--engine transformers|vllm] [--rates 1,2,4,8]
        [--duration 15] [--deadline-ms 1000] [--model runs/tiny/rft/final]

For 1 and then 2 replicas (``livethink.replicas.ReplicaSet``: ``livethink serve`` processes, HAProxy, a throwaway
PostgreSQL cluster; every request is in the A/B experiment, so every reply logs an exposure and a response
event), open-loop Poisson arrivals of ``POST /v1/livestream/reply`` through HAProxy at each rate for
``--duration`` s. Per rate: the share of all requests answered 200 within the deadline by the client's clock,
429s, errors, p50/p99 latency, and the CPU seconds each part used (replicas, HAProxy, PostgreSQL, this
load generator) per second of wall time, which shows what bounds the rate on this machine. The sustainable rate
is the highest with at least ``--hit-rate`` (default 0.99) of all requests within the deadline.
Writes ``benchmarks/results/replica_scaling.{json,md,png}``. Without ``--model`` (or ``runs/tiny/rft/final``) an
untrained tiny student is built: latency is meaningful, reply quality is not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import matplotlib
import numpy as np
import psutil

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from ab_common import machine, publish  # noqa: E402
from serve_common import untrained_student  # noqa: E402

from livethink.ab_test.pg_cluster import LocalPostgres  # noqa: E402
from livethink.replicas import ReplicaSet  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = """
name: scale_ab
arms:
  - {name: a, weight: 0.5, variant: rft}
  - {name: b, weight: 0.5, variant: rft}
"""
DOCS = [
    {
        "product_id": "p1",
        "title": "Hoodie",
        "text": "Price: $39. Ships in 2 days. Free returns within 30 days.",
    }
]


class CPU:
    """CPU seconds of process groups between ``start()`` and ``stop()`` (children included)."""

    def __init__(self, groups: dict[str, list[int]]):
        self.groups = groups

    @staticmethod
    def _tree_cpu(pid: int, children: bool = True) -> float:
        try:
            p = psutil.Process(pid)
            procs = [p, *p.children(recursive=True)] if children else [p]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for q in procs:
            try:
                t = q.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def snapshot(self) -> dict[str, float]:
        own = psutil.Process().pid  # the load generator: this process alone (the replicas are its children)
        return {g: sum(self._tree_cpu(pid, pid != own) for pid in pids) for g, pids in self.groups.items()}


async def open_loop(
    url: str, rate: float, duration_s: float, deadline_ms: int, seed: int
) -> list[tuple[int, float]]:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=int(rate * duration_s * 2) + 10))
    arrivals = arrivals[arrivals < duration_s]
    out: list[tuple[int, float]] = []
    limits = httpx.Limits(max_connections=500, max_keepalive_connections=100)
    async with httpx.AsyncClient(base_url=url, timeout=deadline_ms / 1000 + 10, limits=limits) as client:

        async def one(i: int, at: float, t0: float) -> None:
            await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
            body = {"viewer_id": f"viewer-{seed}-{i}", "question": "How much is the hoodie and when does it ship?",
                    "product_docs": DOCS, "deadline_ms": deadline_ms}  # fmt: skip
            start = time.monotonic()
            try:
                r = await client.post("/v1/livestream/reply", json=body)
                out.append((r.status_code, (time.monotonic() - start) * 1000))
            except httpx.HTTPError:
                out.append((0, (time.monotonic() - start) * 1000))

        t0 = time.monotonic()
        await asyncio.gather(*(one(i, float(at), t0) for i, at in enumerate(arrivals)))
    return out


def summarize(results: list[tuple[int, float]], rate: float, deadline_ms: int, wall: float,
              cpu: dict[str, float]) -> dict[str, Any]:  # fmt: skip
    n = len(results)
    ok = [ms for s, ms in results if s == 200]
    within = [ms for ms in ok if ms <= deadline_ms]
    return {
        "offered_rate": rate,
        "requests": n,
        "ok": len(ok),
        "rejected_429": sum(s == 429 for s, _ in results),
        "errors": sum(s not in (200, 429) for s, _ in results),
        "within_deadline_of_all": round(len(within) / n, 4) if n else None,
        "e2e_ms_p50": round(float(np.percentile(ok, 50)), 1) if ok else None,
        "e2e_ms_p99": round(float(np.percentile(ok, 99)), 1) if ok else None,
        "cpu_cores_used": {k: round(v / wall, 2) for k, v in cpu.items()},
    }


def sweep(n: int, args: argparse.Namespace, student: Path, store: str, pg_pid: int, workdir: Path) -> dict:
    exp = workdir / "exp.yaml"
    exp.write_text(EXPERIMENT)
    config = {
        "models": {"rft": {"path": str(student)}},
        "default_model": "rft",
        "engine": {"kind": args.engine, "kv_cache_gib": 1, "warmup": True},
        "auth": {"api_key_env": None, "admin_key_env": None},
        "experiment": {"file": str(exp)},
    }
    t0 = time.monotonic()
    with ReplicaSet(config, n, workdir / f"set{n}", store=store) as rs:
        startup = time.monotonic() - t0
        groups = {
            "replicas": [r.proc.pid for r in rs.replicas if r is not None],
            "haproxy": [rs.haproxy.pid] if rs.haproxy else [],
            "postgres": [pg_pid],
            "load_generator": [psutil.Process().pid],
        }
        meter = CPU(groups)
        # warm-up (not counted): the first requests of a fresh engine are slow (lazy set-up, first prefills)
        asyncio.run(open_loop(rs.url, args.rates[0], args.warmup, args.deadline_ms, seed=99 * n))
        rows = []
        for k, rate in enumerate(args.rates):
            before, w0 = meter.snapshot(), time.monotonic()
            results = asyncio.run(open_loop(rs.url, rate, args.duration, args.deadline_ms, seed=100 * n + k))
            wall = time.monotonic() - w0
            after = meter.snapshot()
            rows.append(
                summarize(results, rate, args.deadline_ms, wall, {g: after[g] - before[g] for g in after})
            )
            print(n, rows[-1], flush=True)
            if (rows[-1]["within_deadline_of_all"] or 0) < 0.5:
                break  # far past saturation: higher rates only cost time
    ok = [r["offered_rate"] for r in rows if (r["within_deadline_of_all"] or 0) >= args.hit_rate]
    return {
        "replicas": n,
        "startup_s": round(startup, 1),
        "rows": rows,
        "sustainable_rate": max(ok) if ok else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", default="transformers", choices=["transformers", "vllm"])
    ap.add_argument("--rates", default="1,2,4,8")
    ap.add_argument("--duration", type=float, default=15.0)
    ap.add_argument("--deadline-ms", type=int, default=1000)
    ap.add_argument("--hit-rate", type=float, default=0.99)
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds of uncounted load at the lowest rate")
    ap.add_argument("--model", type=Path)
    args = ap.parse_args()
    args.rates = [float(x) for x in args.rates.split(",")]
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        student = args.model or (ROOT / "runs/tiny/rft/final")
        trained = student.exists()
        if not trained:
            student = untrained_student(tmp)
        with LocalPostgres(tmp / "pg") as pg:
            pg_pid = int((pg.data / "postmaster.pid").read_text().split()[0])
            sets = [sweep(n, args, student, pg.create_database(f"scale{n}"), pg_pid, tmp) for n in (1, 2)]
    data = {"engine": args.engine, "deadline_ms": args.deadline_ms, "hit_rate": args.hit_rate,
            "duration_s": args.duration, "student": str(student) if trained else "untrained tiny student",
            "sets": sets, "machine": machine(), "loadavg_before": loadavg_before,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip
    cmd = (f"`.venv/bin/python benchmarks/replica_scaling.py --engine {args.engine} --rates "
           f"{','.join(f'{r:g}' for r in args.rates)} --duration {args.duration:g} --deadline-ms {args.deadline_ms}`")  # fmt: skip
    md = ["# One replica vs two (HAProxy, shared PostgreSQL A/B store)", "", cmd, "",
          f"Engine {args.engine}, {data['student']}, deadline {args.deadline_ms} ms by the client's clock, open-loop "
          f"Poisson arrivals for {args.duration:g} s per rate after {args.warmup:g} s of uncounted warm-up; every request is in the experiment (exposure + "
          f"response events into PostgreSQL). Sustainable = highest rate with ≥ {args.hit_rate:.0%} of all requests "
          f"answered within the deadline. Machine: {data['machine']['cpus']} cores; load average (1, 5, 15 min) "
          f"before {data['loadavg_before']}, after {data['loadavg_after']}.", "",
          "| replicas | sustainable rate (req/s) | startup (s) |", "|---:|---:|---:|"]  # fmt: skip
    md += [f"| {s['replicas']} | {s['sustainable_rate'] if s['sustainable_rate'] is not None else '< lowest'} "
           f"| {s['startup_s']} |" for s in sets]  # fmt: skip
    md += ["", "| replicas | rate | requests | within deadline | 429 | errors | p50 / p99 ms | CPU cores: replicas / "
           "HAProxy / PostgreSQL / load generator |", "|---:|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for s in sets:
        for r in s["rows"]:
            c = r["cpu_cores_used"]
            md.append(f"| {s['replicas']} | {r['offered_rate']:g} | {r['requests']} | {r['within_deadline_of_all']:.1%} "
                      f"| {r['rejected_429']} | {r['errors']} | {r['e2e_ms_p50']} / {r['e2e_ms_p99']} | "
                      f"{c['replicas']} / {c['haproxy']} / {c['postgres']} / {c['load_generator']} |")  # fmt: skip
    md += ["", "![replica scaling](replica_scaling.png)", ""]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for s in sets:
        ax.plot([r["offered_rate"] for r in s["rows"]], [r["within_deadline_of_all"] for r in s["rows"]], "o-",
                label=f"{s['replicas']} replica(s)")  # fmt: skip
    ax.axhline(args.hit_rate, color="red", ls="--", label=f"{args.hit_rate:.0%}")
    ax.set_xlabel("offered rate (req/s)")
    ax.set_ylabel("within deadline (all requests)")
    ax.legend()
    publish("replica_scaling", data, "\n".join(md), fig)


if __name__ == "__main__":
    main()
