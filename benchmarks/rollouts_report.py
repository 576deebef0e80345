"""The rollout benchmark's analysis and outputs (pure but for the plot): per mode over seeds, the speed-up against
``sync``, each mode's quality against sync's interval, the Markdown report and the plot.

Intervals (``livethink.eval.intervals``): correctness and helpfulness, shares of the evaluation's tasks, carry the
Clopper–Pearson 95% interval pooled over tasks × seeds; every other figure (times, idle shares, tokens) its range
over seeds (none with one seed)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from livethink.eval.intervals import pooled_rate, seed_range

# key -> decimals of the per-mode mean and its interval (``SHARES``) or range over seeds
SUMMARY_KEYS = {"train_wall_s": 1, "loop_s": 1, "completions_per_s": 3, "engine_idle_share": 4,
                "trainer_idle_share": 4, "tokens": 1, "correctness": 4, "helpfulness": 4}
QUALITY = ("tokens", "correctness", "helpfulness")
SHARES = ("correctness", "helpfulness")  # shares of the evaluation's tasks
STATISTICS = ("Means over seeds; brackets: correctness and helpfulness, Clopper–Pearson 95% pooled over tasks × seeds; "
              "every other figure, its min and max over seeds (none with one seed).")

ROLLOUT_ENGINES = {"vllm": "colocated vLLM", "transformers": "the policy's own transformers `generate`"}


def percentiles(values: list[float]) -> dict[str, Any]:
    """n, mean, p10, p50, p90 (None without values)."""
    if not values:
        return {"n": 0, "mean": None, "p10": None, "p50": None, "p90": None}
    if len(values) == 1:
        return {"n": 1, "mean": values[0], "p10": values[0], "p50": values[0], "p90": values[0]}
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return {"n": len(values), "mean": round(statistics.fmean(values), 1), "p10": round(deciles[0], 1),
            "p50": round(deciles[4], 1), "p90": round(deciles[8], 1)}


def aggregate(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per mode (in order of first appearance): each ``SUMMARY_KEYS`` value's mean over seeds with its
    interval or range in ``ci`` (module docstring), the largest staleness, and the completion lengths (per-step
    means, pooled)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["mode"], []).append(r)
    out = []
    for mode, rs in groups.items():
        row: dict[str, Any] = {"mode": mode, "seeds": [r["seed"] for r in rs], "ci": {}}
        for key, digits in SUMMARY_KEYS.items():
            values = [r[key] for r in rs if r.get(key) is not None]
            if not values or len(values) != len(rs):
                row[key] = None
                continue
            if key in SHARES:
                ci = pooled_rate(values, [r["eval_tasks"] for r in rs])
            else:
                ci = seed_range(values) if len(values) > 1 else None
            row[key] = round(statistics.fmean(values), digits)
            row["ci"][key] = None if ci is None else [round(ci.low, digits), round(ci.high, digits)]
        row["staleness_max"] = max(r["staleness_max"] for r in rs)
        row["staleness_bound"] = rs[0]["staleness_bound"]
        row["staleness_ok"] = all(r["staleness_ok"] for r in rs)
        row["lengths"] = percentiles([v for r in rs for v in r["step_lengths"]])
        if any("tail" in r for r in rs):
            tails = [r["tail"] for r in rs if "tail" in r]
            row["tail"] = {"kept": percentiles([v for t in tails for v in t["kept_lengths"]]),
                           "deferred": percentiles([v for t in tails for v in t["deferred_lengths"]]),
                           "deferred_prompts": sum(t["deferred_prompts"] for t in tails),
                           "long_rounds": sum(t["long_rounds"] for t in tails),
                           "queue_wait_max": max(t["queue_wait_max"] for t in tails)}
        out.append(row)
    return out


def against_sync(summary: list[dict[str, Any]]) -> None:
    """Adds to each mode its speed-up over ``sync`` (run wall time and loop time, means over seeds) and, per
    quality figure, whether its mean lies inside sync's interval or range (None where sync has none)."""
    sync = next((r for r in summary if r["mode"] == "sync"), None)
    for r in summary:
        if sync is None:
            r["speedup"] = r["loop_speedup"] = None
            r["inside_sync_ci"] = dict.fromkeys(QUALITY)
            continue
        r["speedup"] = round(sync["train_wall_s"] / r["train_wall_s"], 3) if r.get("train_wall_s") else None
        r["loop_speedup"] = round(sync["loop_s"] / r["loop_s"], 3) if r.get("loop_s") else None
        inside = {}
        for key in QUALITY:
            ci = sync["ci"].get(key)
            inside[key] = None if ci is None or r.get(key) is None else ci[0] <= r[key] <= ci[1]
        r["inside_sync_ci"] = inside


def best_mode(summary: list[dict[str, Any]]) -> str | None:
    """The fastest mode other than sync (by run wall time), None when none ran."""
    pool = [r for r in summary if r["mode"] != "sync" and r.get("train_wall_s")]
    return min(pool, key=lambda r: r["train_wall_s"])["mode"] if pool else None


def paired_speedups(records: list[dict[str, Any]], summary: list[dict[str, Any]]) -> None:
    """Adds to each mode its speed-up over ``sync`` seed by seed (a seed's modes run one after another on one
    machine, so this ratio holds when seeds ran on different machines): ``{seed: sync wall / mode wall}``."""
    sync = {r["seed"]: r["train_wall_s"] for r in records if r["mode"] == "sync" and r.get("train_wall_s")}
    for row in summary:
        row["speedup_by_seed"] = {r["seed"]: round(sync[r["seed"]] / r["train_wall_s"], 3) for r in records
                                  if r["mode"] == row["mode"] and r["seed"] in sync and r.get("train_wall_s")}


def analyse(records: list[dict[str, Any]]) -> dict[str, Any]:
    summary = aggregate(records)
    against_sync(summary)
    paired_speedups(records, summary)
    return {"summary": summary, "best_mode": best_mode(summary),
            "staleness_ok": all(r["staleness_ok"] for r in records)}


# settings every merged invocation must share (the runs measure one thing)
MERGE_KEYS = ("config", "steps", "prompts_per_step", "generations", "max_completion_length", "tail_short_tokens",
              "max_staleness", "device", "rollout_engine", "eval_tasks", "eval_max_tokens", "calculator")
SOURCE_KEYS = ("command", "machine", "date", "seeds", "loadavg_before", "loadavg_after", "wall_min")


def merge(reports: list[dict[str, Any]], command: str, out: str) -> dict[str, Any]:
    """One report from several invocations of the same benchmark (e.g. seeds run on separate machines): the records
    pooled and analysed again; each invocation's command, machine and load averages kept under ``meta.sources``.
    Raises ``ValueError`` naming the setting that differs, or the (mode, seed) run that two of them hold."""
    if len(reports) < 2:
        raise ValueError("--merge: give two reports or more")
    if any(r.get("smollm2") for r in reports):
        raise ValueError("--merge: reports with a SmolLM2 section are not merged")
    first = reports[0]["meta"]
    for r in reports[1:]:
        for key in MERGE_KEYS:
            if r["meta"].get(key) != first.get(key):
                raise ValueError(f"--merge: {key} differs: {first.get(key)!r} in {first['command']!r}, "
                                 f"{r['meta'].get(key)!r} in {r['meta']['command']!r}")
    records, seen = [], set()
    for r in reports:
        for rec in r["tiny"]["records"]:
            if (rec["mode"], rec["seed"]) in seen:
                raise ValueError(f"--merge: {rec['mode']} seed {rec['seed']} is in two reports")
            seen.add((rec["mode"], rec["seed"]))
            records.append(rec)
    records.sort(key=lambda rec: rec["seed"])
    sources = [{k: r["meta"].get(k) for k in SOURCE_KEYS} for r in reports]
    meta = dict(first, command=command, out=out, seeds=sorted({rec["seed"] for rec in records}), sources=sources,
                machine="; ".join(dict.fromkeys(s["machine"] for s in sources)),
                modes=list(dict.fromkeys(m for r in reports for m in r["meta"]["modes"])),
                wall_min=round(sum(s["wall_min"] for s in sources), 1))
    tiny = {"records": records, **analyse(records)}
    unsupported = {k: v for r in reports for k, v in r.get("unsupported", {}).items()}
    failed = [f for r in reports for f in r.get("failed_runs", [])]
    return {"tiny": tiny, "unsupported": unsupported, "failed_runs": failed, "staleness_ok": tiny["staleness_ok"],
            "meta": meta}


def _header(m: dict[str, Any]) -> list[str]:
    """The command, machine and load lines: this invocation's, or each merged invocation's."""
    if not m.get("sources"):
        return [f"Command: `{m['command']}`", "",
                f"Machine: {m['machine']}; threads {m['threads']}; date {m['date']}; load average (1/5/15 min) before "
                f"/ after: {m['loadavg_before']} / {m['loadavg_after']}. Whole benchmark {m['wall_min']:.1f} min"
                + (" (`--reuse`: runs an earlier invocation finished are read back with their own timings; the load "
                   "averages are this invocation's)." if "--reuse" in m["command"] else "."), ""]
    lines = [f"Merged by `{m['command']}` from {len(m['sources'])} invocations (a seed's modes always ran together, "
             "on one machine):", ""]
    lines += [f"- seeds {', '.join(map(str, s['seeds']))}: `{s['command']}`; {s['machine']}; {s['date']}; load "
              f"average (1/5/15 min) before / after {s['loadavg_before']} / {s['loadavg_after']}; "
              f"{s['wall_min']:.1f} min" for s in m["sources"]]
    return [*lines, ""]


def _cell(row: dict[str, Any], key: str, scale: float = 1.0, digits: int = 1, unit: str = "") -> str:
    if row.get(key) is None:
        return "-"
    ci = (row.get("ci") or {}).get(key)
    text = f"{scale * row[key]:.{digits}f}{unit}"
    return text + (f" [{scale * ci[0]:.{digits}f}, {scale * ci[1]:.{digits}f}]" if ci else "")


def _dist(d: dict[str, Any]) -> str:
    return "-" if not d["n"] else f"{d['mean']} (p10 {d['p10']}, p50 {d['p50']}, p90 {d['p90']}; {d['n']} steps)"


def _speedup(row: dict[str, Any]) -> str:
    return "-" if row.get("speedup") is None else f"{row['speedup']:.2f}×"


SMOLLM2_NOTE = ("SmolLM2: sync keeps its config's rollouts (transformers generation), the other modes generate on a vLLM server, so the speed-up compares two engines as well as "
                "two schedules; the my_shop test split is small, so its quality columns show that the runs work, "
                "not which mode trains better.")


def _yes(v: bool | None) -> str:
    return "-" if v is None else "yes" if v else "NO"


def section(title: str, part: dict[str, Any], unsupported: dict[str, str]) -> list[str]:
    lines = [f"## {title}", "",
             "| mode | run wall (min) | loop (min) | completions/s | engine idle | trainer idle | speed-up vs sync | "
             "staleness max (bound) | tokens | correctness | helpfulness | inside sync's interval (T/C/H) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in part["summary"]:
        inside = r.get("inside_sync_ci") or {}
        lines.append(
            f"| {r['mode']} | {_cell(r, 'train_wall_s', 1 / 60)} | {_cell(r, 'loop_s', 1 / 60)} | "
            f"{_cell(r, 'completions_per_s', digits=3)} | {_cell(r, 'engine_idle_share', 100, unit='%')} | "
            f"{_cell(r, 'trainer_idle_share', 100, unit='%')} | "
            f"{_speedup(r)} | "
            f"{r['staleness_max']} ({r['staleness_bound']}){'' if r['staleness_ok'] else ' OVER'} | "
            f"{_cell(r, 'tokens')} | {_cell(r, 'correctness', 100, unit='%')} | "
            f"{_cell(r, 'helpfulness', 100, unit='%')} | "
            f"{'/'.join(_yes(inside.get(k)) for k in QUALITY)} |")
    for mode, why in unsupported.items():
        lines.append(f"| {mode} | not supported: {why} | | | | | | | | | | |")
    paired = [f"{r['mode']} " + ", ".join(f"{v:.2f}× (seed {k})" for k, v in r["speedup_by_seed"].items())
              for r in part["summary"] if r["mode"] != "sync" and r.get("speedup_by_seed")]
    if paired:
        lines += ["", "Speed-up over sync seed by seed (run wall; a seed's modes ran on one machine): "
                  + "; ".join(paired) + "."]
    lines += ["", "Completion lengths (tokens; per-step means, pooled over seeds):", ""]
    for r in part["summary"]:
        lines.append(f"- {r['mode']}: all rows {_dist(r['lengths'])}")
        if "tail" in r:
            t = r["tail"]
            lines.append(f"  - kept in short rounds: {_dist(t['kept'])}; deferred, in their long rounds: "
                         f"{_dist(t['deferred'])}; {t['deferred_prompts']} prompts deferred, {t['long_rounds']} long "
                         f"rounds, longest queue wait {t['queue_wait_max']} steps")
    return lines + [""]


def markdown(report: dict[str, Any]) -> str:
    m = report["meta"]
    lines = ["# Stage-2 rollout modes: sync, tail batching, decoupled, both", "", *_header(m),
             f"Tiny student, band variant (`{m['config']}`), from `{m['rft']}`: {m['steps']} steps × "
             f"{m['prompts_per_step']} prompts × {m['generations']} completions (max {m['max_completion_length']} "
             f"tokens; tail and both: short rounds to {m.get('tail_short_tokens', 'half the cap')} tokens) per "
             f"run, stage-2 seeds {', '.join(map(str, m['seeds']))}; calculator off in every mode (the "
             f"decoupled modes refuse it). sync and tail roll out on "
             f"{ROLLOUT_ENGINES[m.get('rollout_engine', 'vllm')]}; the trainer runs "
             f"{'on the GPU in bf16' if m.get('device') == 'cuda' else 'on the CPU in fp32'}; decoupled and both on a vLLM "
             f"server process beside the trainer (its start-up counted in the run wall time), max_staleness "
             f"{m['max_staleness']}. Final students evaluated on {m['eval_tasks']} test tasks (greedy, max "
             f"{m['eval_max_tokens']} tokens, rubric judge).", "",
             STATISTICS + " Run wall: the training "
             "process (plus the server for decoupled and both); loop: the training loop alone (`elapsed_s`). completions/s: "
             "completions trained on / loop time. " + m["idle_note"], ""]
    lines += section("Tiny student", report["tiny"], report.get("unsupported", {}))
    if report.get("smollm2"):
        lines += section("SmolLM2 with LoRA (`configs/smollm2/grpo.yaml`)", report["smollm2"], {})
        lines += [SMOLLM2_NOTE, ""]
    lines += ["Staleness: optimizer steps between the weights that generated a trained batch and the weights it "
              "trains (sync and tail: 0, every group generated by the current policy; tail's queue wait is not "
              f"staleness). Bound held in every run: {'yes' if report['staleness_ok'] else 'NO'}.", "",
              f"![rollout modes]({Path(m['out']).name}.png)", ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Run wall time, idle shares and correctness vs tokens per mode (means; intervals or ranges as in the report)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["tiny"]["summary"]
    names = [r["mode"] for r in rows]

    def err(key: str, scale: float = 1.0) -> list[list[float]]:
        lo, hi = [], []
        for r in rows:
            ci = r["ci"].get(key)
            lo.append(0.0 if not ci or r.get(key) is None else scale * (r[key] - ci[0]))
            hi.append(0.0 if not ci or r.get(key) is None else scale * (ci[1] - r[key]))
        return [lo, hi]

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(14, 4.2))
    a.bar(names, [(r.get("train_wall_s") or 0) / 60 for r in rows], yerr=err("train_wall_s", 1 / 60), capsize=4)
    a.set_ylabel("run wall time (min)")
    a.set_title("wall time per run")
    x = range(len(rows))
    b.bar([i - 0.2 for i in x], [100 * (r.get("engine_idle_share") or 0) for r in rows], 0.4, label="rollout engine")
    b.bar([i + 0.2 for i in x], [100 * (r.get("trainer_idle_share") or 0) for r in rows], 0.4, label="trainer")
    b.set_xticks(list(x), names)
    b.set_ylabel("idle share (%)")
    b.set_title("idle share of the loop")
    b.legend(fontsize=8)
    for r in rows:
        if r.get("tokens") is not None and r.get("correctness") is not None:
            ci_t, ci_c = r["ci"].get("tokens"), r["ci"].get("correctness")
            c.errorbar([r["tokens"]], [100 * r["correctness"]], capsize=3, fmt="o",
                       xerr=None if not ci_t else [[r["tokens"] - ci_t[0]], [ci_t[1] - r["tokens"]]],
                       yerr=None if not ci_c else [[100 * (r["correctness"] - ci_c[0])], [100 * (ci_c[1] - r["correctness"])]])
            c.annotate(r["mode"], (r["tokens"], 100 * r["correctness"]), textcoords="offset points", xytext=(5, 4))
    c.set_xlabel("tokens per reply")
    c.set_ylabel("correctness (%)")
    c.set_title("final student (C: CP 95% tasks × seeds; tokens: range)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
