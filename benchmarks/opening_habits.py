"""How each student opens its thinking when sampled: the share of temperature-1 samples whose thinking starts with a
phrase, per task kind.

GRPO learns from the differences between the completions of one prompt. A habit that a policy samples almost always
leaves nothing to compare it with, and one it samples sometimes can move either way. This benchmark measures where a
habit stands, for example the scripted teacher's restating opener ("They want to know ..., so I need ...") before and
after a stage-2 run:

    .venv/bin/python benchmarks/opening_habits.py --phrase "They want" \\
        --model drpo-seed1=runs/tiny/bench_budget/drpo/seed1/final \\
        --model budget-seed1=runs/tiny/bench_budget/drpo_then_budget64/seed1/final [--tasks 200] [--samples 8]

Prompts come from the one renderer (``livethink.data.prompt``) with the model's reasoning format, as served. Writes
``<out>.json``, ``<out>.md`` and ``<out>.png``; records the load average before and after.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any


def opening_shares(kinds: list[str], samples: list[list[str]], phrase: str) -> dict[str, dict[str, Any]]:
    """Per task kind: how many of the sampled thinkings (``samples[i]`` for the task of kind ``kinds[i]``) open
    with ``phrase`` (leading newlines ignored), of how many, and the share."""
    counts: dict[str, list[int]] = {}
    for kind, texts in zip(kinds, samples, strict=True):
        hits_n = counts.setdefault(kind, [0, 0])
        hits_n[0] += sum(text.lstrip("\n").startswith(phrase) for text in texts)
        hits_n[1] += len(texts)
    return {kind: {"hits": h, "n": n, "share": round(h / n, 4)} for kind, (h, n) in sorted(counts.items())}


def sample_openings(model: str, tasks: list[Any], samples: int, max_tokens: int, seed: int) -> list[list[str]]:
    """``samples`` temperature-1 openings of ``model``'s thinking per task (vLLM, one engine, stopped after)."""
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    from livethink.data.prompt import build_messages, render_prompt
    from livethink.data.reasoning_format import THINK, saved_format
    from livethink.engines import build_llm, shutdown_llm

    tokenizer = AutoTokenizer.from_pretrained(model)
    fmt = saved_format(model) or THINK
    prompts = [render_prompt(tokenizer, build_messages(task), fmt, True) for task in tasks]
    llm = build_llm(model, max_model_len=1024, seed=seed)
    try:
        outputs = llm.generate(prompts, SamplingParams(n=samples, temperature=1.0, max_tokens=max_tokens))
    finally:
        shutdown_llm(llm)
        del llm
        gc.collect()
    return [[c.text for c in out.outputs] for out in outputs]


def markdown(report: dict[str, Any]) -> str:
    meta, rows = report["meta"], report["models"]
    kinds = sorted({kind for row in rows for kind in row["by_kind"]})
    lines = [f"# How the students open their thinking: \"{meta['phrase']}\"", "",
             f"Share of temperature-1 samples whose thinking opens with \"{meta['phrase']}\": {meta['samples']} samples "
             f"of each of the first {meta['tasks']} tasks of `{meta['data']}`, per task kind. Load average before / "
             f"after: {meta['loadavg_before']} / {meta['loadavg_after']}. Wall time {meta['wall_s']:.0f} s.", "",
             f"`{meta['command']}`", "",
             "| model | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
    for row in rows:
        cells = [f"{100 * row['by_kind'][k]['share']:.1f}" if k in row["by_kind"] else "–" for k in kinds]
        lines.append(f"| {row['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["models"]
    kinds = sorted({kind for row in rows for kind in row["by_kind"]})
    width = 0.8 / max(1, len(rows))
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    for i, row in enumerate(rows):
        ax.bar([k + i * width for k in range(len(kinds))],
               [100 * row["by_kind"].get(kind, {"share": 0.0})["share"] for kind in kinds], width, label=row["name"])
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(kinds))], kinds, fontsize=8)
    ax.set_ylabel(f"samples opening with \"{report['meta']['phrase']}\" (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", action="append", required=True, metavar="NAME=PATH", help="a model to sample (repeat)")
    p.add_argument("--phrase", required=True, help="the opening to count, e.g. 'They want'")
    p.add_argument("--data", default="artifacts/tiny/data/test.jsonl")
    p.add_argument("--tasks", type=int, default=200, help="the first N tasks of --data")
    p.add_argument("--samples", type=int, default=8, help="temperature-1 samples per task")
    p.add_argument("--max-tokens", type=int, default=24, help="tokens sampled: enough for the opening")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/opening_habits", help="writes <out>.json, .md, .png")
    args = p.parse_args(argv)
    for spec in args.model:
        name, _, path = spec.partition("=")
        if not name or not path:
            p.error(f"--model {spec!r}: expected NAME=PATH")
        if not (Path(path) / "config.json").is_file():
            p.error(f"--model {spec!r}: {path} has no config.json (a saved checkpoint directory is expected)")
    if args.tasks < 1 or args.samples < 1:
        p.error("--tasks and --samples must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from livethink.data.io import load_tasks

    started, loadavg_before = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    tasks = load_tasks(args.data, strict=True).tasks[: args.tasks]
    kinds = [task.kind for task in tasks]
    rows = []
    for spec in args.model:
        name, _, path = spec.partition("=")
        openings = sample_openings(path, tasks, args.samples, args.max_tokens, args.seed)
        rows.append({"name": name, "path": path, "by_kind": opening_shares(kinds, openings, args.phrase)})
    report = {"meta": {"command": "python benchmarks/opening_habits.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
                       "phrase": args.phrase, "data": args.data, "tasks": len(tasks), "samples": args.samples,
                       "seed": args.seed, "loadavg_before": loadavg_before,
                       "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                       "wall_s": round(time.perf_counter() - started, 1), "cpus": os.cpu_count()},
              "models": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    plot(report, out.with_suffix(".png"))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
