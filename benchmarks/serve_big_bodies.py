"""Event-loop lag and the other viewers' deadlines while one client posts ~1 MiB bodies (issue #59, item 4).

    .venv/bin/python benchmarks/serve_big_bodies.py [--duration-s 20] [--rate 8] [--big-rate 5]
        [--big-bytes 1048000] [--deadline-ms 1000] [--engine slow|transformers] [--out serve_big_bodies]

The server runs in this process: ``create_app`` served by uvicorn in a thread (``tests/support/serve.py``'s
``ServerThread``) over the fault-injection ``SlowEngine`` (deterministic words at a fixed pace, honouring the
budget) with the real tokenizer of an untrained tiny student, or (``--engine transformers``) over the transformers
engine on that student. The clients run in a child process, so their CPU time is not taken from the server's
event loop by the interpreter lock.

Two phases of ``--duration-s`` each, after a short warm-up:

1. **baseline**: viewers only, Poisson arrivals at ``--rate`` req/s of ordinary livestream requests;
2. **big bodies**: the same viewers, plus one client posting a livestream body of ``--big-bytes`` bytes
   (product docs of a few 100k characters each) ``--big-rate`` times a second, each on its own connection.

The default size is just under ``server.max_body_kb`` (1 MiB): the largest body the server reads in full, parses
and validates (a larger one is refused with 413 while it is read). Measured per phase: the event-loop lag (a task
in the server's loop sleeps 5 ms and records how late it wakes: p50, p99, max), the viewers' deadline share
(HTTP 200 within the deadline by the client's clock) and latency, the big bodies' statuses and times.
Target (#59): lag p99 < 20 ms with big bodies, and the viewers' deadline share within ±1 point of the baseline.

Results: ``benchmarks/results/<out>.{json,md}``, with the load average before and after (the machine is shared:
a busy one shows in both phases). Loopback only; every phase is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from serve_common import OUT, ROOT, pct, untrained_student

sys.path.append(str(ROOT))  # tests.support (an installed checkout has it already; PYTHONPATH wins)

DOC_TEXT = "Price: $39. Stock: S 2, M 3, L 0 left. Cotton fleece, machine wash cold. Ships in 2 days. "
VIEWER_BODY = {
    "question": "How much is the hoodie, and is M in stock?",
    "product_docs": [{"product_id": "p1", "title": "Hoodie", "text": DOC_TEXT}],
}
PROBE_S = 0.005  # the lag probe's sleep
MAX_DOC_CHARS = 190_000  # under the protocol's 200,000 characters per text


def big_body(size: int) -> bytes:
    """A livestream body of about ``size`` bytes (JSON): product docs of at most ``MAX_DOC_CHARS`` characters."""
    envelope = {"viewer_id": "big-client", "question": "Tell me everything about these products.",
                "product_docs": []}  # fmt: skip
    left = size - len(json.dumps(envelope))
    docs, i = [], 0
    while left > 200:
        n = min(MAX_DOC_CHARS, left - 60)
        text = (DOC_TEXT * (n // len(DOC_TEXT) + 1))[:n]
        docs.append({"product_id": f"p{i}", "title": f"Product {i}", "text": text})
        left -= n + 60
        i += 1
    body = json.dumps({**envelope, "product_docs": docs}).encode()
    return body + b" " * max(0, size - len(body))  # JSON allows trailing whitespace: exactly ``size`` bytes


# -- the clients (a child process) ----------------------------------------------------------------------
async def _viewer(client: Any, url: str, i: int, deadline_ms: int) -> dict[str, Any]:
    body = {**VIEWER_BODY, "viewer_id": f"viewer-{i}", "deadline_ms": deadline_ms}
    t0 = time.monotonic()
    try:
        r = await client.post(f"{url}/v1/livestream/reply", json=body)
        content = r.content
    except Exception as exc:  # noqa: BLE001 (a failed request is a result)
        return {"status": None, "error": type(exc).__name__, "ms": (time.monotonic() - t0) * 1000}
    out = {"status": r.status_code, "ms": (time.monotonic() - t0) * 1000}
    if r.status_code == 200:
        out["deadline_met"] = json.loads(content)["deadline_met"]
    return out


async def _big(url: str, body: bytes) -> dict[str, Any]:
    import httpx

    t0 = time.monotonic()
    try:  # its own connection: a refused body closes it
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.post(f"{url}/v1/livestream/reply", content=body,
                                  headers={"content-type": "application/json"})  # fmt: skip
            code = r.json().get("error", {}).get("code") if r.status_code != 200 else None
            return {"status": r.status_code, "code": code, "ms": (time.monotonic() - t0) * 1000}
    except Exception as exc:  # noqa: BLE001
        return {"status": None, "error": type(exc).__name__, "ms": (time.monotonic() - t0) * 1000}


async def run_clients(url: str, duration_s: float, rate: float, big_rate: float, big_bytes: int,
                      deadline_ms: int, seed: int) -> dict[str, Any]:  # fmt: skip
    import httpx

    rng = random.Random(seed)
    body = big_body(big_bytes) if big_rate > 0 else b""
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
    async with httpx.AsyncClient(timeout=deadline_ms / 1000 + 10, limits=limits) as client:
        await client.get(f"{url}/health/live")
        end = time.monotonic() + duration_s

        async def viewers() -> list[Any]:
            tasks, i = [], 0
            while time.monotonic() < end:
                tasks.append(asyncio.create_task(_viewer(client, url, i, deadline_ms)))
                i += 1
                await asyncio.sleep(rng.expovariate(rate))
            return await asyncio.gather(*tasks)

        async def bigs() -> list[Any]:
            tasks = []
            next_at = time.monotonic()
            while big_rate > 0 and time.monotonic() < end:
                tasks.append(asyncio.create_task(_big(url, body)))
                next_at += 1 / big_rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            return await asyncio.gather(*tasks)

        v, b = await asyncio.gather(viewers(), bigs())
    return {"viewers": list(v), "big": list(b), "big_bytes": len(body)}


# -- the server (this process) --------------------------------------------------------------------------
def add_lag_probe(app: Any) -> None:
    """``/bench/lag/start`` starts a task in the server's loop that sleeps ``PROBE_S`` and records how late it
    wakes; ``/bench/lag/stop`` stops it and returns the lags (ms)."""
    state: dict[str, Any] = {"task": None, "lags": []}

    async def probe() -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            state["lags"].append((time.perf_counter() - t0 - PROBE_S) * 1000)

    async def start() -> dict[str, bool]:
        state["lags"] = []
        state["task"] = asyncio.create_task(probe())
        return {"started": True}

    async def stop() -> dict[str, Any]:
        state["task"].cancel()
        return {"lags_ms": state["lags"]}

    app.add_api_route("/bench/lag/start", start, methods=["GET"])
    app.add_api_route("/bench/lag/stop", stop, methods=["GET"])


def start_server(student: Path, engine_kind: str) -> Any:
    from livethink.serve.api.app import create_app
    from tests.support.serve import ServerThread, SlowEngine, engine_set, load_tokenizer, make_config

    overrides = {"engine.warmup": engine_kind == "transformers", "engine.probe_interval_s": None}
    config = make_config(student, **overrides)
    if engine_kind == "slow":
        engines = engine_set(SlowEngine(load_tokenizer(student), ttft_s=0.01, token_s=0.005), capacity=4)
        app = create_app(config, engines)
    else:
        app = create_app(config)
    add_lag_probe(app)
    return ServerThread(app, startup_timeout=300)


def phase(url: str, name: str, args: argparse.Namespace, big_rate: float) -> dict[str, Any]:
    import httpx

    httpx.get(f"{url}/bench/lag/start", timeout=10)
    t0 = time.monotonic()
    argv = [sys.executable, __file__, "--client", url, "--duration-s", str(args.duration_s), "--rate",
            str(args.rate), "--big-rate", str(big_rate), "--big-bytes", str(args.big_bytes),
            "--deadline-ms", str(args.deadline_ms), "--seed", str(args.seed)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=args.duration_s + 120, cwd=ROOT)
    lags = httpx.get(f"{url}/bench/lag/stop", timeout=600).json()["lags_ms"]  # a stalled loop answers late
    if done.returncode != 0:
        raise RuntimeError(f"the client failed: {done.stderr[-2000:]}")
    clients = json.loads(done.stdout)
    return summarize(name, clients, lags, args.deadline_ms, time.monotonic() - t0)


def summarize(name: str, clients: dict[str, Any], lags: list[float], deadline_ms: int,
              wall_s: float) -> dict[str, Any]:  # fmt: skip
    viewers = clients["viewers"]
    met = [v for v in viewers if v["status"] == 200 and v.get("deadline_met") and v["ms"] <= deadline_ms]
    ok_ms = [v["ms"] for v in viewers if v["status"] == 200]
    statuses: dict[str, int] = {}
    for v in viewers:
        statuses[str(v["status"])] = statuses.get(str(v["status"]), 0) + 1
    big = clients["big"]
    big_statuses: dict[str, int] = {}
    for b in big:
        key = f"{b['status']} {b.get('code') or b.get('error') or ''}".strip()
        big_statuses[key] = big_statuses.get(key, 0) + 1
    return {
        "phase": name,
        "wall_s": round(wall_s, 1),
        "lag_ms": {"samples": len(lags), "p50": pct(lags, 50, 2), "p99": pct(lags, 99, 2),
                   "max": round(max(lags), 2) if lags else None},  # fmt: skip
        "viewers": {"requests": len(viewers), "statuses": statuses,
                    "deadline_share": round(len(met) / len(viewers), 4) if viewers else None,
                    "p50_ms": pct(ok_ms, 50), "p99_ms": pct(ok_ms, 99)},  # fmt: skip
        "big": {"requests": len(big), "bytes": clients["big_bytes"], "statuses": big_statuses,
                "p50_ms": pct([b["ms"] for b in big], 50), "max_ms": round(max((b["ms"] for b in big), default=0), 1)},
    }  # fmt: skip


def write_report(result: dict[str, Any], stem: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    base, loaded = result["phases"]
    md = ["# Event-loop lag and the viewers' deadlines with ~1 MiB bodies", "",
          f"Command: `{result['command']}`  ", f"Machine: {result['environment']}  ",
          f"Load average (1, 5, 15 min) before: {result['loadavg_before']}, after: {result['loadavg_after']}", "",
          "## Targets (issue #59)", ""]  # fmt: skip
    md += [f"- {line}" for line in result["verdicts"]]
    md += ["", "| phase | lag p50 (ms) | lag p99 (ms) | lag max (ms) | viewers | deadline share | viewer p50 / p99 (ms) "
           "| big bodies | big statuses |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in (base, loaded):
        lag, v, b = p["lag_ms"], p["viewers"], p["big"]
        md.append(f"| {p['phase']} | {lag['p50']} | {lag['p99']} | {lag['max']} | {v['requests']} | "
                  f"{100 * (v['deadline_share'] or 0):.1f}% | {v['p50_ms']} / {v['p99_ms']} | {b['requests']} "
                  f"({b['bytes']:,} B) | {', '.join(f'{k}: {n}' for k, n in b['statuses'].items()) or '-'} |")
    md += ["", "Lag: how late a 5 ms sleep in the server's event loop wakes. Deadline share: viewer requests answered "
           "(200) with `deadline_met` and within the deadline by the client's clock.", ""]  # fmt: skip
    (OUT / f"{stem}.md").write_text("\n".join(md))


def verdicts(base: dict[str, Any], loaded: dict[str, Any]) -> list[str]:
    p99 = loaded["lag_ms"]["p99"]
    delta = 100 * ((loaded["viewers"]["deadline_share"] or 0) - (base["viewers"]["deadline_share"] or 0))
    return [
        f"event-loop lag p99 with big bodies: {p99} ms (target < 20 ms): {'met' if p99 is not None and p99 < 20 else 'NOT met'}",
        f"viewers' deadline share: {100 * (base['viewers']['deadline_share'] or 0):.1f}% baseline, "
        f"{100 * (loaded['viewers']['deadline_share'] or 0):.1f}% with big bodies ({delta:+.1f} points; target ±1): "
        f"{'met' if abs(delta) <= 1 else 'NOT met'}",
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration-s", type=float, default=20)
    ap.add_argument("--rate", type=float, default=8, help="the viewers' requests per second (Poisson)")
    ap.add_argument("--big-rate", type=float, default=5, help="big bodies per second in the second phase")
    ap.add_argument("--big-bytes", type=int, default=1_048_000, help="each big body's size (default: just under 1 MiB)")
    ap.add_argument("--deadline-ms", type=int, default=1000)
    ap.add_argument("--engine", choices=["slow", "transformers"], default="slow")
    ap.add_argument("--student", help="a student checkpoint (default: an untrained tiny one, built here)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="serve_big_bodies", help="results stem under benchmarks/results")
    ap.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.client:
        result = asyncio.run(run_clients(args.client, args.duration_s, args.rate, args.big_rate, args.big_bytes,
                                         args.deadline_ms, args.seed))  # fmt: skip
        print(json.dumps(result))
        return
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        student = Path(args.student) if args.student else untrained_student(Path(tmp))
        server = start_server(student, args.engine)
        try:
            warm = argparse.Namespace(**{**vars(args), "duration_s": 3})
            phase(server.url, "warm-up", warm, 0)
            base = phase(server.url, "baseline", args, 0)
            loaded = phase(server.url, f"big bodies ({args.big_rate:g}/s)", args, args.big_rate)
        finally:
            server.close()
    result = {
        "command": " ".join(["python benchmarks/serve_big_bodies.py", *sys.argv[1:]]),
        "environment": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
                       f"{platform.python_version()}, engine {args.engine}",  # fmt: skip
        "loadavg_before": load_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "settings": {k: v for k, v in vars(args).items() if k != "client"},
        "phases": [base, loaded],
        "verdicts": verdicts(base, loaded),
    }
    write_report(result, args.out)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
