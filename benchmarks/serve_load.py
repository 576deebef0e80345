"""Serving load benchmark of the deployment users run: the `make demo` server (two A/B arms, trained students),
with latency by the client's clock, goodput per arm against the deadline, a cold start, and plain vLLM as the
reference.

    .venv/bin/python benchmarks/serve_load.py [--runs runs/tiny] [--data artifacts/tiny/data]
        [--model NAME=PATH ...] [--rates 4,8,16] [--duration 15] [--deadline-ms 1000] [--unloaded 30]
        [--deadlines 500,750,1000,1500,2500] [--sweep-requests 30] [--sweep-rate R] [--quick]
        [--skip-vllm] [--skip-cold] [--skip-sweep]

The full run, as published (2 CPU cores, tiny students, nothing else running), takes about 11 minutes (an
estimate: about 4 for scenarios 1-3, as measured before the sweep, and about 7 for the deadline sweep (4):
300 + 30 one-at-a-time requests, 6 x 60 arrivals at the load rate, 5 s pauses)::

    python benchmarks/serve_load.py --runs runs/tiny --rates 2,4,8 --duration 12 --unloaded 24

``--quick`` (rates 2,4 for 6 s, 8 questions per model and deadline, no cold start) takes about 5 minutes; it
is a smoke run, its intervals are too wide to quote.

Models: ``--model NAME=PATH`` (repeatable), by default ``rft`` = RUNS/rft/final and ``drpo`` =
RUNS/grpo/drpo_then_budget64/final, the demo's DRPO student trained for the cut (``--rft`` / ``--drpo`` set those two
paths). When the models are exactly ``rft`` and ``drpo`` the server runs the ``drpo_vs_rft`` experiment as ``make demo`` does (viewers hashed to arms, an arm
forced with ``arm``); otherwise no experiment, and each request names its model (``model``): one at a time the
model is forced, under load the arrivals take the models in turn.

Scenarios, one server at a time on 127.0.0.1:

1. **deployment**: ``livethink serve --config configs/tiny/serve.yaml`` with the models above and, for rft and
   drpo, the ``drpo_vs_rft`` experiment, as ``livethink.demo_job`` starts it. First each arm alone, one request
   at a time (``--unloaded`` held-out questions per arm, the arm forced): the unloaded goodput. Then open-loop
   Poisson arrivals of ``POST /v1/livestream/reply`` (viewers hashed to arms by the experiment) at each
   ``--rates`` for ``--duration`` s, then 3x the sustainable rate.
2. **cold**: a freshly started single-student server with a student that never stops (untrained weights:
   thinks until forced, replies until cut) hit at once with the overload rate, then again once warm.
3. **plain vLLM**: ``python -m vllm.entrypoints.openai.api_server`` with the first model (the RFT student), the
   same prompt text (``/v1/completions``), the same token cap (thinking cap + reply reserve) and sampling, at
   the same rates.
4. **goodput against the deadline** (on the servers of 1 and 3): at each ``--deadlines``, each model one
   request at a time (``--sweep-requests`` questions, the same ones at every deadline), then
   ``--sweep-requests`` x models Poisson arrivals at the deployment's sustainable rate (the highest ``--rates``
   every arm sustains, by the rule below; the lowest rate when some arm sustains none; ``--sweep-rate``
   overrides), the same arrivals and questions at every deadline, 5 s apart. The deadline is the request's
   ``deadline_ms``. Plain vLLM does not know the deadline: it answers the same questions once one at a time
   and once at the same rate, and each reply counts at each deadline by its client time.

Goodput is the one definition of ``livethink.eval.goodput``: the share of the requests sent that got a reply
from the model (not the fallback, not a refusal) judged correct by ``RubricJudge``, within the deadline by the
client's clock; 95% Wilson interval in the deadline table. Helpfulness is a separate column (correct AND
helpful, same conditions).

Per rate (and per arm): requests, accepted, 429, fallback, errors, hangs (no answer within deadline + 10 s);
client latency p50/p99/max; the server's own figure beside it and the largest gap; share of accepted within
the deadline by the client's clock; goodput. Sustainable rate per arm: the highest rate with ≥ 99.9% of
accepted replies within the deadline, p99 ≤ deadline + 100 ms, and goodput ≥ 90% of the arm's unloaded one.
Per model, load and deadline (4): sent, answered, correct, fallback, refused (429), late, errors, goodput with
its interval, correct and helpful, client p50 / p95 of the 200 replies.
Results: ``benchmarks/results/serve_load.{json,md,png}`` (the plot: goodput against the deadline). Loopback only;
every phase is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from serve_common import OUT, RFT_STUDENT, ROOT, SERVED_STUDENT, untrained_student
from serve_load_client import Client, livethink_server, one_at_a_time, open_loop, vllm_server
from serve_load_report import (
    by_arm,
    deployment_rate,
    meets_latency,
    summarize,
    sustainable_rates,
    sweep_row,
    write_report,
)

DEADLINES_MS = (500, 750, 1000, 1500, 2500)
SETTLE_S = 5.0  # pause before each loaded phase of the deadline sweep: the controller's load estimates settle
FULL = {"rates": "4,8,16", "duration": 15.0, "unloaded": 30, "sweep_requests": 30}
QUICK = {"rates": "2,4", "duration": 6.0, "unloaded": 8, "sweep_requests": 8}


# -- main -------------------------------------------------------------------------------------------------
def parse_models(items: list[str], runs: Path, rft: Path | None, drpo: Path | None,
                 notes: list[str]) -> dict[str, Path]:
    """``NAME=PATH`` items, in order; without any, rft and (where trained) drpo under ``runs``."""
    if not items:
        models = {"rft": rft or runs / RFT_STUDENT}
        drpo = drpo or runs / SERVED_STUDENT
        if (drpo / "config.json").is_file():
            models["drpo"] = drpo
        else:
            notes.append(f"{drpo} does not exist (the compressed student is not trained yet): the deployment runs "
                         "the RFT arm only, without the experiment.")
        items = [f"{k}={v}" for k, v in models.items()]
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--model expects NAME=PATH, got {item!r}")
        if name in out:
            raise ValueError(f"--model {name}: given twice")
        if not (Path(path) / "config.json").is_file():
            raise ValueError(f"--model {name}={path}: not a model directory (run `make demo` first)")
        out[name] = Path(path)
    return out


def experiment_arms(path: Path) -> Callable[[str], str | None]:
    """Viewer id -> its arm in the experiment at ``path``: the server's hashing, computed by the client."""
    from livethink.ab_test.assignment import Assigner
    from livethink.ab_test.experiment import load_experiment

    assigner = Assigner(load_experiment(path))
    return lambda viewer: assigner(viewer).arm


def sweep_deployment_unloaded(url: str, tasks: list, deadlines: list[int], names: list[str], experiment: bool,
                              n: int) -> list[dict[str, Any]]:
    """Each model one request at a time at each deadline: the first ``n`` questions, the arm (or model) forced."""
    rows = []
    for dl in deadlines:
        c = Client(url, "livethink", dl)
        for name in names:
            arm, model = (name, None) if experiment else (None, name)
            outs = asyncio.run(one_at_a_time(c, tasks[:n], arm, f"su{dl}-{name}", model))
            rows.append(sweep_row("livethink", name, "unloaded", None, dl, outs))
            print(json.dumps({"sweep": name, "load": "unloaded", "deadline_ms": dl, **rows[-1]}), flush=True)
    return rows


def sweep_deployment_loaded(url: str, tasks: list, deadlines: list[int], names: list[str],
                            assign: Callable[[str], str | None] | None, rate: float, n: int,
                            seed: int) -> list[dict[str, Any]]:
    """``n`` Poisson arrivals at ``rate`` at each deadline, the same arrivals (viewers, questions) every time.
    ``assign``: the experiment's arms (None: no experiment, the requests name the models in turn)."""
    rows = []
    for dl in deadlines:
        time.sleep(SETTLE_S)
        c = Client(url, "livethink", dl, assign=assign)
        outs, _ = asyncio.run(open_loop(c, tasks, rate, math.inf, seed, "sweep", max_requests=n,
                                        models=None if assign else names))
        for name in names:
            rows.append(sweep_row("livethink", name, "loaded", rate, dl, [o for o in outs if o.arm == name]))
            print(json.dumps({"sweep": name, "load": "loaded", "deadline_ms": dl, **rows[-1]}), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny", help=f"where {RFT_STUDENT} and {SERVED_STUDENT} are")
    p.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                   help="a model to serve (repeatable; default: rft and drpo under RUNS)")
    p.add_argument("--rft", type=Path, help=f"RFT student without --model (default: RUNS/{RFT_STUDENT})")
    p.add_argument("--drpo", type=Path, help=f"compressed student without --model (default: RUNS/{SERVED_STUDENT})")
    p.add_argument("--data", type=Path, default=ROOT / "artifacts/tiny/data")
    p.add_argument("--split", default="validation", choices=["validation", "test", "holdout"],
                   help="holdout: published figures only; each run is appended to the holdout log")
    p.add_argument("--rates", help=f"default {FULL['rates']} (--quick: {QUICK['rates']})")
    p.add_argument("--duration", type=float, help=f"s per rate; default {FULL['duration']:g} (--quick: {QUICK['duration']:g})")
    p.add_argument("--deadline-ms", type=int, default=1000, help="deadline of scenarios 1-3")
    p.add_argument("--unloaded", type=int,
                   help=f"questions per arm, one at a time; default {FULL['unloaded']} (--quick: {QUICK['unloaded']})")
    p.add_argument("--deadlines", default=",".join(map(str, DEADLINES_MS)), help="deadlines (ms) of the sweep")
    p.add_argument("--sweep-requests", type=int,
                   help="sweep: questions per model and deadline one at a time, and per model under load; "
                        f"default {FULL['sweep_requests']} (--quick: {QUICK['sweep_requests']})")
    p.add_argument("--sweep-rate", type=float, help="sweep's loaded rate (default: the deployment's sustainable one)")
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer rates and requests, no cold start")
    p.add_argument("--cold-rate", type=float, help="default: 3x the deployment's sustainable rate")
    p.add_argument("--skip-vllm", action="store_true")
    p.add_argument("--skip-cold", action="store_true")
    p.add_argument("--skip-sweep", action="store_true", help="no goodput-against-the-deadline sweep")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra config override for the livethink servers (e.g. engine.kind=transformers)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--tag", default="", help="results go to serve_load_<tag>.{json,md,png} (e.g. another deadline)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report-only", action="store_true",
                   help="only rewrite the Markdown, plot (and target verdicts) of OUT/serve_load[_TAG].json; no serving")
    args = p.parse_args(argv)
    if args.report_only:
        stem = f"serve_load_{args.tag}" if args.tag else "serve_load"
        src = args.out / f"{stem}.json"
        if not src.is_file():
            p.error(f"--report-only: {src} does not exist (run the benchmark first)")
        print(write_report(json.loads(src.read_text()), args.out, args.tag).read_text())
        return 0
    preset = QUICK if args.quick else FULL
    for key, value in preset.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    skip_cold = args.skip_cold or args.quick

    from livethink.data.io import read_tasks

    t_start = time.monotonic()
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    notes: list[str] = []
    try:
        arms = parse_models(args.model, args.runs, args.rft, args.drpo, notes)
        deadlines = sorted({int(d) for d in args.deadlines.split(",")})
    except ValueError as exc:
        p.error(str(exc))
    names = list(arms)
    experiment = set(names) == {"rft", "drpo"}
    first = names[0]
    workdir = Path(tempfile.mkdtemp(prefix="serve-load-"))
    tasks = read_tasks(args.data / f"{args.split}.jsonl")
    rates = [float(r) for r in args.rates.split(",")]
    dl = args.deadline_ms
    result: dict[str, Any] = {"deadline_ms": dl, "notes": notes, "split": args.split, "goodput_definition": "correct"}
    n_sweep = args.sweep_requests
    sweep_rows: list[dict[str, Any]] = []
    sweep_rate, sweep_rate_source = None, None

    # 1. the deployment (and 4., the deadline sweep on it)
    sets = ["models=" + json.dumps({k: {"path": str(v)} for k, v in arms.items()}), f"default_model={first}",
            *args.set]
    experiment_file = ROOT / "configs/ab/drpo_vs_rft.yaml"
    assign = None
    if experiment:
        sets += [f"experiment={{file: {experiment_file}, store: sqlite:///{workdir / 'ab.db'}}}"]
        assign = experiment_arms(experiment_file)
    route = None if experiment else names  # without the experiment, requests name their model in turn
    server = livethink_server(sets, workdir, "deployment")
    dep: dict[str, Any] = {"arms": {k: str(v) for k, v in arms.items()}, "experiment": experiment,
                           "startup_s": round(server.startup_s, 1)}
    try:
        c = Client(server.url, "livethink", dl, assign=assign)
        dep["models"] = httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"]
        unloaded = {}
        for arm in arms:
            forced_arm, model = (arm, None) if experiment else (None, arm)
            unloaded[arm] = summarize(asyncio.run(one_at_a_time(c, tasks[: args.unloaded], forced_arm, f"u-{arm}",
                                                                model)), dl)
            print(json.dumps({"unloaded": arm, **unloaded[arm]}), flush=True)
        dep["unloaded"] = unloaded
        if not args.skip_sweep:  # before any load: nothing to recover from
            sweep_rows += sweep_deployment_unloaded(server.url, tasks, deadlines, names, experiment, n_sweep)
        load = []
        for i, rate in enumerate(rates):
            stats: dict[str, Any] = {}
            outs, wall = asyncio.run(open_loop(c, tasks, rate, args.duration, args.seed + i, "load", models=route,
                                               stats=stats))
            row = {"rate": rate, "all": summarize(outs, dl, wall) | stats, "arms": by_arm(outs, dl, wall)}
            load.append(row)
            print(json.dumps({"rate": rate, **row["all"]}), flush=True)
        sustainable = sustainable_rates(load, unloaded, dl)
        lat_all = [r["rate"] for r in load if meets_latency(r["all"], dl)]
        over_rate = 3 * (max(lat_all) if lat_all else min(rates))
        stats = {}
        outs, wall = asyncio.run(open_loop(c, tasks, over_rate, args.duration, args.seed + 99, "over", models=route,
                                           stats=stats))
        load.append({"rate": over_rate, "overload": True, "all": summarize(outs, dl, wall) | stats,
                     "arms": by_arm(outs, dl, wall)})
        print(json.dumps({"rate": over_rate, "overload": True, **load[-1]["all"]}), flush=True)
        dep["load"], dep["sustainable"] = load, sustainable
        if not args.skip_sweep:
            if args.sweep_rate:
                sweep_rate, sweep_rate_source = args.sweep_rate, "--sweep-rate"
            else:
                sweep_rate, sweep_rate_source = deployment_rate(load[:-1], unloaded, dl)
            sweep_rows += sweep_deployment_loaded(server.url, tasks, deadlines, names, assign, sweep_rate,
                                                  n_sweep * len(names), args.seed + 200)
        status = httpx.get(f"{server.url}/v1/admin/status", timeout=10).json()
        dep["controller"], dep["engines"] = status["controller"], status["engines"]
    finally:
        server.close()
    result["deployment"] = dep
    # 2. cold start with a never-stopping student
    if not skip_cold:
        cold_rate = args.cold_rate or over_rate
        student = untrained_student(workdir)
        server = livethink_server([f"models.rft.path={student}", *args.set], workdir, "cold")
        try:
            c = Client(server.url, "livethink", dl)
            stats_c: dict[str, Any] = {}
            stats_w: dict[str, Any] = {}
            cold, wall_c = asyncio.run(open_loop(c, tasks, cold_rate, args.duration, args.seed + 7, "cold",
                                                 stats=stats_c))
            warm, wall_w = asyncio.run(open_loop(c, tasks, cold_rate, args.duration, args.seed + 8, "warm",
                                                 stats=stats_w))
        finally:
            server.close()
        result["cold"] = {"rate": cold_rate, "startup_s": round(server.startup_s, 1),
                          "cold": summarize(cold, dl, wall_c) | stats_c, "warm": summarize(warm, dl, wall_w) | stats_w}

    # 3. plain vLLM, same model and token cap (and 4., its replies at each deadline)
    if not args.skip_vllm:
        import yaml
        from transformers import AutoTokenizer

        from livethink.data.prompt import build_messages, render_prompt
        from livethink.data.reasoning_format import resolve

        cfg = yaml.safe_load((ROOT / "configs/tiny/serve.yaml").read_text())
        cap = int(cfg["budget"]["max_thinking_tokens"]) + int(cfg["budget"]["reply_reserve"])
        tok = AutoTokenizer.from_pretrained(str(arms[first]))
        fmt, _ = resolve("auto", tok, arms[first])
        prompts = {t.id: render_prompt(tok, build_messages(t), fmt, thinking=True) for t in tasks}  # as livethink
        params = {"max_tokens": cap, "temperature": cfg["sampling"]["temperature"], "top_p": cfg["sampling"]["top_p"]}
        server = vllm_server(arms[first], workdir)
        try:
            c = Client(server.url, "vllm", dl, prompts, params)
            vl = []
            for i, rate in enumerate([*rates, over_rate]):
                outs, wall = asyncio.run(open_loop(c, tasks, rate, args.duration, args.seed + i, "vllm"))
                vl.append({"rate": rate, "all": summarize(outs, dl, wall)})
                print(json.dumps({"vllm_rate": rate, **vl[-1]["all"]}), flush=True)
            if not args.skip_sweep:
                c = Client(server.url, "vllm", max(deadlines), prompts, params)
                alone = asyncio.run(one_at_a_time(c, tasks[:n_sweep], None, "vsu"))
                time.sleep(SETTLE_S)
                loaded, _ = asyncio.run(open_loop(c, tasks, sweep_rate, math.inf, args.seed + 200, "sweep",
                                                  max_requests=n_sweep * len(names)))
                for load_kind, outs, rate in (("unloaded", alone, None), ("loaded", loaded, sweep_rate)):
                    for d in deadlines:
                        sweep_rows.append(sweep_row("vllm", first, load_kind, rate, d, outs))
                        print(json.dumps({"sweep": "vllm", "load": load_kind, "deadline_ms": d, **sweep_rows[-1]}),
                              flush=True)
        finally:
            server.close()
        result["vllm"] = {"model": first, "max_tokens": cap, "startup_s": round(server.startup_s, 1), "load": vl}
    if not args.skip_sweep:
        result["deadline_sweep"] = {"deadlines_ms": deadlines, "requests_per_model": n_sweep,
                                    "loaded_requests": n_sweep * len(names), "load_rate": sweep_rate,
                                    "load_rate_source": sweep_rate_source, "settle_s": SETTLE_S, "rows": sweep_rows}

    result["environment"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "loadavg_before": loadavg_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                             "total_s": round(time.monotonic() - t_start, 1)}
    result["command"] = "python benchmarks/serve_load.py " + " ".join(argv if argv is not None else sys.argv[1:])
    md = write_report(result, args.out, args.tag)
    from livethink.eval.holdout_log import record_holdout_eval

    record_holdout_eval(args.split, command=result["command"], models=[str(v) for v in arms.values()],
                        computed=["goodput", "latency"], extra={"benchmark": "serve_load", "names": names})
    shutil.rmtree(workdir, ignore_errors=True)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
