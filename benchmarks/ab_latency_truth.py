"""The A/B log's latency against the viewer's clock, on livethink's own server with a refusing arm.

An arm that refuses part of its requests at once must not look fast in the A/B log: latency is taken on answered
replies only (``livethink.ab_test.analysis``). This benchmark starts the ``make demo`` server (vLLM, the RFT
student of ``--runs``) with a two-arm experiment on the same student: ``roomy`` (deadline ``--roomy-deadline-ms``)
and ``busy`` (``--busy-deadline-ms``, so tight that admission refuses part of its requests: those where fewer
than ``min_reply_tokens`` would fit). The HTTP simulator (``livethink.ab_test.simulate.simulate_http``) runs in
a process of its own, as a viewer's client does, and counts what each viewer got by its own clock; the A/B log
is then analysed from the store. Per arm:

- the log's latency p50 on answered replies against the client's p50 on the same requests (target: within 5 ms
  for the refusing arm, issue #58), and the p50 of every response unfiltered (what a refusal-blind log reports);
- sent / answered / fallback / refused / good from the log against the client's counts, request for request.

    .venv/bin/python benchmarks/ab_latency_truth.py [--runs runs/tiny] [--requests 240] [--busy-deadline-ms 400]

Writes ``benchmarks/results/ab_latency_truth.{json,md,png}``. Latency and goodput are the server's, not the
students' quality: the simulator asks its built-in tasks, so no data split is looked at.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the serving helpers, by name

from serve_common import ENV, OUT, RunRecord, pct, runs_label, save_figure, trained_student, write_outputs  # noqa: E402
from serve_load_client import livethink_server  # noqa: E402

TARGET_MS = 5.0
COUNTS = ("sent", "answered", "fallback", "refused", "errors", "good")
CLIENT = ("import asyncio, json, sys; from livethink.ab_test.simulate import simulate_http; "
          "print(json.dumps(asyncio.run(simulate_http(sys.argv[1], 'latency_truth', requests=int(sys.argv[2]), "
          "seed=7, concurrency=int(sys.argv[3]), timeout_s=30, run_id='lt')), default=str))")  # fmt: skip


def experiment_yaml(roomy_ms: int, busy_ms: int) -> str:
    """Two arms on the same student; only the deadline differs."""
    return ("name: latency_truth\ncontrol: roomy\n"
            "arms:\n"
            f"  - {{name: roomy, weight: 0.5, variant: rft, budget: {{deadline_ms: {roomy_ms}}}}}\n"
            f"  - {{name: busy, weight: 0.5, variant: rft, budget: {{deadline_ms: {busy_ms}}}}}\n"
            "min_viewers_per_arm: 2\nguardrails: [latency_ms, refusal_rate, fallback_rate, goodput]\n")  # fmt: skip


def compare_arm(log: dict[str, Any], client: dict[str, Any], unfiltered: list[float]) -> dict[str, Any]:
    """One arm: the log's counts and answered-only latency p50 against the client's, and the unfiltered p50."""
    log_counts = {"sent": log["responses"], "answered": log["answered"], "fallback": log["fallback"],
                  "refused": log["refused"], "errors": log["error"], "good": log["good"]}  # fmt: skip
    client_counts = {k: client[k] for k in COUNTS}
    log_p50, client_p50 = log["latency_ms"]["p50"], client["answered_p50_ms"]
    gap = None if log_p50 is None or client_p50 is None else round(client_p50 - log_p50, 2)
    return {
        "log": log_counts, "client": client_counts, "counts_equal": log_counts == client_counts,
        "log_answered_p50_ms": None if log_p50 is None else round(log_p50, 2),
        "client_answered_p50_ms": None if client_p50 is None else round(client_p50, 2),
        "gap_ms": gap, "unfiltered_p50_ms": pct(unfiltered, 50, 2),
        "goodput_log": log["goodput"], "goodput_client": client["goodput"],
    }  # fmt: skip


def targets(arms: dict[str, dict[str, Any]]) -> list[str]:
    """The issue's targets, met or not, in words."""
    out = []
    refusing = [a for a, r in arms.items() if r["log"]["refused"] > 0 and r["gap_ms"] is not None]
    if not refusing:
        out.append("no arm both refused and answered: the refusing-arm target was not exercised (tighten "
                   "--busy-deadline-ms or raise --concurrency)")
    for arm in refusing:
        g = arms[arm]["gap_ms"]
        out.append(f"{arm} (refused {arms[arm]['log']['refused']} of {arms[arm]['log']['sent']}): A/B latency p50 on "
                   f"answered replies {arms[arm]['log_answered_p50_ms']} ms vs the client's "
                   f"{arms[arm]['client_answered_p50_ms']} ms (gap {g:+.2f} ms; target within {TARGET_MS:.0f} ms): "
                   + ("met" if abs(g) <= TARGET_MS else "MISSED"))
    for arm, r in arms.items():
        out.append(f"{arm}: sent/answered/fallback/refused/errors/good from the log equal the client's: "
                   + ("met" if r["counts_equal"] else f"MISSED (log {r['log']}, client {r['client']})"))
    return out


def markdown(result: dict[str, Any]) -> str:
    rows = ["| arm | deadline | sent | answered | refused | fallback | goodput (log = client) | A/B p50, answered | "
            "client p50, answered | gap | A/B p50, every response unfiltered |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, r in result["arms"].items():
        c = r["log"]
        rows.append(f"| {arm} | {result['deadlines_ms'][arm]:,} ms | {c['sent']} | {c['answered']} | {c['refused']} | "
                    f"{c['fallback']} | {r['goodput_log']:.1%} = {r['goodput_client']:.1%} | "
                    f"{r['log_answered_p50_ms']} ms | {r['client_answered_p50_ms']} ms | {r['gap_ms']:+.2f} ms | "
                    f"{r['unfiltered_p50_ms']} ms |")
    return "\n".join([
        "# The A/B log's latency against the viewer's clock (a refusing arm)", "",
        f"Command: `{result['command']}`  ",
        f"Server: `configs/tiny/serve.yaml` with the RFT student of `{result['student']}` on vLLM; "
        f"{result['requests']} requests from the HTTP simulator in its own process, {result['concurrency']} at a "
        "time; latency in the A/B log runs on the server's clock from the request's arrival to its last byte, the "
        "client's from sending to the parsed reply.  ",
        f"Machine: {result['environment']}; load average (1, 5, 15 min) before {result['loadavg_before']}, after "
        f"{result['loadavg_after']}; {result['wall_s']:.0f} s.", "",
        *rows, "", "## Targets (issue #58)", "", *[f"- {t}" for t in result["targets"]], "",
        "![A/B latency against the client's](ab_latency_truth.png)", "",
    ])  # fmt: skip


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(result["arms"])
    x = np.arange(len(arms))
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for k, (key, label) in enumerate([("unfiltered_p50_ms", "A/B log, every response (refusal-blind)"),
                                      ("log_answered_p50_ms", "A/B log, answered replies"),
                                      ("client_answered_p50_ms", "client, answered replies")]):  # fmt: skip
        vals = [result["arms"][a][key] or 0 for a in arms]
        ax.bar(x + (k - 1) * 0.27, vals, 0.27, label=label)
    ax.set_xticks(x, [f"{a} ({result['deadlines_ms'][a]:,} ms)" for a in arms])
    ax.set_ylabel("latency p50 (ms)")
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny", help="make demo's runs folder")
    p.add_argument("--requests", type=int, default=240)
    p.add_argument("--concurrency", type=int, default=1,
                   help="viewers at once (each holds its slot until its outcomes are posted)")
    p.add_argument("--roomy-deadline-ms", type=int, default=3000)
    p.add_argument("--busy-deadline-ms", type=int, default=400)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    student = trained_student(p, args.runs)
    from livethink.ab_test.analysis import analyze
    from livethink.ab_test.store import EventStore

    work = Path(tempfile.mkdtemp(prefix="ab-latency-truth-"))
    (work / "exp.yaml").write_text(experiment_yaml(args.roomy_deadline_ms, args.busy_deadline_ms))
    db = work / "ab.db"
    sets = ["models=" + json.dumps({"rft": {"path": str(student)}}), "default_model=rft",
            "experiment=" + json.dumps({"file": str(work / "exp.yaml"), "store": f"sqlite:///{db}",
                                        "spool_dir": str(work / "spool")})]  # fmt: skip
    record = RunRecord("ab_latency_truth.py", argv)
    server = livethink_server(sets, work, "server")
    try:
        out = subprocess.run([sys.executable, "-c", CLIENT, server.url, str(args.requests), str(args.concurrency)],
                             capture_output=True, text=True, timeout=1800, cwd=ROOT, env={**os.environ, **ENV})  # fmt: skip
    finally:
        server.close()  # drains: every acknowledged event is in the store once it has exited
    if out.returncode != 0:
        print(out.stderr[-3000:], file=sys.stderr)
        return 1
    client = json.loads(out.stdout)
    with EventStore(db) as store:
        log = analyze(store, "latency_truth").summary["arms"]
        rows = store.fetch("latency_truth", "response", ["arm", "latency_ms"])
    arms = {arm: compare_arm(log[arm], client["per_arm"][arm], [ms for a, ms in rows if a == arm])
            for arm in ("roomy", "busy") if arm in client["per_arm"]}  # fmt: skip
    result: dict[str, Any] = {
        **record.fields(), "student": runs_label(args.runs), "requests": args.requests, "concurrency": args.concurrency,
        "deadlines_ms": {"roomy": args.roomy_deadline_ms, "busy": args.busy_deadline_ms},
        "client_errors": {k: client.get(k) for k in ("errors", "malformed", "outcome_errors", "refused_reasons")},
        "arms": arms,
    }  # fmt: skip
    result["targets"] = targets(arms)
    write_outputs(args.out, "ab_latency_truth", result, markdown(result), plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
