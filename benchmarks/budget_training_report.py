"""The budget-training benchmark's summary over seeds, Markdown report and plot (pure, from the per-seed results).

Statistics (``livethink.eval.intervals``): shares of tasks (C and H uncapped and at each cap, the answer within
the cap) are means over seeds with the Clopper–Pearson 95% interval pooled over tasks × seeds; ΔC and ΔH against the
RFT student carry Newcombe's unpaired interval, as the results hold no per-task verdicts to pair; tokens, token
reduction and the median tokens to the answer show their range over seeds. The seeds meeting every target are a
pass rate with its Clopper–Pearson interval. ``reanalyse`` redoes the summary of a published report from its
``per_seed`` rows, without training or evaluating anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from livethink.eval.intervals import paired_bootstrap, pass_rate, pooled_rate, rate_difference, seed_range

TARGET_CAP = 64
STATISTICS = ("Shares of tasks: mean over seeds [Clopper–Pearson 95%, pooled over tasks × seeds]; ΔC, ΔH: "
              "[Newcombe 95%, unpaired; where the results hold per-task verdicts, the paired table below pairs them]; "
              "tokens and token reduction: [min, max over seeds]; seeds meeting every target: [Clopper–Pearson 95%].")


def at_cap(model: dict[str, Any], cap: int) -> float:
    return model["correct_at_cap"][model["caps"].index(cap)]


def target_tally(targets: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Over one method's seeds (``verdicts`` per seed): the seeds that meet every target (and their share with its
    Clopper–Pearson interval), and per target the seeds that meet it."""
    names = next(iter(targets.values())).keys() if targets else ()
    all_met = [s for s, v in targets.items() if all(t["met"] for t in v.values())]
    out: dict[str, Any] = {"seeds": len(targets), "all_met": all_met,
                           "met_by_target": {n: [s for s, v in targets.items() if v[n]["met"]] for n in names}}
    if targets:
        out["all_met_rate"] = pass_rate(len(all_met), len(targets)).as_dict(digits=4)
    return out


def _cell(interval, values: list[float], scale: float = 1.0) -> dict[str, Any]:
    return interval.as_dict(scale=scale) | {"values": values}


def aggregate(method: str, models: list[dict[str, Any]], rft: dict[str, Any]) -> dict[str, Any]:
    """One method over its seeds (``models``: per-seed results): each column's mean and interval (module docstring)."""
    caps, n = models[0]["caps"], [m["n"] for m in models]

    def share(values: list[float]) -> dict[str, Any]:
        return _cell(pooled_rate(values, n), values)

    def spread(values: list[float]) -> dict[str, Any]:
        return _cell(seed_range(values), values)

    def delta(key: str) -> dict[str, Any]:
        values = [m[key] for m in models]
        return _cell(rate_difference(values, n, [rft[key]], rft["n"]), [100 * (v - rft[key]) for v in values], 100)

    answers = all("answer_within_cap" in m for m in models)  # reports from before the column have none
    return {
        "method": method, "seeds": len(models),
        "correct": share([m["correct"] for m in models]), "helpful": share([m["helpful"] for m in models]),
        "tokens": spread([m["tokens"] for m in models]),
        "d_correct_pts": delta("correct"), "d_helpful_pts": delta("helpful"),
        "token_reduction": spread([1 - m["tokens"] / rft["tokens"] for m in models]),
        "correct_at_cap": {str(c): share([at_cap(m, c) for m in models]) for c in caps},
        "floors": [m["floor"] for m in models],
        **({"answer_within_cap": share([m["answer_within_cap"] for m in models]),
            "answer_tokens_median": spread([m["answer_tokens_median"] for m in models])} if answers else {}),
    }


PAIRED_COLUMNS = ("correct", f"correct_at_{TARGET_CAP}", "helpful")


def paired_vs_rft(models: list[dict[str, Any]], rft: dict[str, Any]) -> dict[str, Any] | None:
    """A method's seeds against the RFT student on the same tasks: per column (uncapped C, C at the target cap,
    H) the mean difference in points with its paired bootstrap interval over tasks and seeds (None when a result
    has no per-task verdicts)."""
    if rft.get("verdicts") is None or any(m.get("verdicts") is None for m in models):
        return None
    ids = rft["verdicts"]["task_ids"]
    if any(m["verdicts"]["task_ids"] != ids for m in models):
        raise ValueError("paired comparison: the seeds were evaluated on different tasks than the RFT student")
    out = {}
    for col in PAIRED_COLUMNS:
        c = paired_bootstrap([m["verdicts"][col] for m in models], [rft["verdicts"][col]]).as_dict()
        out[col] = c | {k: round(100 * c[k], 2) for k in ("difference", "low", "high")}
    return out


def reanalyse(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its per-method summary and target tallies redone from its ``per_seed`` rows (the methods in
    their published order, each over its seeds in ``meta["seeds"]`` order)."""
    rows = {(r["method"], r["seed"]): r for r in report["per_seed"]}
    order = [m["method"] for m in report["methods"]]
    methods = [aggregate(m, [rows[(m, s)] for s in report["meta"]["seeds"]], report["rft"]) for m in order]
    out = {**report, "methods": methods}
    out["target_tally"] = {m: target_tally(t) for m, t in (report.get("targets_by_method") or {}).items()}
    out["paired_vs_rft"] = {m: paired_vs_rft([rows[(m, s)] for s in report["meta"]["seeds"]], report["rft"])
                            for m in order}
    out["meta"] = {**report["meta"], "statistics": STATISTICS}
    return out


def _pct(x: dict[str, Any], scale: float = 100.0, digits: int = 1) -> str:
    mean, low, high = x["mean"], x["low"], x["high"]
    if low is None:
        return f"{scale * mean:.{digits}f}"
    return f"{scale * mean:.{digits}f} [{scale * low:.{digits}f}, {scale * high:.{digits}f}]"


def _target_row(seed: str, v: dict[str, Any], cell) -> str:
    return (f"| {seed} | {cell(v['correct_at_64_vs_rft_uncapped'])} "
            f"(≥ {100 * v['correct_at_64_vs_rft_uncapped']['target']:.1f}%) | {cell(v['floor_tokens'], False)} | "
            f"{cell(v['uncapped_correct'])} | {cell(v['uncapped_helpful'])} | {cell(v['token_reduction'])} |")


def _seeds_cell(seeds: list[str], total: int, rate: dict[str, Any] | None = None) -> str:
    text = f"{len(seeds)} of {total} ({', '.join(seeds) or 'none'})"
    return text if rate is None else f"{text}, {_pct(rate, digits=0)}%"


def markdown(report: dict[str, Any]) -> str:
    rft, rows, meta = report["rft"], report["methods"], report["meta"]
    caps = rft["caps"]
    lines = ["# Trained for the server's cut: correctness against the thinking cap", "",
             f"{rft['n']} {meta.get('split', 'test')} tasks, greedy, rubric judge, calculator on; budget forcing with the server's reply "
             f"reserve. Stage-2 seeds {meta['seeds']}. {STATISTICS} Load average before / "
             f"after: {meta['loadavg_before']} / {meta['loadavg_after']}. Wall time {meta['wall_s']:.0f} s: "
             f"{meta.get('trained_here', '?')} runs trained and {meta.get('evaluated_here', '?')} models evaluated "
             "here, the others read back from earlier invocations (greedy evaluation, so their correctness does not "
             "depend on the load they ran under).", "",
             f"`{meta['command']}`", "",
             "## Correctness (%) at each thinking cap", "",
             "Floor: the smallest cap keeping 90% of the model's own uncapped correctness, measured on this split "
             "(a serving floor is calibrated on `validation`).", "",
             "| method | " + " | ".join(str(c) for c in caps) + " | uncapped | floor (tokens) |",
             "|---|" + "---:|" * (len(caps) + 2)]
    lines.append("| rft | " + " | ".join(f"{100 * v:.1f}" for v in rft["correct_at_cap"])
                 + f" | {100 * rft['correct']:.1f} | {rft['floor']} |")
    for row in rows:
        lines.append(f"| {row['method']} | " + " | ".join(_pct(row["correct_at_cap"][str(c)]) for c in caps)
                     + f" | {_pct(row['correct'])} | {', '.join(str(f) for f in row['floors'])} |")
    lines += ["", "## Tokens, ΔC and ΔH against RFT", "",
              "| method | tokens [range] | token reduction (%) [range] | ΔC (pts) [unpaired] | ΔH (pts) [unpaired] "
              "| H (%) |", "|---|---:|---:|---:|---:|---:|",
              f"| rft | {rft['tokens']:.1f} | – | – | – | {100 * rft['helpful']:.1f} |"]
    for row in rows:
        lines.append(f"| {row['method']} | {_pct(row['tokens'], 1.0)} | {_pct(row['token_reduction'])} | "
                     f"{_pct(row['d_correct_pts'], 1.0)} | {_pct(row['d_helpful_pts'], 1.0)} | {_pct(row['helpful'])} |")

    paired = {m: p for m, p in (report.get("paired_vs_rft") or {}).items() if p}
    if paired:
        lines += ["", "## Against RFT, paired on the same tasks", "",
                  "Mean difference in points over seeds, with the 95% percentile bootstrap interval resampling tasks "
                  "(the same draw for both) and seeds; \"excludes 0\" is where a difference is claimed.", "",
                  "| method | ΔC uncapped | ΔC at 64 | ΔH uncapped |", "|---|---:|---:|---:|"]
        for method, cols in paired.items():
            lines.append(f"| {method} | " + " | ".join(
                f"{c['difference']:+.1f} [{c['low']:+.1f}, {c['high']:+.1f}]"
                + (" (excludes 0)" if c["excludes_zero"] else "") for c in (cols[k] for k in PAIRED_COLUMNS)) + " |")
    per_seed = report.get("per_seed") or []
    if per_seed and all(m.get("false_claim") is not None for m in per_seed) and rft.get("false_claim") is not None:
        lines += ["", "## Replies with a false or unsupported claim (claim-checking rubric), per seed", "",
                  "| model | seed | false claim (%) | unsupported claim (%) | C uncapped (%) | C at 64 (%) |",
                  "|---|---:|---:|---:|---:|---:|",
                  f"| rft | – | {100 * rft['false_claim']:.1f} | {100 * rft['unsupported_claim']:.1f} | "
                  f"{100 * rft['correct']:.1f} | {100 * at_cap(rft, TARGET_CAP):.1f} |"]
        for m in per_seed:
            lines.append(f"| {m['method']} | {m['seed']} | {100 * m['false_claim']:.1f} | "
                         f"{100 * m['unsupported_claim']:.1f} | {100 * m['correct']:.1f} | "
                         f"{100 * at_cap(m, TARGET_CAP):.1f} |")
    lines += [] if "answer_within_cap" not in rft else ["", "## Where the thinking states the answer", "",
              f"Uncapped thinking tokens before the reference answer's first mention (all the thinking when it has "
              f"none); a cut at {TARGET_CAP} tokens keeps the answer of the tasks within it.", "",
              f"| method | answer within {TARGET_CAP} tokens (%) | median tokens to the answer [range] | "
              f"C at {TARGET_CAP} (%) |", "|---|---:|---:|---:|",
              f"| rft | {100 * rft['answer_within_cap']:.1f} | {rft['answer_tokens_median']:.0f} | "
              f"{100 * at_cap(rft, TARGET_CAP):.1f} |"]
    for row in (r for r in rows if "answer_within_cap" in r):
        lines.append(f"| {row['method']} | {_pct(row['answer_within_cap'])} | {_pct(row['answer_tokens_median'], 1.0, 0)} | "
                     f"{_pct(row['correct_at_cap'][str(TARGET_CAP)])} |")

    def cell(x: dict[str, Any], pct: bool = True) -> str:
        value = f"{100 * x['value']:.1f}%" if pct and x["value"] is not None else str(x["value"])
        return f"{value} {'✓' if x['met'] else '✗'}"

    by_method = report.get("targets_by_method") or {meta.get("shipped_method", "drpo_then_budget64"): report["targets"]}
    short = {"correct_at_64_vs_rft_uncapped": f"C at {TARGET_CAP}", "floor_tokens": "floor",
             "uncapped_correct": "uncapped C", "uncapped_helpful": "H", "token_reduction": "tokens"}
    lines += ["", "## Seeds that meet the targets", "",
              "Per method trained for the cut: the seeds that meet every target (their share, with its Clopper–Pearson "
              "95% interval), and per target the seeds that meet it.", "",
              "| method | every target | " + " | ".join(short.values()) + " |", "|---|---|" + "---|" * len(short)]
    for method, targets in by_method.items():
        tally = target_tally(targets)
        cells = [_seeds_cell(tally["all_met"], tally["seeds"], tally.get("all_met_rate")),
                 *(_seeds_cell(tally["met_by_target"][name], tally["seeds"]) for name in short)]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    for method, targets in by_method.items():
        lines += ["", f"## Targets of the budget-trained student ({method}), per seed", "",
                  f"Against the RFT student `{meta.get('rft_dir', 'runs/tiny/rft/final')}` (uncapped "
                  f"{100 * rft['correct']:.1f}% correct, {100 * rft['helpful']:.1f}% helpful, "
                  f"{rft['tokens']:.1f} tokens).", "",
                  "| seed | C at cap 64 ≥ 90% of RFT uncapped | floor ≤ 64 | C ≥ RFT − 2 pts | H ≥ RFT | ≥ 50% fewer tokens |",
                  "|---|---|---|---|---|---|"]
        lines += [_target_row(seed, v, cell) for seed, v in targets.items()]
    lines += ["", "## Training runs", "", "| method | starts from | seed | steps | wall (s) | step time (s) |",
              "|---|---|---:|---:|---:|---:|"]
    for r in report["runs"]:
        lines.append(f"| {r['method']} | {r.get('starts_from', 'rft')} | {r['seed']} | {r['steps']} | "
                     f"{r['train_wall_s'] or 'reused'} | {r['train_step_s']} |")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Correctness against the thinking cap: RFT and each method's mean over seeds with its pooled interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rft = report["rft"]
    caps = rft["caps"]
    xs = [*caps, caps[-1] + 64]
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    ax.plot(xs, [100 * v for v in rft["correct_at_cap"]] + [100 * rft["correct"]], "o-", color="gray", label="rft")
    colors = [f"C{j}" for j in range(10) if j != 7]  # C7 is gray, RFT's
    for i, row in enumerate(report["methods"]):
        cells = [row["correct_at_cap"][str(c)] for c in caps] + [row["correct"]]
        mean = [100 * c["mean"] for c in cells]
        err = [[100 * (c["mean"] - c["low"]) for c in cells], [100 * (c["high"] - c["mean"]) for c in cells]]
        ax.errorbar(xs, mean, yerr=err, fmt="os^Dv"[i // len(colors) % 5] + "-", capsize=3, color=colors[i % len(colors)],
                    label=f"{row['method']} ({row['seeds']} seeds)")
    ax.axhline(90 * rft["correct"], ls="--", color="gray", lw=0.8, label="90% of RFT uncapped")
    ax.set_xticks(xs, [*map(str, caps), "uncapped"])
    ax.set_xlabel("thinking cap (tokens)")
    ax.set_ylabel("correct (%)")
    split = report["meta"].get("split", "test")
    ax.set_title(f"Correctness against the thinking cap ({split} split; Clopper–Pearson 95%, tasks × seeds)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
