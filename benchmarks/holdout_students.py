"""The ``make demo`` students on the held-out split, judged on the reply the server serves.

    .venv/bin/python benchmarks/holdout_students.py [--runs runs/tiny] [--data artifacts/tiny/data] [--limit 500]
        [--caps 0,32,64,96,128,192,256] [--out holdout_students]

One ``livethink eval --split holdout`` run (a line in ``benchmarks/results/holdout_log.jsonl``) of the scripted
teacher, the RFT student (``<runs>/rft/final``) and the served student (``<runs>/grpo/drpo_then_budget64/final``):
greedy, with the calculator the server runs, every reply as the server serves it (the reply stops
``--reply-reserve`` tokens after the think block, forced or not: ``livethink.eval.harness.served_completions``),
judged by the claim-checking rubric (a right answer next to a false claim is not correct). Thinking caps are forced
in token space as the server forces them; 256 is the server's ``max_thinking_tokens`` (``configs/tiny/serve.yaml``),
the most a served reply ever thinks. The floors are the students' own, calibrated on ``validation`` by ``make demo``.

Reported per model: correct, helpful, replies with a claim the docs contradict or do not support (Clopper–Pearson
95%), tokens; per cap: correct. Served student vs RFT on the same tasks: the paired difference (bootstrap over
tasks) and the exact McNemar test, at every cap. The budget targets of the shipped recipe (one stage-2 seed here:
``make demo`` trains one). Results: ``benchmarks/results/<out>.{json,md,png}`` with the load average before and
after (a figure taken under load is re-run, not published).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks/results"
SERVED_CAP = 256  # configs/tiny/serve.yaml budget.max_thinking_tokens
TARGET_CAP = 64


def _git_commit() -> str | None:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or None


def _read_samples(path: Path) -> dict[int | None, dict[str, dict[str, Any]]]:
    """cap (None: uncapped) -> task id -> the judged sample (``livethink eval``'s samples file)."""
    out: dict[int | None, dict[str, dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        out.setdefault(row["cap"], {})[row["task_id"]] = row
    return out


def _rate(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    from livethink.eval.intervals import pass_rate

    k = sum(1 for r in rows if r[key])  # a verdict (bool) or a count of claims (int > 0)
    return pass_rate(k, len(rows)).as_dict(digits=4) | {"successes": k, "n": len(rows)}


def model_row(name: str, path: str, samples: dict[int | None, dict[str, dict[str, Any]]], caps: list[int]) -> dict[str, Any]:
    """One student's figures from its per-task samples."""
    rows = list(samples[None].values())
    calibration = Path(path) / "thinking_calibration.json"
    floor = json.loads(calibration.read_text()).get("min_thinking_tokens") if calibration.is_file() else None
    n = len(rows)
    return {
        "name": name, "path": path, "n": n, "floor_validation": floor,
        "correct": _rate(rows, "correct"), "helpful": _rate(rows, "helpful"),
        "false_claim": _rate(rows, "false_claims"), "unsupported_claim": _rate(rows, "unsupported_claims"),
        "tokens": round(sum(r["total_tokens"] for r in rows) / n, 1),
        "reasoning_tokens": round(sum(r["reasoning_tokens"] for r in rows) / n, 1),
        "reply_tokens": round(sum(r["reply_tokens"] for r in rows) / n, 1),
        "reply_at_reserve": round(sum(r["finish_reason"] == "length" for r in rows) / n, 4),
        "correct_at_cap": {str(c): _rate(list(samples[c].values()), "correct") for c in caps},
    }


def paired(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A − B in correctness on the same tasks: paired bootstrap interval and exact McNemar."""
    from livethink.eval.intervals import mcnemar_exact, paired_bootstrap

    ids = sorted(a)
    x, y = [int(a[i]["correct"]) for i in ids], [int(b[i]["correct"]) for i in ids]
    m = mcnemar_exact(x, y)
    return paired_bootstrap(x, y).as_dict() | {"only_a": m.only_a, "only_b": m.only_b, "mcnemar_p": m.p_value}


def targets(served: dict[str, Any], rft: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The budget targets of #55 for one stage-2 seed, on this split."""
    c64 = served["correct_at_cap"][str(TARGET_CAP)]["mean"]
    need64 = 0.9 * rft["correct"]["mean"]
    floor = served["floor_validation"]
    return {
        "correct_at_64_vs_rft": {"value": c64, "target": round(need64, 4), "met": c64 >= need64},
        "floor_tokens": {"value": floor, "target": TARGET_CAP, "met": floor is not None and floor <= TARGET_CAP},
        "correct_vs_rft": {"value": served["correct"]["mean"], "target": round(rft["correct"]["mean"] - 0.02, 4),
                           "met": served["correct"]["mean"] >= rft["correct"]["mean"] - 0.02},
        "helpful_vs_rft": {"value": served["helpful"]["mean"], "target": rft["helpful"]["mean"],
                           "met": served["helpful"]["mean"] >= rft["helpful"]["mean"]},
        "tokens_vs_rft": {"value": served["tokens"], "target": round(0.5 * rft["tokens"], 1),
                          "met": served["tokens"] <= 0.5 * rft["tokens"]},
    }


def markdown(result: dict[str, Any]) -> str:
    def pct(cell: dict[str, Any]) -> str:
        return f"{100 * cell['mean']:.1f}% [{100 * cell['low']:.1f}, {100 * cell['high']:.1f}]"

    caps = result["caps"]
    lines = [f"# The make demo students on holdout ({result['n_tasks']} tasks), as served", "",
             f"`{result['command']}` at {result['commit']}; load average {result['load_before']} before, "
             f"{result['load_after']} after; {result['wall_s']:.0f} s. Judge: claim-checking rubric; every reply "
             f"stops {result['reply_reserve']} tokens after its think block, as the server stops it.", "",
             "| model | correct | helpful | false claim | unsupported claim | tokens | reply at its reserve | floor (validation) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    t = result["teacher"]
    lines.append(f"| scripted teacher | {pct(t['correct'])} | {pct(t['helpful'])} | {pct(t['false_claim'])} | "
                 f"{pct(t['unsupported_claim'])} | {t['tokens']:.1f} | – | – |")
    for m in result["models"]:
        lines.append(f"| {m['name']} | {pct(m['correct'])} | {pct(m['helpful'])} | {pct(m['false_claim'])} | "
                     f"{pct(m['unsupported_claim'])} | {m['tokens']:.1f} | {100 * m['reply_at_reserve']:.1f}% | "
                     f"{m['floor_validation']} |")
    lines += ["", "Correct (%) at each thinking cap (256: the server's most), Clopper–Pearson 95%:", "",
              "| model | " + " | ".join(f"cap {c}" for c in caps) + " |", "|---|" + "---:|" * len(caps)]
    for m in result["models"]:
        lines.append(f"| {m['name']} | " + " | ".join(pct(m["correct_at_cap"][str(c)]) for c in caps) + " |")
    lines += ["", "Served student − RFT student, paired on the same tasks (bootstrap 95% over tasks; exact McNemar):", "",
              "| cap | difference (pts) | 95% | only served right | only RFT right | McNemar p |", "|---|---:|---:|---:|---:|---:|"]
    for cap, d in result["paired"].items():
        lines.append(f"| {cap} | {100 * d['difference']:+.1f} | [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] | "
                     f"{d['only_a']} | {d['only_b']} | {d['mcnemar_p']:.3g} |")
    lines += ["", "Budget targets (one stage-2 seed):", "", "| target | value | needs | met |", "|---|---:|---:|---|"]
    for name, tg in result["targets"].items():
        lines.append(f"| {name} | {tg['value']} | {tg['target']} | {'yes' if tg['met'] else 'no'} |")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    caps = result["caps"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for m in result["models"]:
        cells = [m["correct_at_cap"][str(c)] for c in caps]
        mean = [100 * c["mean"] for c in cells]
        err = [[100 * (c["mean"] - c["low"]) for c in cells], [100 * (c["high"] - c["mean"]) for c in cells]]
        ax.errorbar(caps, mean, yerr=err, marker="o", capsize=3, label=m["name"])
    ax.set_xlabel("thinking cap (tokens)")
    ax.set_ylabel("correct (%), as served")
    ax.set_title(f"holdout, {result['n_tasks']} tasks, Clopper–Pearson 95%")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny")
    p.add_argument("--data", type=Path, default=ROOT / "artifacts/tiny/data")
    p.add_argument("--served", default="grpo/drpo_then_budget64/final", help="the served student, under --runs")
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--caps", default="0,32,64,96,128,192,256")
    p.add_argument("--reply-reserve", type=int, default=48)
    p.add_argument("--out", default="holdout_students")
    args = p.parse_args(argv)
    rft, served = args.runs / "rft/final", args.runs / args.served
    for what in (rft, served, args.data / "holdout.jsonl"):
        if not what.exists():
            print(f"holdout_students: {what} not found (run `make demo` first)", file=sys.stderr)
            return 2
    caps = [int(c) for c in args.caps.split(",")]
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="holdout-students-") as tmp:
        command = [sys.executable, "-m", "livethink.cli", "eval", "--split", "holdout", "--data", str(args.data),
                   "--limit", str(args.limit), "--teacher", "scripted",
                   "--model", str(rft), "--name", "rft-student", "--model", str(served), "--name", "served-student",
                   "--thinking-caps", args.caps, "--reply-reserve", str(args.reply_reserve), "--latency-probes", "0",
                   "--engine", "vllm", "--calculator", "--out", tmp]
        done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            print(f"holdout_students: livethink eval exited with {done.returncode}", file=sys.stderr)
            return done.returncode
        wall = time.perf_counter() - started
        load_after = [round(x, 2) for x in os.getloadavg()]
        report = json.loads((Path(tmp) / "eval.json").read_text())
        samples = {name: _read_samples(Path(tmp) / "samples" / f"{name}.jsonl") for name in ("rft-student", "served-student")}
    teacher = next(r for r in report["results"] if r["name"].startswith("teacher"))
    teacher_rows = teacher["overall"]
    n = teacher_rows["n"]
    from livethink.eval.intervals import pass_rate

    def cell(rate: float) -> dict[str, Any]:
        k = round(rate * n)
        return pass_rate(k, n).as_dict(digits=4) | {"successes": k, "n": n}

    models = [model_row("RFT student", str(rft), samples["rft-student"], caps),
              model_row("served student (DRPO, then trained for the cut)", str(served), samples["served-student"], caps)]
    a, b = samples["served-student"], samples["rft-student"]
    result = {
        "benchmark": "holdout_students", "split": "holdout", "n_tasks": models[0]["n"], "caps": caps,
        "reply_reserve": args.reply_reserve, "judge": "rubric (claim-checking)",
        "command": "python benchmarks/holdout_students.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "eval_command": " ".join(command[2:]), "commit": _git_commit(), "machine": platform.machine(),
        "cpus": os.cpu_count(), "load_before": load_before, "load_after": load_after, "wall_s": round(wall, 1),
        "teacher": {"correct": cell(teacher_rows["correctness"]), "helpful": cell(teacher_rows["helpfulness"]),
                    "false_claim": cell(teacher_rows.get("false_claim_rate", 0.0)),
                    "unsupported_claim": cell(teacher_rows.get("unsupported_claim_rate", 0.0)),
                    "tokens": teacher_rows["total_tokens"]},
        "models": models,
        "paired": {("uncapped" if cap is None else str(cap)): paired(a[cap], b[cap]) for cap in [*caps, None]},
    }
    result["targets"] = targets(models[1], models[0])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{args.out}.md").write_text(markdown(result))
    plot(result, RESULTS / f"{args.out}.png")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
