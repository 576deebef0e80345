"""Speech goodput: the streamed, speech-paced livestream reply against the reply in one piece, on the same tasks.

A speaking avatar needs only its first sentence by the deadline; the rest must come before it has finished
speaking the sentences before. On ``make demo``'s deployment (``configs/tiny/serve.yaml``, both students) each
task is asked of each arm twice, one request at a time, at ``--deadline-ms``: in one piece
(``POST /v1/livestream/reply``) and streamed (``stream: true``: ``plan``, ``sentence`` and ``done`` events; the
order alternates from task to task). Per arm:

- **goodput in one piece**: correct (the claim-checking rubric), not the fallback, the whole reply within the
  deadline by the client's clock, of requests sent (``livethink.eval.goodput``);
- **speech goodput**: correct, not the fallback, the *first sentence* within the deadline by the client's clock,
  and no speech stall (a sentence that came after the avatar had finished the ones before), of requests sent;
- their paired difference over the same tasks (``livethink.eval.intervals.paired_bootstrap``, 95%) and the exact
  McNemar test, the thinking tokens each mode got, the first sentence's latency (client clock), stalls, and
  retractions (streamed sentences missing from, or changed in, the ``done`` event's reply).

    .venv/bin/python benchmarks/speech_goodput.py [--runs runs/tiny] [--split holdout] [--tasks 200]

Writes ``benchmarks/results/speech_goodput.{json,md,png}``; a run on ``holdout`` is appended to the holdout log.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the serving helpers, by name

from serve_common import RFT_STUDENT, SERVED_STUDENT, pct  # noqa: E402
from serve_load_client import live_body, livethink_server  # noqa: E402

from livethink.eval.goodput import ViewerOutcome, wilson_interval  # noqa: E402
from livethink.eval.intervals import mcnemar_exact, paired_bootstrap  # noqa: E402

OUT = ROOT / "benchmarks/results"


def read_events(lines: Any) -> list[tuple[str, dict[str, Any]]]:
    """Server-sent events (``event:`` then one ``data:`` JSON line) as ``(name, data)``, in order."""
    events, name = [], None
    for line in lines:
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = json.loads(line[5:].strip())
            events.append((name or data.get("event", ""), data))
            name = None
    return events


def one_piece(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """The reply in one piece: status, client ms to the last byte, the reply and its flags."""
    t0 = time.perf_counter()
    r = client.post("/v1/livestream/reply", json=body)
    ms = (time.perf_counter() - t0) * 1000
    if r.status_code != 200:
        return {"status": r.status_code, "client_ms": ms}
    d = r.json()
    return {"status": 200, "client_ms": ms, "reply": d["reply"], "fallback": bool(d["fallback"]),
            "thinking_tokens": d["tokens"]["reasoning"], "reply_tokens": d["tokens"]["reply"],
            "cut": bool(d.get("cut_at_deadline")), "forced": bool(d.get("forced_end_of_thinking"))}


def streamed(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """The streamed reply: status, client ms to the first sentence event and to the last byte, the sentences,
    the ``done`` event's reply and flags, stalls, and whether the sentences joined are exactly the reply."""
    t0 = time.perf_counter()
    first_ms, lines = None, []
    with client.stream("POST", "/v1/livestream/reply", json={**body, "stream": True}) as r:
        if r.status_code != 200:
            r.read()
            return {"status": r.status_code, "client_ms": (time.perf_counter() - t0) * 1000}
        for line in r.iter_lines():
            if first_ms is None and line.startswith("event: sentence"):
                first_ms = (time.perf_counter() - t0) * 1000
            lines.append(line)
    total_ms = (time.perf_counter() - t0) * 1000
    events = read_events(lines)
    sentences = [d["text"] for name, d in events if name == "sentence"]
    done = next((d for name, d in events if name == "done"), None)
    if done is None:
        return {"status": 0, "client_ms": total_ms, "error": "no done event"}
    plan = next((d for name, d in events if name == "plan"), {})
    return {"status": 200, "client_ms": first_ms if first_ms is not None else total_ms, "total_ms": total_ms,
            "reply": done["reply"], "fallback": bool(done["fallback"]), "sentences": len(sentences),
            "retracted": "".join(sentences) != done["reply"], "stalls": int(done["stalls"]),
            "thinking_tokens": done["tokens"]["reasoning"], "reply_tokens": done["tokens"]["reply"],
            "thinking_cap": plan.get("thinking_cap"), "cut": bool(done.get("cut_at_deadline")),
            "server_first_sentence_ms": done["timings"].get("first_sentence_ms")}


def outcome(row: dict[str, Any], deadline_ms: float) -> ViewerOutcome:
    """The one goodput definition; a streamed reply is judged by its first sentence, and a stall makes it wrong
    (the avatar fell silent mid-reply)."""
    correct = row.get("correct")
    if correct is not None and row.get("stalls"):
        correct = False
    return ViewerOutcome(row["status"], row["client_ms"], deadline_ms, bool(row.get("fallback")), correct)


def summarize(rows: list[dict[str, Any]], deadline_ms: float) -> dict[str, Any]:
    """One arm and mode: goodput with its Wilson interval, answered / fallback / refused counts, thinking tokens,
    the client's latency (to the first sentence when streamed), stalls and retractions."""
    good = [outcome(r, deadline_ms).good for r in rows]
    ok = [r for r in rows if r["status"] == 200]
    low, high = wilson_interval(sum(good), len(good))
    latency = [r["client_ms"] for r in ok]
    return {"sent": len(rows), "good": int(sum(good)), "goodput": round(sum(good) / len(rows), 4),
            "goodput_ci95": [round(low, 4), round(high, 4)], "answered": sum(not r.get("fallback") for r in ok),
            "fallback": sum(bool(r.get("fallback")) for r in ok), "refused": sum(r["status"] == 429 for r in rows),
            "errors": sum(r["status"] not in (200, 429) for r in rows),
            "correct": sum(bool(r.get("correct")) for r in ok),
            "thinking_tokens_mean": round(float(np.mean([r["thinking_tokens"] for r in ok])), 1) if ok else None,
            "latency_ms": {"p50": pct(latency, 50), "p90": pct(latency, 90), "p99": pct(latency, 99),
                           "max": pct(latency, 100)},
            "in_deadline": sum(r["client_ms"] <= deadline_ms for r in ok),
            "stalls": sum(r.get("stalls", 0) for r in ok), "retracted": sum(bool(r.get("retracted")) for r in ok)}


def compare(whole: list[dict[str, Any]], speech: list[dict[str, Any]], deadline_ms: float) -> dict[str, Any]:
    """Speech goodput minus goodput in one piece over the same tasks: the paired bootstrap interval and the exact
    McNemar test, and the thinking tokens gained per reply answered both ways."""
    a = [int(outcome(r, deadline_ms).good) for r in speech]
    b = [int(outcome(r, deadline_ms).good) for r in whole]
    diff = paired_bootstrap(a, b)
    test = mcnemar_exact(a, b)
    both = [(s["thinking_tokens"], w["thinking_tokens"]) for s, w in zip(speech, whole, strict=True)
            if s["status"] == 200 and w["status"] == 200]
    gained = float(np.mean([s - w for s, w in both])) if both else None
    return {"difference": round(diff.difference, 4), "ci95": [round(diff.low, 4), round(diff.high, 4)],
            "excludes_zero": diff.excludes_zero, "only_speech": test.only_a, "only_whole": test.only_b,
            "mcnemar_p": round(test.p_value, 4), "thinking_tokens_gained": None if gained is None else round(gained, 1),
            "paired_tasks": len(both)}


def markdown(result: dict[str, Any]) -> str:
    dl = result["deadline_ms"]
    lines = ["# Speech goodput: the streamed, speech-paced reply against the reply in one piece", "",
             f"Command: `{result['command']}`  ",
             f"Machine: {result['environment']}; load average (1, 5, 15 min) before {result['loadavg_before']}, "
             f"after {result['loadavg_after']}; {result['wall_s']:.0f} s.  ",
             f"`make demo`'s deployment, {result['tasks']} `{result['split']}` tasks per arm, one request at a time, "
             f"deadline {dl:,} ms, speech rate {result['speech_rate_wps']:g} words/s; the claim-checking rubric.", "",
             "| arm | mode | sent | good | goodput [95%] | refused | fallback | thinking tokens | latency p50 / p99 ms "
             "(client) | stalls | retracted |", "|---|---|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for arm, r in result["arms"].items():
        for mode, label in (("whole", "in one piece (last byte)"), ("speech", "streamed (first sentence)")):
            s = r[mode]
            lines.append(f"| {arm} | {label} | {s['sent']} | {s['good']} | {100 * s['goodput']:.1f}% "
                         f"[{100 * s['goodput_ci95'][0]:.1f}, {100 * s['goodput_ci95'][1]:.1f}] | {s['refused']} | "
                         f"{s['fallback']} | {s['thinking_tokens_mean']} | {s['latency_ms']['p50']} / "
                         f"{s['latency_ms']['p99']} | {s.get('stalls', 0) if mode == 'speech' else '–'} | "
                         f"{s.get('retracted', 0) if mode == 'speech' else '–'} |")
    lines += ["", "| arm | speech − one piece (points) [95%, paired bootstrap] | only streamed / only one piece good "
              "| McNemar p | thinking tokens gained per reply |", "|---|---|---|---:|---:|"]
    for arm, r in result["arms"].items():
        c = r["paired"]
        lines.append(f"| {arm} | {100 * c['difference']:+.1f} [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}] | "
                     f"{c['only_speech']} / {c['only_whole']} | {c['mcnemar_p']} | {c['thinking_tokens_gained']} |")
    lines += ["", "## Targets", ""] + [f"- {t}" for t in result["targets"]]
    return "\n".join(lines) + "\n"


def targets(result: dict[str, Any]) -> list[str]:
    out = []
    dl = result["deadline_ms"]
    for arm, r in result["arms"].items():
        s, c = r["speech"], r["paired"]
        p99 = s["latency_ms"]["p99"]
        out.append(f"{arm}: first sentence p99 ≤ {dl:,} ms (client): {'MET' if p99 is not None and p99 <= dl else 'MISSED'} "
                   f"({p99} ms); 0 stalls: {'MET' if s['stalls'] == 0 else 'MISSED'} ({s['stalls']}); 0 retracted: "
                   f"{'MET' if s['retracted'] == 0 else 'MISSED'} ({s['retracted']}); speech goodput ≥ one piece: "
                   f"{'MET' if c['difference'] >= 0 else 'MISSED'} ({100 * c['difference']:+.1f} points, "
                   f"{'an interval that excludes 0' if c['excludes_zero'] else 'an interval that includes 0'})")
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(result["arms"])
    x = np.arange(len(arms))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for offset, mode, label in ((-0.2, "whole", "in one piece"), (0.2, "speech", "streamed, speech-paced")):
        vals = [100 * result["arms"][a][mode]["goodput"] for a in arms]
        err = np.array([[100 * (result["arms"][a][mode]["goodput"] - result["arms"][a][mode]["goodput_ci95"][0]),
                         100 * (result["arms"][a][mode]["goodput_ci95"][1] - result["arms"][a][mode]["goodput"])]
                        for a in arms]).T
        ax.bar(x + offset, vals, 0.4, yerr=err, capsize=4, label=label)
    ax.set_xticks(x, arms)
    ax.set_ylabel(f"goodput at {result['deadline_ms']:,} ms (%)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny", help="make demo's runs folder")
    p.add_argument("--data", type=Path, default=ROOT / "artifacts/tiny/data")
    p.add_argument("--split", default="holdout", choices=("validation", "holdout"),
                   help="holdout: published figures only; the run is appended to the holdout log")
    p.add_argument("--tasks", type=int, default=200)
    p.add_argument("--deadline-ms", type=int, default=1000)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    from livethink.data.io import read_tasks
    from livethink.rewards.judge import RubricJudge
    from livethink.serve.config import load_config

    arms = {"rft": args.runs / RFT_STUDENT, "drpo": args.runs / SERVED_STUDENT}
    missing = [str(path) for path in arms.values() if not (path / "config.json").exists()]
    if missing:
        p.error(f"--runs: no trained student at {', '.join(missing)}; run `make demo` first")
    tasks = read_tasks(args.data / f"{args.split}.jsonl")[: args.tasks]
    speech_rate = load_config(ROOT / "configs/tiny/serve.yaml").endpoints.livestream.speech_rate_wps
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    t0 = time.monotonic()
    sets = ["models=" + json.dumps({k: {"path": str(v)} for k, v in arms.items()}), "default_model=rft"]
    server = livethink_server(sets, Path(tempfile.mkdtemp(prefix="speech-goodput-")), "deployment")
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {arm: {"whole": [], "speech": []} for arm in arms}
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for i, task in enumerate(tasks):
                for arm in arms:
                    body = live_body(task, f"speech-{i}", args.deadline_ms, model=arm)
                    order = ("whole", "speech") if i % 2 == 0 else ("speech", "whole")
                    for mode in order:
                        row = one_piece(client, body) if mode == "whole" else streamed(client, body)
                        rows[arm][mode].append({"task_id": task.id, **row})
                if (i + 1) % 25 == 0:
                    print(f"{i + 1} of {len(tasks)} tasks", flush=True)
    finally:
        server.close()
    judge, by_id = RubricJudge(), {t.id: t for t in tasks}
    for arm in arms:
        for mode in ("whole", "speech"):
            for r in rows[arm][mode]:
                if r["status"] == 200 and not r["fallback"]:
                    r["correct"] = bool(judge.score(by_id[r["task_id"]], r["reply"]).correct)
    dl = args.deadline_ms
    result: dict[str, Any] = {
        "command": ("python benchmarks/speech_goodput.py " + shlex.join(argv if argv is not None else sys.argv[1:])).strip(),
        "environment": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
                       f"{platform.python_version()}",
        "split": args.split, "tasks": len(tasks), "deadline_ms": dl, "speech_rate_wps": speech_rate,
        "arms": {arm: {"whole": summarize(rows[arm]["whole"], dl), "speech": summarize(rows[arm]["speech"], dl),
                       "paired": compare(rows[arm]["whole"], rows[arm]["speech"], dl)} for arm in arms},
        "loadavg_before": loadavg_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.monotonic() - t0, 1),
    }
    result["targets"] = targets(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "speech_goodput.json").write_text(json.dumps({**result, "rows": rows}, indent=1) + "\n")
    (args.out / "speech_goodput.md").write_text(markdown(result))
    plot(result, args.out / "speech_goodput.png")
    from livethink.eval.holdout_log import record_holdout_eval

    record_holdout_eval(args.split, command=result["command"], models=[str(v) for v in arms.values()],
                        n_tasks=len(tasks), computed=["goodput", "speech goodput"],
                        extra={"benchmark": "speech_goodput"})
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
