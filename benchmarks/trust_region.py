"""DRPO with and without a live trust region, paired on ``validation``.

The shipped DRPO stage takes one optimizer step per generation batch, so π_old = π_θ and its KL penalty is always 0:
no trust region. ``--num_iterations 2`` trains on each generation batch twice; on the second pass π_old ≠ π_θ and
the penalty presses (``drpo/kl_over_delta`` in the run's metrics). Both runs start from the same RFT student with
``make demo``'s stage-2 command (the same steps, so the live-trust-region run sees half as many rollouts). Each
model is evaluated with ``livethink eval`` on the first ``--limit`` validation tasks (greedy, the claim-checking
rubric, the calculator) uncapped and at thinking caps 64 and 128 (the server's budget forcing). Reported per cap:
correctness with its Clopper–Pearson interval, the paired difference (bootstrap over tasks, exact McNemar), and the
shares of replies with a false or unsupported claim.

    .venv/bin/python benchmarks/trust_region.py [--baseline runs/tiny/grpo/drpo/final] [--limit 250] [--seed K]

Without ``--seed`` both runs use ``make demo``'s seed and the baseline is ``make demo``'s own DRPO run; ``--seed K``
trains both with ``--seed K`` (under ``--runs-dir``/seedK) and writes ``trust_region_seedK.*``. A run or evaluation
already on disk is reused (``--runs-dir``). Writes ``benchmarks/results/trust_region.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # holdout_students' per-task helpers, by name

from budget_training import livethink, run  # noqa: E402
from holdout_students import _rate, _read_samples, paired  # noqa: E402
from serve_common import save_figure  # noqa: E402

OUT = ROOT / "benchmarks/results"
CAPS = (64, 128)
STAGE2 = ("--max_steps", "96", "--max_completion_length", "384", "--use_vllm", "true")  # make demo's stage 2


def evaluate(model: Path, name: str, out: Path, limit: int) -> dict[int | None, dict[str, dict[str, Any]]]:
    """``livethink eval`` of ``model`` on validation (reused when its samples exist): cap -> task -> sample."""
    samples = out / "samples" / f"{name}.jsonl"
    if not samples.is_file():
        run(livethink("eval", "--model", str(model), "--name", name, "--data", "artifacts/tiny/data", "--split",
                      "validation", "--limit", str(limit), "--thinking-caps", ",".join(map(str, CAPS)),
                      "--latency-probes", "0", "--calculator", "--out", str(out)), out.parent / f"{out.name}.log")
    return _read_samples(samples)


def kl_pressure(run_dir: Path) -> float | None:
    """The share of optimizer steps whose KL exceeded δ (``drpo/kl_over_delta``), from the run's metrics."""
    path = run_dir.parent / "metrics.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    values = [float(r["drpo/kl_over_delta"]) for r in rows if "drpo/kl_over_delta" in r]
    return round(sum(values) / len(values), 4) if values else None


def model_figures(samples: dict[int | None, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    rows = list(samples[None].values())
    return {"n": len(rows), "tokens": round(sum(r["total_tokens"] for r in rows) / len(rows), 1),
            "false_claim": _rate(rows, "false_claims"), "unsupported_claim": _rate(rows, "unsupported_claims"),
            "correct": {str(c): _rate(list(samples[c].values()), "correct") for c in (None, *CAPS)}}  # fmt: skip


def markdown(result: dict[str, Any], name: str = "trust_region") -> str:
    base, live = result["models"]["baseline"], result["models"]["trust_region"]
    fmt = lambda r: f"{100 * r['mean']:.1f}% [{100 * r['low']:.1f}, {100 * r['high']:.1f}]"  # noqa: E731
    lines = [
        "# DRPO with a live trust region, paired on validation", "",
        f"`{result['command']}`; {result['n']} `validation` tasks, greedy, claim-checking rubric, calculator on; one "
        f"stage-2 run each, seed {result.get('seed') if result.get('seed') is not None else 'of make demo'} (one seed: "
        f"seeds vary this result, so it chooses nothing). Load average before "
        f"{result['loadavg_before']}, after {result['loadavg_after']}.", "",
        f"- baseline: `{result['baseline']}` (one optimizer step per generation batch: KL ≡ 0, penalty pressed on "
        f"{result['kl_pressure']['baseline']} of steps)",
        f"- live trust region: `{result['candidate']}` (`--num_iterations 2`: penalty pressed on "
        f"{result['kl_pressure']['trust_region']} of steps)", "",
        "| thinking cap | baseline correct | trust region correct | difference (pts) [95% bootstrap] | only TR right | "
        "only baseline right | McNemar p |", "|---|---|---|---|---:|---:|---:|",
    ]
    for cap, d in result["paired"].items():
        key = "None" if cap == "uncapped" else cap
        lines.append(f"| {cap} | {fmt(base['correct'][key])} | {fmt(live['correct'][key])} | "
                     f"{100 * d['difference']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] | "
                     f"{d['only_a']} | {d['only_b']} | {d['mcnemar_p']:.3g} |")
    lines += ["", "| model | tokens (uncapped) | false claim | unsupported claim |", "|---|---:|---|---|",
              f"| baseline | {base['tokens']} | {fmt(base['false_claim'])} | {fmt(base['unsupported_claim'])} |",
              f"| trust region | {live['tokens']} | {fmt(live['false_claim'])} | {fmt(live['unsupported_claim'])} |",
              "", f"![correctness at each cap]({name}.png)", ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    labels = list(result["paired"])
    for offset, (key, name) in enumerate((("baseline", "baseline"), ("trust_region", "live trust region"))):
        fig_rows = [result["models"][key]["correct"]["None" if c == "uncapped" else c] for c in labels]
        xs = [i + (offset - 0.5) * 0.35 for i in range(len(labels))]
        ax.bar(xs, [100 * r["mean"] for r in fig_rows], width=0.35, label=name,
               yerr=[[100 * (r["mean"] - r["low"]) for r in fig_rows],
                     [100 * (r["high"] - r["mean"]) for r in fig_rows]], capsize=3)  # fmt: skip
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("correct (%)")
    ax.set_xlabel("thinking cap")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rft", type=Path, default=Path("runs/tiny/rft/final"), help="the student both runs start from")
    p.add_argument("--baseline", type=Path, default=Path("runs/tiny/grpo/drpo/final"),
                   help="the shipped DRPO run (make demo's); trained here when missing")
    p.add_argument("--runs-dir", type=Path, default=Path("runs/tiny/trust_region"))
    p.add_argument("--limit", type=int, default=250, help="first N validation tasks")
    p.add_argument("--seed", type=int, help="train both runs with this stage-2 seed (default: make demo's runs)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    runs_dir, name = args.runs_dir, "trust_region"
    runs = {"baseline": (args.baseline, ()), "trust_region": (runs_dir / "drpo_tr2" / "final", ("--num_iterations", "2"))}
    if args.seed is not None:
        runs_dir, name = args.runs_dir / f"seed{args.seed}", f"trust_region_seed{args.seed}"
        seed = ("--seed", str(args.seed))
        runs = {"baseline": (runs_dir / "drpo" / "final", seed),
                "trust_region": (runs_dir / "drpo_tr2" / "final", ("--num_iterations", "2", *seed))}
    for final, extra in runs.values():
        if not (final / "config.json").is_file():
            run(livethink("grpo", "--config", "configs/tiny/grpo_drpo.yaml", "--model_name_or_path", str(args.rft),
                          "--data_dir", "artifacts/tiny/data", "--output_dir", str(final.parent), *STAGE2, *extra),
                final.parent.parent / f"{final.parent.name}.train.log")
    samples = {key: evaluate(final, key, runs_dir / f"eval_{key}", args.limit) for key, (final, _) in runs.items()}
    base, live = samples["baseline"], samples["trust_region"]
    result = {
        "command": ("python benchmarks/trust_region.py " + shlex.join(argv if argv is not None else sys.argv[1:])).strip(),
        "seed": args.seed, "baseline": str(runs["baseline"][0]), "candidate": str(runs["trust_region"][0]),
        "n": len(base[None]), "kl_pressure": {key: kl_pressure(final) for key, (final, _) in runs.items()},
        "models": {key: model_figures(s) for key, s in samples.items()},
        "paired": {("uncapped" if c is None else str(c)): paired(live[c], base[c]) for c in (None, *CAPS)},
        "loadavg_before": loadavg_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{name}.md").write_text(markdown(result, name))
    plot(result, args.out / f"{name}.png")
    print(markdown(result, name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
