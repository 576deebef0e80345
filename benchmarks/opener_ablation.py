"""Is the restated question load-bearing? Greedy evaluation with the start of the reasoning forced.

The scripted teacher opens 90% of its traces with a sentence that restates the viewer's question
(``OPENERS``, ~35 student tokens), then states its goal (``GOALS``), then writes the useful lines. Stage-2 RL
drops most other filler but keeps an opener. This benchmark asks why, by forcing each model's first words:

- ``free``: no forced start (the harness's normal greedy evaluation);
- ``opener``: the shortest teacher opener's first words (``Let me think about this. The viewer wrote "``);
- ``goal_first``: the first word of the goal sentence, skipping the opener;
- ``useful_first``: the first word of the first useful line (``Product:``, ``Compare:``, or the chat-history line),
  skipping both.

If skipping the opener costs quality, RL is right to keep it, and the opener bounds the compression that keeps
quality. The report also gives that bound from the teacher's minimal traces: the shortest correct completion
with and without the opener, in student tokens, as a share of the free model's tokens.

    .venv/bin/python benchmarks/opener_ablation.py [--model runs/tiny/rft/final --name rft ...] [--eval-n 200]

Writes ``benchmarks/results/opener_ablation/opener_ablation.{json,md,png}`` (``--report-only`` rewrites the
Markdown and the plot from the JSON); each model is evaluated in its own process (one vLLM engine each).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("free", "opener", "goal_first", "useful_first")
DEFAULT_MODELS = (("runs/tiny/rft/final", "rft"), ("runs/tiny/bench/baseline/final", "baseline (stage 2)"))


# ---------------------------------------------------------------- pure parts


def shortest_opener() -> str:
    """The teacher's shortest opener template (``{q}`` is the question): the one RL converges to."""
    from livethink.rft_distill.teachers.scripted import OPENERS

    return min(OPENERS, key=len)


def forced_start(task, mode: str) -> str:
    """The completion's forced first characters for ``mode`` ("" for ``free``)."""
    from livethink.data.prompt import THINK_OPEN
    from livethink.rft_distill.teachers.scripted import GOALS, HISTORY, minimal_trace

    if mode == "free":
        return ""
    if mode == "opener":
        first = shortest_opener().split("{q}")[0]
    elif mode == "goal_first":
        first = GOALS.get(task.kind, GOALS["attribute"]).split()[0]
    elif mode == "useful_first":
        roles = {turn.role for turn in task.history}
        first = (HISTORY if {"viewer", "host"} <= roles else minimal_trace(task)).split()[0]
    else:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return f"{THINK_OPEN}\n{first}"


def with_opener(completion: str, opener: str) -> str:
    """``completion`` with ``opener`` as the reasoning's first line."""
    from livethink.data.prompt import THINK_OPEN

    head = f"{THINK_OPEN}\n"
    if not completion.startswith(head):
        raise ValueError(f"completion does not start with {head!r}")
    return f"{head}{opener}\n{completion[len(head):]}"


def floor_tokens(tasks, count) -> dict[str, float]:
    """Mean tokens of the teacher's minimal correct completion, without and with the shortest opener."""
    from livethink.rft_distill.teachers.scripted import minimal_completion

    opener = shortest_opener()
    minimal = [(t, minimal_completion(t)) for t in tasks]
    bare = [count(text) for _, text in minimal]
    opened = [count(with_opener(text, opener.format(q=t.question))) for t, text in minimal]
    return {"minimal": round(statistics.mean(bare), 1), "minimal_with_opener": round(statistics.mean(opened), 1)}


def deltas(rows: list[dict[str, Any]]) -> None:
    """Add each row's change against the same model's ``free`` row (points, and tokens saved as a share)."""
    free = {r["model"]: r for r in rows if r["mode"] == "free"}
    for r in rows:
        base = free.get(r["model"])
        if base is None:
            continue
        r["d_correctness_pts"] = round(100 * (r["correctness"] - base["correctness"]), 1)
        r["d_helpfulness_pts"] = round(100 * (r["helpfulness"] - base["helpfulness"]), 1)
        r["token_saving"] = round(1 - r["tokens"] / base["tokens"], 3) if base["tokens"] else None


# ---------------------------------------------------------------- one model (subprocess)


def first_token_shares(model_dir: str, tasks, top: int = 6) -> dict[str, float]:
    """Mean probability of each token that opens the reasoning (the token after ``<think>\n``) over ``tasks``:
    the ``top`` most likely on average, plus "other"."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from livethink.data.prompt import THINK_OPEN
    from livethink.eval.generation import prompt_texts

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, output_router_logits=False).eval()
    total = None
    with torch.no_grad():
        for text in prompt_texts(tokenizer, tasks, {t.id: f"{THINK_OPEN}\n" for t in tasks}):
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids
            probs = model(ids).logits[0, -1].softmax(-1)
            total = probs if total is None else total + probs
    mean = total / len(tasks)
    values, indices = mean.topk(top)
    shares: dict[str, float] = {}
    for value, index in zip(values.tolist(), indices.tolist(), strict=True):
        key = tokenizer.decode([index]).strip() or f"#{index}"
        shares[f"{key}#{index}" if key in shares else key] = round(value, 4)  # two ids can decode alike
    shares["other"] = round(max(0.0, 1.0 - sum(values.tolist())), 4)
    return shares


def eval_model(args) -> int:
    from livethink.data.io import read_tasks
    from livethink.eval.generation import make_generator
    from livethink.eval.harness import judge_completions, token_counter
    from livethink.eval.metrics import summarize
    from livethink.rewards.judge import RubricJudge

    tasks = read_tasks(Path(args.data_dir) / "test.jsonl")
    tasks = tasks[: args.eval_n] if args.eval_n else tasks
    generator = make_generator(args.eval_one, args.engine, calculator=args.calculator)
    count = token_counter(generator.tokenizer)
    rows = []
    try:
        for mode in MODES:
            starts = {t.id: forced_start(t, mode) for t in tasks}
            generations = generator.generate(tasks, max_tokens=args.eval_max_tokens, starts=starts)
            completions = {g.task_id: (g.completion, g.finish_reason) for g in generations}
            summary = summarize(judge_completions(tasks, completions, RubricJudge(), count))
            rows.append({"model": args.eval_name, "mode": mode, "n": summary["n"],
                         "correctness": summary["correctness"], "helpfulness": summary["helpfulness"],
                         "tokens": summary["total_tokens"], "truncated": summary["truncated_rate"]})
            print(json.dumps(rows[-1]), flush=True)
        floor = floor_tokens(tasks, count)
    finally:
        generator.close()
    shares = first_token_shares(args.eval_one, tasks)
    Path(args.eval_out).write_text(json.dumps({"rows": rows, "floor": floor, "first_token": shares}) + "\n")
    return 0


# ---------------------------------------------------------------- report


def markdown(report: dict[str, Any]) -> str:
    m = report["meta"]
    lines = ["# Is the restated question load-bearing? Greedy evaluation with a forced start", "",
             f"Command: `{m['command']}`", "",
             f"Machine: {m['machine']}; date {m['date']}; {m['wall_min']} min. {m['n']} test tasks, greedy, "
             f"calculator {'on' if m['calculator'] else 'off'}, rubric judge, tokens counted with each model's "
             "tokenizer (reasoning + reply).", "",
             "| model | start | correct | Δ C (pts) | helpful | Δ H (pts) | tokens | tokens saved | truncated |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        saving = "-" if r["mode"] == "free" else f"{100 * r['token_saving']:.1f}%"
        dc = "-" if r["mode"] == "free" else r["d_correctness_pts"]
        dh = "-" if r["mode"] == "free" else r["d_helpfulness_pts"]
        lines.append(f"| {r['model']} | {r['mode']} | {100 * r['correctness']:.1f}% | {dc} | "
                     f"{100 * r['helpfulness']:.1f}% | {dh} | {r['tokens']} | {saving} | {100 * r['truncated']:.1f}% |")
    lines += ["", f"Starts, for the first test task (a {report['example_kind']} question): " + "; ".join(f"`{mode}`" + (f" = `{ex!r}`" if ex else " = none")
                                        for mode, ex in report["examples"].items()) + ".", ""]
    lines += ["The teacher's minimal correct completion (only the useful lines and the reply, "
              "`minimal_completion`) on the same tasks, in each model's tokens, against what the model writes freely:",
              "", "| model | free | minimal | minimal / free | minimal + shortest opener | (minimal + opener) / free |",
              "|---|---|---|---|---|---|"]
    for name, floor in report["floors"].items():
        free = next(r for r in report["rows"] if r["model"] == name and r["mode"] == "free")["tokens"]
        lines.append(f"| {name} | {free} | {floor['minimal']} | {100 * floor['minimal'] / free:.1f}% | "
                     f"{floor['minimal_with_opener']} | {100 * floor['minimal_with_opener'] / free:.1f}% |")
    if report.get("first_token"):
        lines += ["", "What each model writes first when free: the mean probability of the token after `<think>` "
                  "over the same tasks (the six most likely tokens on average).", ""]
        for name, shares in report["first_token"].items():
            lines.append(f"- **{name}**: " + ", ".join(f"`{tok}` {100 * p:.1f}%" for tok, p in shares.items()))
    return "\n".join(lines) + "\n\n![correctness vs tokens by forced start](opener_ablation.png)\n"


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    markers = dict(zip(MODES, ("o", "s", "^", "D"), strict=True))
    models = list(dict.fromkeys(r["model"] for r in rows))
    colors = {m: f"C{i}" for i, m in enumerate(models)}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metric in zip(axes, ("correctness", "helpfulness"), strict=True):
        for model in models:
            pts = [r for r in rows if r["model"] == model]
            ax.plot([r["tokens"] for r in pts], [100 * r[metric] for r in pts], ":", color=colors[model], alpha=0.5)
            for r in pts:
                ax.scatter(r["tokens"], 100 * r[metric], marker=markers[r["mode"]], color=colors[model], s=40)
        ax.set_xlabel("tokens per reply")
        ax.set_ylabel(f"{metric} (%)")
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=colors[m], marker="o", ls="", label=m) for m in models]
    handles += [Line2D([], [], color="0.4", marker=markers[mode], ls="", label=f"start: {mode}") for mode in MODES]
    axes[0].legend(handles=handles, fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", action="append", help="checkpoint dir (repeat); default: the RFT student and the "
                                                    "compression benchmark's baseline")
    p.add_argument("--name", action="append", help="display name per --model (same order)")
    p.add_argument("--data-dir", default="artifacts/tiny/data")
    p.add_argument("--eval-n", type=int, default=200, help="test tasks (0 = the whole split)")
    p.add_argument("--eval-max-tokens", type=int, default=768)
    p.add_argument("--engine", default="vllm", help="vllm | transformers | auto")
    p.add_argument("--calculator", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", default="benchmarks/results/opener_ablation")
    p.add_argument("--eval-one", help=argparse.SUPPRESS)
    p.add_argument("--eval-name", help=argparse.SUPPRESS)
    p.add_argument("--eval-out", help=argparse.SUPPRESS)
    p.add_argument("--runs-dir", default="runs/tiny/opener_ablation", help="each model's raw result")
    p.add_argument("--report-only", action="store_true", help="rewrite the Markdown and plot from the JSON")
    args = p.parse_args(argv)
    if args.eval_one:
        return eval_model(args)
    out = Path(args.out)
    if args.report_only:
        report = json.loads((out / "opener_ablation.json").read_text())
        (out / "opener_ablation.md").write_text(markdown(report))
        plot(report["rows"], out / "opener_ablation.png")
        return 0

    models = args.model or [m for m, _ in DEFAULT_MODELS]
    names = args.name or ([n for _, n in DEFAULT_MODELS] if not args.model else [Path(m).parent.name for m in models])
    if len(names) != len(models):
        p.error(f"--name given {len(names)} times for {len(models)} --model")
    missing = [m for m in models if not Path(m).is_dir()]
    if missing:
        p.error(f"model dir not found: {', '.join(missing)} (run `make demo` or benchmarks/compression.py first)")
    out.mkdir(parents=True, exist_ok=True)
    Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows, floors, first_tokens = [], {}, {}
    for model, name in zip(models, names, strict=True):
        part = Path(args.runs_dir) / (re.sub(r"[^A-Za-z0-9_.@-]+", "_", name).strip("_") + ".json")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--eval-one", model, "--eval-name", name,
               "--eval-out", str(part), "--data-dir", args.data_dir, "--eval-n", str(args.eval_n),
               "--eval-max-tokens", str(args.eval_max_tokens), "--engine", args.engine,
               "--calculator" if args.calculator else "--no-calculator"]
        print(f"evaluating {name} ({model}) with {len(MODES)} starts ...", flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
        result = json.loads(part.read_text())
        rows += result["rows"]
        floors[name] = result["floor"]
        first_tokens[name] = result["first_token"]
    deltas(rows)

    from livethink.data.io import read_tasks

    example = read_tasks(Path(args.data_dir) / "test.jsonl")[0]
    report = {
        "meta": {"command": shlex.join(["python", "benchmarks/opener_ablation.py", *(argv if argv is not None else sys.argv[1:])]),
                 "machine": f"{platform.machine()}, {platform.python_version()}",
                 "date": time.strftime("%Y-%m-%d %H:%M"), "wall_min": round((time.perf_counter() - start) / 60, 1),
                 "n": rows[0]["n"], "calculator": args.calculator},
        "examples": {mode: forced_start(example, mode) for mode in MODES}, "example_kind": example.kind,
        "rows": rows, "floors": floors, "first_token": first_tokens,
    }
    (out / "opener_ablation.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "opener_ablation.md").write_text(markdown(report))
    plot(rows, out / "opener_ablation.png")
    print((out / "opener_ablation.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
