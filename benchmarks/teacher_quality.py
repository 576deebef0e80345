"""Scripted-teacher quality under the rubric judge: correctness / helpfulness rates (overall and per question
kind) and mean trace length vs the minimal correct trace.

    .venv/bin/python benchmarks/teacher_quality.py                      # 1,000 samples on the train split
    .venv/bin/python benchmarks/teacher_quality.py --tokenizer DIR      # also count tokens with a HF tokenizer
    .venv/bin/python benchmarks/teacher_quality.py --train-tokenizer    # ... with a BPE trained here on the corpus

Tasks come from ``--data DIR`` (``livethink data generate`` output) or, by default, are generated in memory
(seed 0, the same records as ``livethink data generate --seed 0``). Writes ``teacher_quality.json`` and
``teacher_quality.md`` to ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from livethink.data.io import read_tasks
from livethink.data.schema import Task
from livethink.rewards import RubricJudge
from livethink.rewards.brevity import count_tokens
from livethink.rft_distill.teachers import SamplingConfig, ScriptedTeacher, minimal_trace


def load_train(data: str | None, n_tasks: int, seed: int) -> list[Task]:
    if data:
        tasks = read_tasks(Path(data) / "train.jsonl")
    else:
        from livethink.data.liveshop.generate import generate

        tasks = generate(seed=seed, n_train=max(n_tasks, 1), n_validation=0, n_test=0).tasks["train"]
    if len(tasks) < n_tasks:
        raise SystemExit(f"need {n_tasks} train tasks, found {len(tasks)}")
    return tasks[:n_tasks]


def train_corpus_tokenizer(tasks: list[Task], teacher: ScriptedTeacher):
    """The student's byte-level BPE (``livethink.models.tokenizer``) trained on the task texts and on teacher
    samples drawn with another seed, as the embedded pipeline trains it."""
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    samples = (s.completion for b in teacher.generate(tasks, 1, SamplingConfig(seed=12345)) for s in b)
    return train_tokenizer([*corpus_from_tasks(tasks), *samples], vocab_size=4096)


def rate(values: list[bool]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def run(args: argparse.Namespace) -> dict:
    if args.n % args.k:
        raise SystemExit(f"--n ({args.n}) must be a multiple of --k ({args.k})")
    tasks = load_train(args.data, args.n // args.k, args.data_seed)
    by_id = {t.id: t for t in tasks}
    teacher = ScriptedTeacher(error_rate=args.error_rate, verbosity=args.verbosity)
    sampling = SamplingConfig(temperature=args.temperature, seed=args.seed)
    tokenizer, tokenizer_name = None, args.tokenizer
    if args.tokenizer:
        from livethink.models.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(args.tokenizer)
    elif args.train_tokenizer:
        tokenizer = train_corpus_tokenizer(tasks, teacher)
        tokenizer_name = f"BPE trained here (vocab {len(tokenizer)}) on the tasks + other-seed teacher samples"
    judge = RubricJudge()

    start = time.perf_counter()
    samples = [s for batch in teacher.generate(tasks, args.k, sampling) for s in batch]
    gen_s = time.perf_counter() - start
    start = time.perf_counter()
    verdicts = [judge.score(by_id[s.task_id], s.completion) for s in samples]
    judge_s = time.perf_counter() - start

    minimal = {t.id: minimal_trace(t) for t in tasks}
    rows = defaultdict(lambda: defaultdict(list))
    for s, v in zip(samples, verdicts, strict=True):
        kind = by_id[s.task_id].kind
        for key in ("all", kind):
            row = rows[key]
            row["correct"].append(v.correct)
            row["helpful"].append(v.helpful)
            row["trace_words"].append(len(s.reasoning.split()))
            row["minimal_words"].append(len(minimal[s.task_id].split()))
            row["reply_words"].append(len(s.reply.split()))
            if tokenizer is not None:
                row["trace_tokens"].append(count_tokens(s.reasoning, tokenizer))
                row["minimal_tokens"].append(count_tokens(minimal[s.task_id], tokenizer))
            for fault in s.meta.get("faults", []):
                row[f"fault:{fault.split(':')[0]}"].append(True)

    def summary(row: dict) -> dict:
        out = {
            "samples": len(row["correct"]),
            "correct": rate(row["correct"]),
            "helpful": rate(row["helpful"]),
            "mean_trace_words": round(statistics.mean(row["trace_words"]), 1),
            "mean_minimal_words": round(statistics.mean(row["minimal_words"]), 1),
            "trace_vs_minimal_words": round(statistics.mean(row["trace_words"]) / statistics.mean(row["minimal_words"]), 2),
            "mean_reply_words": round(statistics.mean(row["reply_words"]), 1),
            "faults": {k.split(":", 1)[1]: len(v) for k, v in row.items() if k.startswith("fault:")},
        }
        if row.get("trace_tokens"):
            out |= {
                "mean_trace_tokens": round(statistics.mean(row["trace_tokens"]), 1),
                "mean_minimal_tokens": round(statistics.mean(row["minimal_tokens"]), 1),
                "trace_vs_minimal_tokens": round(
                    statistics.mean(row["trace_tokens"]) / statistics.mean(row["minimal_tokens"]), 2),
            }
        return out

    kinds = sorted(k for k in rows if k != "all")
    return {
        "command": "python " + " ".join(sys.argv),
        "settings": {"n": args.n, "k": args.k, "tasks": len(tasks), "split": "train", "temperature": args.temperature,
                     "error_rate": args.error_rate, "verbosity": args.verbosity, "seed": args.seed,
                     "data": args.data or f"generated in memory (seed {args.data_seed})", "judge": "rubric",
                     "tokenizer": tokenizer_name},
        "overall": summary(rows["all"]),
        "per_kind": {k: summary(rows[k]) for k in kinds},
        "timing_s": {"generate": round(gen_s, 3), "judge": round(judge_s, 3)},
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
    }


def markdown(result: dict) -> str:
    s, o = result["settings"], result["overall"]
    tokens = "mean_trace_tokens" in o
    lines = [
        "# Scripted teacher quality (rubric judge)",
        "",
        f"`{result['command']}`",
        "",
        f"{s['n']} samples ({s['tasks']} train tasks × k={s['k']}), temperature {s['temperature']}, "
        f"error rate {s['error_rate']}, verbosity {s['verbosity']}, seed {s['seed']}; data: {s['data']}.",
        "",
        f"**Overall: correctness {o['correct']:.1%}, helpfulness {o['helpful']:.1%}; mean trace "
        f"{o['mean_trace_words']} words vs minimal {o['mean_minimal_words']} ({o['trace_vs_minimal_words']}×)"
        + (f"; {o['mean_trace_tokens']} vs {o['mean_minimal_tokens']} tokens ({o['trace_vs_minimal_tokens']}×)"
           if tokens else "") + ".**",
        "",
        "| kind | samples | correct | helpful | trace words | minimal words | ratio |"
        + (" trace tokens | minimal tokens | ratio |" if tokens else ""),
        "|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if tokens else ""),
    ]
    for kind, r in [*result["per_kind"].items(), ("**all**", o)]:
        line = (f"| {kind} | {r['samples']} | {r['correct']:.1%} | {r['helpful']:.1%} | {r['mean_trace_words']} | "
                f"{r['mean_minimal_words']} | {r['trace_vs_minimal_words']}× |")
        if tokens:
            line += f" {r['mean_trace_tokens']} | {r['mean_minimal_tokens']} | {r['trace_vs_minimal_tokens']}× |"
        lines.append(line)
    faults = ", ".join(f"{k} {v}" for k, v in sorted(o["faults"].items()))
    lines += [
        "",
        f"Injected faults (samples): {faults}. Generation {result['timing_s']['generate']} s, "
        f"judging {result['timing_s']['judge']} s.",
        "",
        "The scripted teacher is a stand-in for a large reasoning model (see livethink/rft_distill/teachers/scripted.py).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="number of samples")
    parser.add_argument("--k", type=int, default=1, help="samples per task")
    parser.add_argument("--data", help="a `livethink data generate` output directory (default: generate in memory)")
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--error-rate", type=float, default=0.15)
    parser.add_argument("--verbosity", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", help="a HF tokenizer directory to count tokens with")
    parser.add_argument("--train-tokenizer", action="store_true", help="count tokens with a BPE trained on the corpus")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    result = run(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "teacher_quality.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "teacher_quality.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
