"""The compression benchmark's outputs: the Markdown report and the Pareto plot of ``compression.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compression_runs import BASELINES, TRANSFORMERS_ROLLOUTS_WHY, split_method

from livethink.eval.compare import pareto_front

STATISTICS = ("shares of tasks (correctness, helpfulness, truncated, C at cap 64): Clopper–Pearson 95% pooled over "
              "tasks × seeds; Δ C and Δ H: Newcombe 95%, unpaired (the results hold no per-task verdicts to pair over "
              "seeds); tokens, reduction and floor: min and max over seeds (none for one seed).")


def _err(row: dict[str, Any], key: str, scale: float = 1.0) -> list[list[float]] | None:
    ci = (row.get("ci") or {}).get(key)
    if not ci:
        return None
    return [[scale * (row[key] - ci[0])], [scale * (ci[1] - row[key])]]


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Correctness and helpfulness against tokens, every method at its mean over seeds with its intervals (rates:
    Clopper–Pearson pooled over tasks × seeds; tokens: the range over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12.8, 5.0))
    for ax, metric in zip(axes, ("correctness", "helpfulness"), strict=True):
        pts = [(r["tokens"], 100 * r[metric]) for r in rows]
        front = pareto_front(pts)
        ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "--", color="0.6", lw=1, label="Pareto front (means)")
        for r, (t, q) in zip(rows, pts, strict=True):
            if r["kind"] == "rft":
                ax.scatter([t], [q], marker="*", s=180, color="black", zorder=4, label="RFT student")
            else:
                variant, training = split_method(r["variant"])
                baseline = variant in BASELINES
                style = {"fmt": "s" if baseline else "o", "ms": 4 if r["kind"] == "midpoint" else 7,
                         "mfc": "none" if r["kind"] == "midpoint" else None, "capsize": 3, "lw": 1,
                         "color": "tab:gray" if baseline else "tab:blue" if training == "head" else "tab:orange"}
                ax.errorbar([t], [q], xerr=_err(r, "tokens"), yerr=_err(r, metric, 100), zorder=3, **style)
            ax.annotate(r["name"], (t, q), textcoords="offset points", xytext=(5, 4), fontsize=7)
        ax.set_xlabel("mean tokens per reply (reasoning + reply)")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_title(f"{metric} vs tokens: mean over seeds (CP 95% pooled; tokens: range)", fontsize=9)
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower left", ncol=2, fontsize=8, frameon=False)
    fig.text(0.99, 0.012, "circles: livethink variants (orange: +lora / +all); squares: baselines; hollow: midpoint "
             "checkpoints", ha="right", fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _mean_ci(row: dict[str, Any], key: str, scale: float = 1.0, digits: int = 1, signed: bool = False,
             unit: str = "") -> str:
    """``mean[unit] [low, high]``, the interval left out when there is none."""
    if row.get(key) is None:
        return "-"
    fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
    text = fmt.format(scale * row[key]) + unit
    ci = (row.get("ci") or {}).get(key)
    return text + (f" [{fmt.format(scale * ci[0])}, {fmt.format(scale * ci[1])}]" if ci else "")


def published_invocations(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Every invocation behind a published report, oldest first: those it extended, then its own."""
    ext = meta.get("extends") or {}
    earlier = ext.get("invocations") or ([{"command": ext["command"], "date": ext["date"], "wall_min": None}]
                                         if "command" in ext else [])
    return [*earlier, {"command": meta["command"], "date": meta["date"], "wall_min": meta.get("total_wall_min")}]


def added_statement(meta: dict[str, Any]) -> list[str]:
    """The report's lines on the earlier invocations ``--add`` extended, and the wall time of them all."""
    invocations = published_invocations(meta)
    walls = [i["wall_min"] for i in invocations]
    total = (f" Wall time of all {len(walls)} invocations: {sum(walls):.1f} min." if None not in walls else "")
    return ["Added (`--add`) to the published result of:", "",
            *[f"- `{i['command']}` ({i['date']}" + (f", {i['wall_min']:.1f} min)" if i["wall_min"] is not None
                                                      else ")") for i in invocations[:-1]], "",
            f"whose runs {', '.join(meta['extends']['runs_kept'])} are kept as they were: the RFT student evaluated exactly as "
            f"there (same tasks, tokens, correctness, helpfulness), under the same budget.{total}", ""]


def seeds_statement(meta: dict[str, Any]) -> str:
    return (f"Seeds {', '.join(map(str, meta['seeds']))}: stage-2 seeds (GRPO sampling and data order, `--seed`) on one "
            f"RFT draw (`{meta['rft']}`). Every run starts from the same RFT student, so a method's spread over seeds "
            "is its own and every delta is against one fixed reference; RFT draws would add stage 1's spread to every "
            "method alike and move the reference with each draw.")


def markdown(report: dict[str, Any]) -> str:
    m = report["meta"]
    n = len(m["seeds"])
    other = sorted({r["variant"] for r in report["per_seed"] if r.get("rollouts", m["rollouts"]) != m["rollouts"]})
    own_rollouts = f"; {', '.join(other)} on transformers ({TRANSFORMERS_ROLLOUTS_WHY})" if other else ""
    lines = [
        "# Compression benchmark: stage-2 variants and baselines over seeds", "",
        f"Command: `{m['command']}`", "",
        f"Machine: {m['machine']}; torch threads {m['threads']}; date {m['date']}. Whole benchmark "
        f"{m['total_wall_min']:.1f} min"
        + (" in this invocation, which reused finished runs (--resume): each run's training time is in the per-seed "
           "table." if "--resume" in m["command"] or m.get("extends") else "."), "",
        *(added_statement(m) if m.get("extends") else []),
        seeds_statement(m), "",
        f"Budget per method and seed: {m['steps']} GRPO steps × {m['prompts_per_step']} prompts × {m['generations']} "
        f"completions (max {m['max_completion_length']} tokens), lr {m['lr']}, rollouts on {m['rollouts']} (dler also "
        f"rolls out its dynamic-sampling extras){own_rollouts}. Stage 2 trains the output layer only unless a method "
        f"says `+lora` (LoRA adapters on the attention projections) or `+all` (every parameter). Evaluation: {m['eval_tasks']} test tasks, greedy, max "
        f"{m['eval_max_tokens']} tokens, rubric judge, tokens counted with the student tokenizer. Calculator-assisted "
        f"decoding (rollouts and evaluation): {'on' if m.get('calculator') else 'off'}.", "",
        f"Mean over {n} seed{'s' if n > 1 else ''}; brackets: {STATISTICS}", "",
        "| method | kind | tokens/reply | reduction vs RFT | Δ C (pts) | Δ H (pts) | correctness | helpfulness | "
        "C at cap 64 | floor (tokens) | target met (seeds) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        if r["kind"] == "rft":
            c64 = "-" if r.get("correct_at_64") is None else f"{100 * r['correct_at_64']:.1f}%"
            lines.append(f"| rft | RFT student | {r['tokens']:.1f} | - | - | - | {100 * r['correctness']:.1f}% | "
                         f"{100 * r['helpfulness']:.1f}% | {c64} | {r.get('floor', '-')} | - |")
            continue
        variant, training = split_method(r["variant"])
        kind = "baseline" if variant in BASELINES else "livethink"
        kind += "" if training == "head" else f", {training}"
        kind += " (midpoint)" if r["kind"] == "midpoint" else ""
        lines.append(
            f"| {r['name']} | {kind} | {_mean_ci(r, 'tokens')} | {_mean_ci(r, 'token_reduction', 100, unit='%')} | "
            f"{_mean_ci(r, 'd_correctness_pts', signed=True)} | {_mean_ci(r, 'd_helpfulness_pts', signed=True)} | "
            f"{_mean_ci(r, 'correctness', 100, unit='%')} | {_mean_ci(r, 'helpfulness', 100, unit='%')} | "
            f"{_mean_ci(r, 'correct_at_64', 100, unit='%') if 'correct_at_64' in r else '-'} | "
            f"{_mean_ci(r, 'floor') if 'floor' in r else '-'} | {r['meets_target_seeds']}/{len(r['seeds'])} |")
    lines += ["", "Target: ≥ 60 % fewer tokens than the RFT student, correctness ≥ RFT − 2 points, helpfulness ≥ RFT, "
              "on every seed.", ""]
    lines += [f"**Failed run (left out):** {f['variant']} seed {f['seed']}: {f['error']}  "
              for f in report.get("failed_runs", [])]
    best = report.get("best")
    if best:
        met = sum(v["met"] for v in report["best_verdicts"].values())
        lines += [f"## Best livethink variant: {best['name']} (target met on {met} of {len(report['best_verdicts'])} "
                  "seeds)", "",
                  "| seed | reduction | Δ C (pts) | Δ H (pts) | ≥ 60% shorter | C ≥ RFT − 2 | H ≥ RFT | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        for seed, v in report["best_verdicts"].items():
            yn = {True: "yes", False: "no"}
            lines.append(f"| {seed} | {100 * v['token_reduction']:.1f}% | {v['d_correctness_pts']:+.1f} | "
                         f"{v['d_helpfulness_pts']:+.1f} | {yn[v['shorter_60']]} | {yn[v['correctness_kept']]} | "
                         f"{yn[v['helpfulness_kept']]} | {'met' if v['met'] else 'NOT met'} |")
    else:
        lines.append("**Best livethink variant**: none evaluated.")
    lines += ["", "## SIRI, DOT and DRPO against each baseline at equal tokens (means over seeds)", "",
              "Each baseline's curve runs from the RFT student through its midpoint (when evaluated) to its final point; the "
              "challenger is compared with the curve's point at the challenger's token count.", ""]
    for name, by_baseline in report.get("vs_baselines", {}).items():
        lines += [f"- **{name}**"] + [f"  - vs {b}: {v}" for b, v in by_baseline.items()]
    if not report.get("vs_baselines"):
        lines.append("- (not evaluated)")
    lines += ["", "## Per seed", "",
              "Brackets: 95% paired interval of the change over the same test tasks (a paired bootstrap over tasks; "
              "runs recorded before issue #55 keep the paired t-interval computed then).", "",
              "| method | seed | tokens/reply | reduction | Δ C (pts) | Δ H (pts) | truncated | train min | s/step |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in report.get("per_seed", []):
        ci_c, ci_h = r.get("d_correctness_ci_pts"), r.get("d_helpfulness_ci_pts")
        lines.append(
            f"| {r['name']} | {r['seed']} | {r['tokens']:.1f} | {100 * r['token_reduction']:.1f}% | "
            f"{r['d_correctness_pts']:+.1f}" + (f" [{ci_c[0]:+.1f}, {ci_c[1]:+.1f}]" if ci_c else "") + " | "
            f"{r['d_helpfulness_pts']:+.1f}" + (f" [{ci_h[0]:+.1f}, {ci_h[1]:+.1f}]" if ci_h else "") + " | "
            f"{100 * r['truncated_rate']:.1f}% | {r.get('train_wall_min', '-')} | {r.get('step_time_mean_s', '-')} |")
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
    lines += ["", "![correctness and helpfulness vs tokens, means over seeds with their intervals](compression_pareto.png)", ""]
    return "\n".join(lines)
