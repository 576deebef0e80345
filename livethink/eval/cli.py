"""`livethink eval`: correctness, helpfulness, tokens, latency and decode FLOPs of models side by side.

    livethink eval --model runs/rft/final --model runs/grpo_drpo/final --teacher scripted \
        --data artifacts/tiny/data --split test --out runs/eval
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from annotated_types import Ge, Gt, Le

from livethink.cli_args import FlagParser
from livethink.data.budget_forcing import REPLY_RESERVE
from livethink.data.io import read_tasks
from livethink.eval.harness import judge_completions, model_result, token_counter
from livethink.eval.metrics import sample_dicts
from livethink.eval.report import write_report
from livethink.eval.thinking_curve import DEFAULT_CAPS
from livethink.option_ranges import option_type


def evaluate_teacher(teacher_type: str, tasks, judge, tokenizer, temperature: float, seed: int,
                     opener_rate: float | None = None) -> dict:
    """Sample the teacher once per task and judge it like a model (tokens counted with the student tokenizer)."""
    from livethink.rft_distill.teachers.base import SamplingConfig
    from livethink.rft_distill.teachers.factory import make_teacher

    config: dict = {"type": teacher_type, "seed": seed}
    if opener_rate is not None:
        config["opener_rate"] = opener_rate
    teacher = make_teacher(config)
    completions = {}
    for samples in teacher.generate(tasks, k=1, sampling=SamplingConfig(temperature=temperature, seed=seed)):
        s = samples[0]
        completions[s.task_id] = (s.completion or "", s.finish_reason or "stop")
    samples = judge_completions(tasks, completions, judge, token_counter(tokenizer))
    return model_result(f"teacher ({teacher_type})", samples, active_params=None)


def build_parser() -> argparse.ArgumentParser:
    p = FlagParser(prog="livethink eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", default=[], help="HF checkpoint dir (repeat for several models)")
    p.add_argument("--name", action="append", default=[], help="display name per --model (same order)")
    p.add_argument("--teacher", choices=["scripted"], help="also evaluate the teacher on the same tasks")
    p.add_argument("--tokenizer", help="tokenizer for counting teacher tokens (default: the first model's)")
    p.add_argument("--teacher-opener-rate", type=option_type(float, Ge(0), Le(1)),
                   help="scripted teacher: share of traces that restate the question (the RFT run's teacher_opener_rate)")
    p.add_argument("--data", default="artifacts/tiny/data")
    p.add_argument("--split", default="test", choices=["train", "validation", "test", "holdout"],
                   help="holdout: published figures only; each run is appended to the holdout log")
    p.add_argument("--limit", type=option_type(int, Ge(0)), default=0, help="first N tasks only (0 = all)")
    p.add_argument("--engine", default="auto", choices=["auto", "vllm", "transformers"])
    p.add_argument("--calculator", action="store_true",
                   help="calculator-assisted decoding: the digits after a sum's '=' are computed, not sampled")
    p.add_argument("--device", default="auto",
                   help="transformers engine: torch device (auto: the accelerator if torch sees one, else cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="transformers engine: weights and compute dtype")
    p.add_argument("--batch-size", type=option_type(int, Ge(1)), default=16,
                   help="transformers engine: prompts per generate call (a GPU takes hundreds at once)")
    p.add_argument("--max-tokens", type=option_type(int, Ge(1)), default=768, help="completion tokens per task")
    p.add_argument("--latency-probes", type=option_type(int, Ge(0)), default=16,
                   help="prompts timed one at a time for TTFT and TPOT (0 = none)")
    p.add_argument("--judge", default="rubric", choices=["rubric", "llm"])
    p.add_argument("--judge-base-url")
    p.add_argument("--judge-model")
    p.add_argument("--seed", type=option_type(int, Ge(0)), default=0)
    p.add_argument("--thinking-caps", nargs="?", const=",".join(map(str, DEFAULT_CAPS)),
                   help="correctness against the thinking cap, budget-forced in token space as the server forces it, "
                   "and the model's minimum thinking budget (saved beside the checkpoint from validation only); "
                   "alone: the caps "
                   f"{','.join(map(str, DEFAULT_CAPS))} (and uncapped), or a list such as 0,16,32")
    p.add_argument("--reply-reserve", type=option_type(int, Ge(1)), default=REPLY_RESERVE,
                   help="reply tokens after the think block, forced or not, as the server caps a reply: its "
                   f"budget.reply_reserve (default {REPLY_RESERVE}, the server's default)")
    p.add_argument("--min-thinking-ratio", type=option_type(float, Gt(0), Le(1)), default=0.9,
                   help="the minimum thinking budget keeps this share of the uncapped correctness (default 0.9)")
    p.add_argument("--calibration-out", help="where the thinking calibration goes (default: on validation, "
                   "<model>/thinking_calibration.json, the floor the server reads; on another split, "
                   "<out>/thinking_curves/<name>; with several models, a directory)")
    p.add_argument("--out", default="runs/eval")
    p.add_argument("--note", help="a sentence shown at the top of the report (e.g. what the run is for)")
    return p


def _checkpoint_problem(path: str) -> str | None:
    """Why ``path`` is not a checkpoint directory (None when it is)."""
    p = Path(path)
    if not p.exists():
        return f"{path}: no such directory"
    if not p.is_dir():
        return f"{path}: not a directory (a Hugging Face checkpoint directory is expected)"
    if not (p / "config.json").is_file():
        return f"{path}: no config.json (not a Hugging Face checkpoint directory)"
    return None


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0), or an option out of its range: one line already printed (2)
        return int(exc.code or 0)
    if not args.model and not args.teacher:
        print("livethink eval: give at least one --model or --teacher", file=sys.stderr)
        return 2
    if args.judge == "llm" and not (args.judge_base_url and args.judge_model):
        print("livethink eval: --judge llm needs --judge-base-url and --judge-model", file=sys.stderr)
        return 2
    if args.name and len(args.name) != len(args.model):
        print("livethink eval: --name must be given once per --model", file=sys.stderr)
        return 2
    for model in args.model:
        problem = _checkpoint_problem(model)
        if problem:
            print(f"livethink eval: --model: {problem}", file=sys.stderr)
            return 2
    from livethink.eval.harness import evaluate_model
    from livethink.eval.thinking_curve import CALIBRATION_FILE, ThinkingCurve, parse_caps, save_curve
    from livethink.rewards.judge import make_judge

    try:
        caps = parse_caps(args.thinking_caps) if args.thinking_caps else ()
    except ValueError as exc:
        print(f"livethink eval: {exc}", file=sys.stderr)
        return 2

    split_file = Path(args.data) / f"{args.split}.jsonl"
    if not split_file.is_file():
        print(f"livethink eval: --data: {split_file} not found (run `livethink data generate --out {args.data}`)", file=sys.stderr)
        return 2
    tasks = read_tasks(split_file)
    if args.limit:
        tasks = tasks[: args.limit]
    judge_cfg = {"name": "rubric"} if args.judge == "rubric" else {"name": "llm", "base_url": args.judge_base_url, "model": args.judge_model}
    judge = make_judge(judge_cfg)
    results = []
    if args.teacher:
        from livethink.models.tokenizer import load_tokenizer

        tok_dir = args.tokenizer or (args.model[0] if args.model else None)
        if tok_dir is None:
            print("livethink eval: --tokenizer is needed to count teacher tokens without a --model", file=sys.stderr)
            return 2
        results.append(evaluate_teacher(args.teacher, tasks, judge, load_tokenizer(tok_dir), 1.0, args.seed,
                                        opener_rate=args.teacher_opener_rate))
    completions_dir = Path(args.out) / "completions"
    completions_dir.mkdir(parents=True, exist_ok=True)
    samples_dir = Path(args.out) / "samples"
    samples_dir.mkdir(parents=True, exist_ok=True)
    for i, model_dir in enumerate(args.model):
        name = args.name[i] if args.name else Path(model_dir).name
        result, samples, completions, per_cap = evaluate_model(model_dir, tasks, judge, args.engine, args.max_tokens, args.latency_probes, name,
                                                 calculator=args.calculator, device=args.device, dtype=args.dtype,
                                                 batch_size=args.batch_size,
                                                 thinking_caps=caps, min_thinking_ratio=args.min_thinking_ratio,
                                                 reply_reserve=args.reply_reserve)
        if "thinking_curve" in result:
            data = {**result["thinking_curve"], "split": args.split,
                    "command": "livethink eval " + shlex.join(argv if argv is not None else sys.argv[1:])}
            result["thinking_curve"] = data
            if args.calibration_out and len(args.model) > 1:
                target = Path(args.calibration_out) / name.replace("/", "_")
                target.mkdir(parents=True, exist_ok=True)
            elif args.calibration_out:
                target = Path(args.calibration_out)
            elif args.split == "validation":  # the floor the server reads: chosen on validation only
                target = Path(model_dir) / CALIBRATION_FILE
            else:  # a curve on test or holdout is a figure, never the served floor
                target = Path(args.out) / "thinking_curves" / name.replace("/", "_")
                target.mkdir(parents=True, exist_ok=True)
            result["thinking_curve"]["saved_to"] = str(save_curve(ThinkingCurve(**{
                **data, "caps": tuple(data["caps"]), "correct": tuple(data["correct"]),
                "helpful": tuple(data["helpful"])}), target))
        results.append(result)
        with (completions_dir / f"{name.replace('/', '_')}.jsonl").open("w") as fh:
            for task_id, (text, finish) in completions.items():
                fh.write(json.dumps({"task_id": task_id, "completion": text, "finish_reason": finish}) + "\n")
        # per-task verdicts, uncapped (cap null) and at each thinking cap: what paired comparisons read
        with (samples_dir / f"{name.replace('/', '_')}.jsonl").open("w") as fh:
            for cap, rows in [(None, samples), *per_cap.items()]:
                for row in sample_dicts(rows):
                    fh.write(json.dumps({"cap": cap, **row}) + "\n")
    meta = {"command": "livethink eval " + shlex.join(argv if argv is not None else sys.argv[1:]), "split": args.split,
            "n_tasks": len(tasks), "data": args.data, "judge": args.judge, "note": args.note}
    md = write_report(results, args.out, "livethink eval", meta)
    from livethink.eval.holdout_log import record_holdout_eval

    record_holdout_eval(args.split, command=meta["command"], n_tasks=len(tasks),
                        models=[*args.model, *([f"teacher ({args.teacher})"] if args.teacher else [])],
                        computed=["correctness", "helpfulness", "tokens", *(["thinking caps"] if caps else [])],
                        extra={"names": [r["name"] for r in results], "out": args.out})
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
