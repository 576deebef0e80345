"""Stage-2 rollout modes at equal budget: ``sync`` (TRL's loop), ``tail`` (tail batching), ``decoupled``
(rollout–train decoupling, a vLLM server beside the trainer) and ``both`` (tail batching + decoupled), on the tiny
student with the band variant, once per stage-2 seed; each run's final student evaluated on the test split.

    .venv/bin/python benchmarks/rollouts.py [--modes sync,tail,decoupled,both] [--seeds 0,1,2] [--steps 96] \\
        [--reuse] [--smollm2] [--out benchmarks/results/rollouts]

Per mode (mean and 95% t-interval over seeds): the run's wall time, completions/s, the idle share of the rollout
engine and of the trainer (how each is measured: ``rollouts_runs``), the completion lengths (tail: kept in short
rounds vs deferred to long rounds), the largest staleness against its bound, and the final student's tokens,
correctness and helpfulness; the speed-up against sync and whether each mode's tokens, C and H lie inside sync's
95% interval. A mode the trainer's config validation refuses is reported as "not supported" with its error.
``--smollm2`` also runs SmolLM2 with LoRA (``configs/smollm2/grpo.yaml``) for sync and the fastest other mode.

Writes ``<out>.json``, ``<out>.md`` and ``<out>.png``; runs go to ``--runs-dir/<mode>/seed<k>`` (``--reuse`` keeps
finished ones). The load average is recorded before and after: run it on an otherwise idle machine. ``--smoke`` is a
miniature (2 steps of 2 prompts × 2 completions of 32 tokens, 4 test tasks evaluated on transformers) for the test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from compression import parse_seeds
from compression_runs import ROOT, eval_cmd, run
from rollouts_report import analyse, markdown, merge, plot
from rollouts_runs import MAX_STALENESS, MODES, bench_env, train_and_record, unsupported

SMOLLM2 = {"config": "configs/smollm2/grpo.yaml", "model": "runs/smollm2/rft/final", "data_dir": "examples/my_shop"}
SMOKE = {"steps": 2, "prompts_per_step": 2, "generations": 2, "max_completion_length": 32, "tail_short_tokens": 16,
         "eval_n": 4, "engine": "transformers",
         "eval_max_tokens": 64, "max_model_len": 512, "n_prompts": 16}
IDLE_NOTE = ("Idle shares over the training loop: the rollout engine's = 1 − its generation time / loop time (every "
             "generation call timed, vLLM's or the policy's own `generate`: `rollout/engine_busy_s`); the trainer's "
             "= the time it waited for rollouts / loop time, which with a colocated engine (sync, tail) is that same "
             "generation time and with the server (decoupled, both) the summed `decoupled/wait_s`.")


def parse_modes(text: str) -> list[str]:
    modes = [m for m in text.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes or len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"modes from {', '.join(MODES)}, comma-separated, none repeated; got {text!r}")
    return modes


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", type=parse_modes, default=list(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    p.add_argument("--seeds", type=lambda s: parse_seeds(s.replace(" ", ",")), default=[0, 1, 2],
                   help="stage-2 seeds, e.g. 0,1,2")
    p.add_argument("--steps", type=int, default=96, help="GRPO steps per run (the band config's max_steps)")
    p.add_argument("--config", default="configs/tiny/grpo_band.yaml")
    p.add_argument("--rft", default="runs/tiny/rft/final", help="the RFT student every run starts from")
    p.add_argument("--data-dir", default="artifacts/tiny/data")
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--max-completion-length", type=int, default=384)
    p.add_argument("--tail-short-tokens", type=int, default=320, help="tail and both: the short rounds' limit. A "
                   "group is deferred when any of its completions reaches it, so it sits near the 95th percentile of "
                   "the completion lengths (the tiny band runs: mean 210, max 330-384 of 384), not at half the cap")
    p.add_argument("--n-prompts", type=int, default=0, help="training prompts (0 = the whole train split)")
    p.add_argument("--max-model-len", type=int, default=1024, help="vLLM context (colocated engine and server)")
    p.add_argument("--rollout-engine", choices=("vllm", "transformers"), default="vllm",
                   help="sync and tail: colocated vLLM or the policy's own transformers generate (the decoupled "
                   "modes always use a vLLM server)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the trainer runs (cuda: bf16)")
    p.add_argument("--engine", default="vllm", help="eval engine (harness): vllm | transformers | auto")
    p.add_argument("--eval-n", type=int, default=0, help="test tasks evaluated (0 = the whole split, 500)")
    p.add_argument("--eval-max-tokens", type=int, default=768)
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads per process")
    p.add_argument("--runs-dir", default="runs/tiny/bench_rollouts")
    p.add_argument("--reuse", action="store_true", help="reuse finished runs and their evaluations in --runs-dir")
    p.add_argument("--out", default="benchmarks/results/rollouts", help="writes <out>.json, <out>.md, <out>.png")
    p.add_argument("--smollm2", action="store_true", help="also SmolLM2 + LoRA (configs/smollm2/grpo.yaml): sync and "
                   "the fastest other mode")
    p.add_argument("--smollm2-steps", type=int, default=8, help="GRPO steps of each SmolLM2 run")
    p.add_argument("--smoke", action="store_true", help="a miniature run for the test: " + json.dumps(SMOKE))
    p.add_argument("--merge", nargs="+", metavar="REPORT.json", default=[], help="write one report from these "
                   "reports of the same settings (e.g. seeds run on separate machines) to --out, training nothing")
    p.add_argument("--report-only", action="store_true",
                   help="redo the analysis, report and plot of <out>.json from its records, training nothing")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more `livethink grpo` options, last")
    args = p.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    for name in ("steps", "prompts_per_step", "generations", "max_completion_length", "smollm2_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    args.latency_probes, args.thinking_caps, args.calculator = 0, "", False  # compression_runs.eval_cmd's settings
    return args


def machine(device: str) -> str:
    """The machine in words: CPU architecture and count, Python, and the GPU when the runs use one."""
    text = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}"
    if device == "cuda":
        import torch

        text += f", {torch.cuda.get_device_name(0)}"
    return text


def evaluate(args, model: Path, key: str, env: dict[str, str]) -> dict[str, Any]:
    """The harness result of ``model`` on the test split (a subprocess; reused with ``--reuse`` when newer)."""
    path = args.runs / "eval" / f"{key}.json"
    fresh = path.is_file() and path.stat().st_mtime >= (model / "config.json").stat().st_mtime
    if not (args.reuse and fresh):
        run(eval_cmd(args, model, key, path), args.runs / "eval" / f"{key}.log", env)
    o = json.loads(path.read_text())["result"]["overall"]
    return {"tokens": o["total_tokens"], "correctness": o["correctness"], "helpfulness": o["helpfulness"],
            "eval_tasks": o["n"]}


def run_modes(args, modes: list[str], env: dict[str, str], tag: str, log) -> tuple[list[dict[str, Any]], list]:
    """Every (seed, mode) run trained and evaluated; a failed run is reported and left out."""
    records, failed = [], []
    for seed in args.seeds:
        for mode in modes:
            try:
                record, final = train_and_record(args, mode, seed, env)
                record.update(evaluate(args, final, f"{tag}{mode}.seed{seed}", env))
            except (RuntimeError, ValueError, OSError) as exc:
                failed.append({"mode": mode, "seed": seed, "error": str(exc).splitlines()[0]})
                log(f"FAILED {tag}{mode} seed {seed}: {exc}")
                continue
            records.append(record)
            log(f"{tag}{mode} seed {seed}: {json.dumps({k: v for k, v in record.items() if k != 'step_lengths'})}")
    return records, failed


def write_report(report: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    plot(report, out.with_suffix(".png"))
    print(markdown(report))


def merge_reports(args, argv: list[str] | None) -> int:
    """``--merge``: one report from several, nothing trained."""
    out = (ROOT / args.out).resolve()
    command = "python " + shlex.join(["benchmarks/rollouts.py", *(argv if argv is not None else sys.argv[1:])])
    try:
        reports = [json.loads(Path(path).read_text()) for path in args.merge]
        report = merge(reports, command, str(out))
    except (OSError, json.JSONDecodeError, KeyError, ValueError) as exc:
        print(f"rollouts: {exc}", file=sys.stderr)
        return 2
    write_report(report, out)
    return 0


def rebuild_report(out: Path) -> int:
    """``--report-only``: the analysis of ``<out>.json`` redone from its per-run records (tiny and SmolLM2)."""
    report = json.loads(out.with_suffix(".json").read_text())
    for part in ("tiny", "smollm2"):
        if report.get(part):
            report[part].update(analyse(report[part]["records"]))
    write_report(report, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.merge:
        return merge_reports(args, argv)
    if args.report_only:
        return rebuild_report((ROOT / args.out).resolve())
    started, loadavg_before = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]

    def log(msg: str) -> None:
        print(f"[{(time.perf_counter() - started) / 60:5.1f} min] {msg}", flush=True)

    args.rft, args.data_dir = (ROOT / args.rft).resolve(), (ROOT / args.data_dir).resolve()
    args.runs, out = (ROOT / args.runs_dir).resolve(), (ROOT / args.out).resolve()
    if not (args.rft / "config.json").is_file():
        print(f"no RFT student at {args.rft}: run `livethink rft --config configs/tiny/rft.yaml` first", file=sys.stderr)
        return 2
    if not (args.data_dir / "test.jsonl").is_file():
        print(f"no test split at {args.data_dir}/test.jsonl", file=sys.stderr)
        return 2
    env = bench_env(args.threads)
    refused = {m: why for m in args.modes if (why := unsupported(m, args.config))}
    for mode, why in refused.items():
        log(f"{mode}: not supported: {why}")
    runnable = [m for m in args.modes if m not in refused]
    args.model, args.smollm2_run = args.rft, False
    args.completions_per_step = args.prompts_per_step * args.generations
    tiny, failed = run_modes(args, runnable, env, "", log)
    report: dict[str, Any] = {"tiny": {"records": tiny, **analyse(tiny)}, "unsupported": refused, "failed_runs": failed}
    staleness_ok = report["tiny"]["staleness_ok"]
    if args.smollm2:
        report["smollm2"] = smollm2(args, report["tiny"]["best_mode"], env, log, failed)
        staleness_ok = staleness_ok and report["smollm2"]["staleness_ok"]
    report["staleness_ok"] = staleness_ok
    command = "python " + shlex.join(["benchmarks/rollouts.py", *(argv if argv is not None else sys.argv[1:])])
    report["meta"] = {
        "command": command, "machine": machine(args.device), "device": args.device,
        "rollout_engine": args.rollout_engine,
        "threads": args.threads, "date": time.strftime("%Y-%m-%d %H:%M"), "config": args.config,
        "rft": str(args.rft.relative_to(ROOT) if args.rft.is_relative_to(ROOT) else args.rft),
        "modes": args.modes, "seeds": args.seeds, "steps": args.steps, "prompts_per_step": args.prompts_per_step,
        "generations": args.generations, "max_completion_length": args.max_completion_length,
        "tail_short_tokens": args.tail_short_tokens, "max_staleness": MAX_STALENESS, "eval_tasks": args.eval_n or "all",
        "eval_max_tokens": args.eval_max_tokens, "calculator": False, "idle_note": IDLE_NOTE, "out": str(out),
        "loadavg_before": loadavg_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_min": round((time.perf_counter() - started) / 60, 1)}
    if tiny:
        report["meta"]["eval_tasks"] = tiny[0]["eval_tasks"]
    write_report(report, out)
    return 0 if tiny and not failed else 1


def smollm2(args, best: str | None, env: dict[str, str], log, failed: list) -> dict[str, Any]:
    """SmolLM2 + LoRA for sync and ``best``, on its own config, student and data (``SMOLLM2``)."""
    import yaml

    cfg = yaml.safe_load((ROOT / SMOLLM2["config"]).read_text())
    sub = argparse.Namespace(**vars(args))
    sub.config, sub.smollm2_run, sub.steps = SMOLLM2["config"], True, args.smollm2_steps
    sub.model = sub.rft = (ROOT / SMOLLM2["model"]).resolve()
    sub.data_dir = (ROOT / SMOLLM2["data_dir"]).resolve()
    sub.runs = args.runs / "smollm2"
    sub.completions_per_step = int(cfg["per_device_train_batch_size"]) * int(cfg.get("gradient_accumulation_steps", 1))
    if not (sub.model / "config.json").is_file():
        failed.append({"mode": "smollm2", "seed": None, "error": f"no SmolLM2 student at {sub.model}: run `livethink "
                       f"rft --config configs/smollm2/rft.yaml` first"})
        return {"records": [], **analyse([])}
    records, bad = run_modes(sub, ["sync", *([best] if best else [])], env, "smollm2-", log)
    failed += bad
    return {"records": records, **analyse(records)}


if __name__ == "__main__":
    raise SystemExit(main())
