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

from livethink.cli_args import FlagParser
from livethink.data.budget_forcing import REPLY_RESERVE
from livethink.data.io import read_tasks
from livethink.eval.harness import judge_completions, model_result, token_counter
from livethink.eval.report import write_report
from livethink.eval.thinking_curve import DEFAULT_CAPS


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
    p.add_argument("--teacher-opener-rate", type=float,
                   help="scripted teacher: share of traces that restate the question (the RFT run's teacher_opener_rate)")
    p.add_argument("--data", default="artifacts/tiny/data")
    p.add_argument("--split", default="test", choices=["train", "validation", "test"])
    p.add_argument("--limit", type=int, default=0, help="first N tasks only (0 = all)")
    p.add_argument("--engine", default="auto", choices=["auto", "vllm", "transformers"])
    p.add_argument("--calculator", action="store_true",
                   help="calculator-assisted decoding: the digits after a sum's '=' are computed, not sampled")
    p.add_argument("--device", default="auto",
                   help="transformers engine: torch device (auto: the accelerator if torch sees one, else cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="transformers engine: weights and compute dtype")
    p.add_argument("--batch-size", type=int, default=16,
                   help="transformers engine: prompts per generate call (a GPU takes hundreds at once)")
    p.add_argument("--max-tokens", type=int, default=768)
    p.add_argument("--latency-probes", type=int, default=16)
    p.add_argument("--judge", default="rubric", choices=["rubric", "llm"])
    p.add_argument("--judge-base-url")
    p.add_argument("--judge-model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--thinking-caps", nargs="?", const=",".join(map(str, DEFAULT_CAPS)),
                   help="correctness against the thinking cap, budget-forced in token space as the server forces it, "
                   "and the model's minimum thinking budget, saved beside the checkpoint; alone: the caps "
                   f"{','.join(map(str, DEFAULT_CAPS))} (and uncapped), or a list such as 0,16,32")
    p.add_argument("--reply-reserve", type=int, default=REPLY_RESERVE,
                   help="reply tokens after a forced end of thinking in the cap curve: the server's "
                   f"budget.reply_reserve (default {REPLY_RESERVE}, the server's default)")
    p.add_argument("--min-thinking-ratio", type=float, default=0.9,
                   help="the minimum thinking budget keeps this share of the uncapped correctness (default 0.9)")
    p.add_argument("--calibration-out", help="where the thinking calibration goes (default: "
                   "<model>/thinking_calibration.json; with several models, a directory)")
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
    args = build_parser().parse_args(argv)
    if not args.model and not args.teacher:
        print("error: give at least one --model or --teacher", file=sys.stderr)
        return 2
    if args.teacher_opener_rate is not None and not 0.0 <= args.teacher_opener_rate <= 1.0:
        print(f"error: --teacher-opener-rate must be in [0, 1], got {args.teacher_opener_rate}", file=sys.stderr)
        return 2
    if args.name and len(args.name) != len(args.model):
        print("error: --name must be given once per --model", file=sys.stderr)
        return 2
    for model in args.model:
        problem = _checkpoint_problem(model)
        if problem:
            print(f"error: --model: {problem}", file=sys.stderr)
            return 2
    from livethink.eval.harness import evaluate_model
    from livethink.eval.thinking_curve import CALIBRATION_FILE, ThinkingCurve, parse_caps, save_curve
    from livethink.rewards.judge import make_judge

    try:
        caps = parse_caps(args.thinking_caps) if args.thinking_caps else ()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not 0 < args.min_thinking_ratio <= 1:
        print(f"error: --min-thinking-ratio must be in (0, 1], got {args.min_thinking_ratio}", file=sys.stderr)
        return 2
    if args.reply_reserve < 1:
        print(f"error: --reply-reserve must be >= 1, got {args.reply_reserve}", file=sys.stderr)
        return 2
    if args.batch_size < 1:
        print(f"error: --batch-size must be >= 1, got {args.batch_size}", file=sys.stderr)
        return 2

    split_file = Path(args.data) / f"{args.split}.jsonl"
    if not split_file.is_file():
        print(f"error: --data: {split_file} not found (run `livethink data generate --out {args.data}`)", file=sys.stderr)
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
            print("error: --tokenizer is needed to count teacher tokens without a --model", file=sys.stderr)
            return 2
        results.append(evaluate_teacher(args.teacher, tasks, judge, load_tokenizer(tok_dir), 1.0, args.seed,
                                        opener_rate=args.teacher_opener_rate))
    completions_dir = Path(args.out) / "completions"
    completions_dir.mkdir(parents=True, exist_ok=True)
    for i, model_dir in enumerate(args.model):
        name = args.name[i] if args.name else Path(model_dir).name
        result, _, completions = evaluate_model(model_dir, tasks, judge, args.engine, args.max_tokens, args.latency_probes, name,
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
            else:
                target = Path(args.calibration_out or Path(model_dir) / CALIBRATION_FILE)
            result["thinking_curve"]["saved_to"] = str(save_curve(ThinkingCurve(**{
                **data, "caps": tuple(data["caps"]), "correct": tuple(data["correct"]),
                "helpful": tuple(data["helpful"])}), target))
        results.append(result)
        with (completions_dir / f"{name.replace('/', '_')}.jsonl").open("w") as fh:
            for task_id, (text, finish) in completions.items():
                fh.write(json.dumps({"task_id": task_id, "completion": text, "finish_reason": finish}) + "\n")
    meta = {"command": "livethink eval " + shlex.join(argv if argv is not None else sys.argv[1:]), "split": args.split,
            "n_tasks": len(tasks), "data": args.data, "judge": args.judge, "note": args.note}
    md = write_report(results, args.out, "livethink eval", meta)
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
