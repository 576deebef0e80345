"""Serving engines benchmark: open-loop Poisson arrivals against `livethink serve` on vLLM and on the
transformers fallback, one model at a time (the deployment as users run it: `benchmarks/serve_load.py`).

    .venv/bin/python benchmarks/serve_engines.py [--model runs/tiny/rft/final [--model runs/tiny/drpo/final]]
        [--rates 4,8,16,24] [--duration 20] [--deadline-ms 1000] [--engines vllm,transformers]

For every (engine, model) it starts the server (`python -m livethink.serve.cli`, 127.0.0.1, a free port),
then:

1. a load sweep: for each rate, Poisson arrivals for ``--duration`` s (at most ``--max-requests``) of
   ``POST /v1/livestream/reply`` with LiveShop test questions and a ``--deadline-ms`` budget. Per rate:
   throughput, TTFT and end-to-end p50/p95/p99, deadline hits, goodput (within the deadline AND judged
   correct by ``RubricJudge``), 429s, errors, hangs (no answer within deadline + 10 s);
2. for the first model on the first engine: the sustainable load (highest rate with ≥ 99% of all requests
   answered within the deadline and ≤ 1% refused) and a run at 3× that rate;
3. raw engine throughput: 48 concurrent chat requests of 64 tokens each (ignore_eos, thinking off, long
   deadline) → generated tokens/s — the vLLM / transformers ratio at the same load.

Results: ``benchmarks/results/serve_engines.{json,md,png}``. Without ``runs/tiny/rft/final`` an untrained tiny
student is built (random weights: latency and shedding are meaningful, correctness is not) and the report
says so. Loopback only; every phase is bounded in requests and time.
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
from pathlib import Path
from typing import Any

from serve_common import OUT, ROOT, untrained_student
from serve_engines_load import Server, raw_throughput, run_load
from serve_engines_report import summarize, sustainable_rate, write_report

DEFAULT_MODEL = ROOT / "runs/tiny/rft/final"


# -- main -------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model", action="append", type=Path, help="model dir (repeat: RFT student, then compressed)"
    )
    p.add_argument("--engines", default="vllm,transformers")
    p.add_argument("--rates", default="4,8,16,24", help="offered loads, requests/s")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of arrivals per rate")
    p.add_argument("--max-requests", type=int, default=1000, help="cap per rate")
    p.add_argument("--deadline-ms", type=int, default=1000)
    p.add_argument(
        "--transformers-rates", default=None, help="rates for the transformers engine (default: --rates)"
    )
    p.add_argument("--no-overload", action="store_true", help="skip the 3× sustainable-load run")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    from livethink.data.liveshop import generate

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t_start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="serve-load-"))
    notes: list[str] = []
    models = args.model or [DEFAULT_MODEL]
    resolved: list[tuple[str, Path]] = []
    for i, path in enumerate(models):
        name = ["rft", "compressed"][i] if i < 2 else f"model{i}"
        if not (path / "config.json").is_file():
            if path == DEFAULT_MODEL and i == 0:
                notes.append(
                    f"{DEFAULT_MODEL.relative_to(ROOT)} does not exist yet: an UNTRAINED tiny student "
                    "(random weights) is served. Latency, shedding and engine throughput are meaningful; "
                    "correctness and goodput are ~0 by construction."
                )
                path = untrained_student(workdir)
            else:
                p.error(f"--model {path}: not a model directory")
        resolved.append((name, path))
    if len(resolved) < 2:
        notes.append("one model given: the RFT-vs-compressed comparison needs a second --model.")
    tasks = generate(seed=args.seed + 11, n_train=1, n_validation=1, n_test=400).tasks["test"]
    rates = [float(r) for r in args.rates.split(",")]
    hf_rates = [float(r) for r in args.transformers_rates.split(",")] if args.transformers_rates else rates
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    runs: list[dict[str, Any]] = []
    targets: dict[str, str] = {}
    for e_i, engine in enumerate(engines):
        for m_i, (name, path) in enumerate(resolved):
            if engine != engines[0] and m_i > 0:
                continue  # the second model is compared on the primary engine only
            server = Server({name: path}, engine, workdir, args.deadline_ms)
            try:
                run: dict[str, Any] = {
                    "engine": engine,
                    "model": name,
                    "path": str(path),
                    "startup_s": round(server.startup_s, 1),
                }
                sweep = []
                for r_i, rate in enumerate(hf_rates if engine == "transformers" else rates):
                    outcomes, wall = asyncio.run(
                        run_load(
                            server.url,
                            tasks,
                            rate,
                            args.duration,
                            args.max_requests,
                            args.deadline_ms,
                            args.seed + r_i,
                        )
                    )
                    sweep.append(summarize(outcomes, wall, rate, args.deadline_ms))
                    print(json.dumps({"engine": engine, "model": name, **sweep[-1]}), flush=True)
                primary = e_i == 0 and m_i == 0
                sustainable = sustainable_rate(sweep)
                run["sustainable_rate"] = sustainable
                if primary and sustainable and not args.no_overload:
                    outcomes, wall = asyncio.run(
                        run_load(
                            server.url,
                            tasks,
                            3 * sustainable,
                            args.duration,
                            args.max_requests,
                            args.deadline_ms,
                            args.seed + 99,
                        )
                    )
                    over = summarize(outcomes, wall, 3 * sustainable, args.deadline_ms)
                    over["overload"] = True
                    sweep.append(over)
                    print(json.dumps({"engine": engine, "model": name, **over}), flush=True)
                run["sweep"] = sweep
                run["server_status"] = server.status()["controller"]
                # last, so its burst does not shape the latency estimates the sweep starts from
                run["raw_throughput"] = asyncio.run(raw_throughput(server.url, name))
                runs.append(run)
            finally:
                server.close()
    # comparisons and targets
    by = {(r["engine"], r["model"]): r for r in runs}
    first = resolved[0][0]
    result: dict[str, Any] = {"deadline_ms": args.deadline_ms, "notes": notes, "runs": runs}
    v, t = by.get(("vllm", first)), by.get(("transformers", first))
    if v and t:
        result["engine_ratio"] = round(
            v["raw_throughput"]["tokens_per_s"] / max(t["raw_throughput"]["tokens_per_s"], 1e-9), 1
        )
        common = sorted(
            {r["offered_rate"] for r in v["sweep"] if not r.get("overload")}
            & {r["offered_rate"] for r in t["sweep"]}
        )
        if common:
            rate = common[-1]
            vr = next(r for r in v["sweep"] if r["offered_rate"] == rate and not r.get("overload"))
            tr = next(r for r in t["sweep"] if r["offered_rate"] == rate)
            result["ratio_rate"] = rate
            result["load_ratio"] = round(vr["throughput_rps"] / max(tr["throughput_rps"], 1e-9), 1)
            result["load_tokens_ratio"] = round(
                vr["generated_tokens_per_s"] / max(tr["generated_tokens_per_s"], 1e-9), 1
            )
        raw, load, tok = result["engine_ratio"], result.get("load_ratio"), result.get("load_tokens_ratio")
        targets["vLLM throughput ≥ 5× transformers (generated tokens/s)"] = (
            f"{raw}× with 48 requests at once ({'MET' if raw >= 5 else 'NOT MET'}); {tok}× at the same Poisson "
            f"load of {result.get('ratio_rate')} req/s ({'MET' if tok is not None and tok >= 5 else 'NOT MET'}; "
            f"accepted replies/s {load}×, both engines shrink budgets under load)"
        )
    primary = runs[0] if runs else None
    if primary:
        sus = primary.get("sustainable_rate")
        if sus is None:
            targets["≥ 99% within deadline at a sustainable load"] = "NOT MET at any tested rate"
        else:
            row = next(r for r in primary["sweep"] if r["offered_rate"] == sus and not r.get("overload"))
            targets["≥ 99% within deadline at a sustainable load"] = (
                f"MET at {sus} req/s: {row['within_deadline_of_all'] * 100:.1f}% of all requests within "
                f"{args.deadline_ms} ms (complete, non-fallback replies: "
                f"{(1 - row['fallback_share_of_accepted']) * 100:.1f}% of accepted)"
            )
            over = next((r for r in primary["sweep"] if r.get("overload")), None)
            if over:
                p99 = over["e2e_ms"]["p99"]
                ok = (
                    over["rejected_429"] > 0
                    and p99 is not None
                    and p99 <= args.deadline_ms + 100
                    and not over["hangs"]
                )
                targets["3× load: 429s, accepted p99 ≤ deadline + 100 ms, no hangs"] = (
                    f"{'MET' if ok else 'NOT MET'}: {over['offered_rate']} req/s, {over['rejected_429']} of "
                    f"{over['requests']} refused with 429, accepted p99 {p99} ms, hangs {over['hangs']}"
                )
        if len(resolved) > 1:
            a, b = by.get((engines[0], resolved[0][0])), by.get((engines[0], resolved[1][0]))
            if a and b:
                result["model_comparison"] = [
                    {
                        "rate": ra["offered_rate"],
                        "rft_e2e_p50": ra["e2e_ms"]["p50"],
                        "compressed_e2e_p50": rb["e2e_ms"]["p50"],
                        "rft_goodput_rps": ra["goodput_rps"],
                        "compressed_goodput_rps": rb["goodput_rps"],
                    }
                    for ra, rb in zip(a["sweep"], b["sweep"], strict=False)
                    if not ra.get("overload")
                ]
    result["targets"] = targets
    result["environment"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_before": loadavg_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "total_s": round(time.monotonic() - t_start, 1),
    }
    result["command"] = "python benchmarks/serve_engines.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    write_report(result, args.out)
    shutil.rmtree(workdir, ignore_errors=True)  # server configs and logs (kept when a run fails)
    print(f"wrote {args.out}/serve_engines.{{json,md,png}} in {result['environment']['total_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
