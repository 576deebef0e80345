"""Write the results blocks of README.md and docs/*.md from the results JSON (and check that they agree).

A block sits between ``<!-- NAME -->`` and ``<!-- /NAME -->`` in a Markdown file; ``BLOCKS`` maps each NAME to
the results files it reads (in ``benchmarks/results/``) and the function that renders it. Every benchmark figure
in the README lives in such a block, so one command rewrites them all after a benchmark run:

    python benchmarks/readme_tables.py            # rewrite every block in README.md and docs/*.md
    python benchmarks/readme_tables.py --check    # exit 1, naming the file and block, when one is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks/results"
MINUS = "\u2212"

Report = dict[str, Any]


def _num(x: float, digits: int = 1, sign: bool = False) -> str:
    """``x`` with a typographic minus (and a plus when ``sign``)."""
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-", MINUS)


def _ci(cell: dict[str, Any], scale: float = 100.0) -> str:
    mean, low, high = cell["mean"], cell["low"], cell["high"]
    text = f"{scale * mean:.1f}"
    return text if low is None else f"{text} [{scale * low:.1f}, {scale * high:.1f}]"


def _pct(x: float, digits: int = 1) -> str:
    return f"{_num(100 * x, digits)}%"


def _rate(share: float, n: int) -> str:
    """A share of ``n`` trials with its Clopper–Pearson 95% interval: ``44.4% [40.0, 48.9]``."""
    from livethink.eval.intervals import pass_rate

    ci = pass_rate(round(share * n), n)
    return f"{_pct(share)}{_bracket(ci.low, ci.high, scale=100)}"


# -- stage 1 ---------------------------------------------------------------------------------------------
def stage1(teacher: Report, compression: Report) -> list[str]:
    """The scripted teacher and the tiny RFT student: correct, helpful (brackets: Clopper–Pearson 95%), tokens per
    reply."""
    t, rft = teacher["overall"], compression["rows"][0]
    n, m = t["samples"], compression["meta"]["eval_tasks"]
    return ["| model | correct [95%] | helpful [95%] | tokens per reply |", "|---|---:|---:|---:|",
            f"| scripted teacher ({n:,} train tasks) | {_rate(t['correct'], n)} | {_rate(t['helpful'], n)} | "
            f"{t['mean_trace_tokens']:.1f} (minimal correct trace: {t['mean_minimal_tokens']:.1f}) |",
            f"| tiny MoE student after RFT ({m} test tasks) | "
            f"{_rate(rft['correctness'], m)} | {_rate(rft['helpfulness'], m)} | {rft['tokens']:.1f} |"]


# -- stage 2 ---------------------------------------------------------------------------------------------
COMPRESSION_NAMES = {
    "band": "band (LiveThinking)", "dler": "DLER truncation", "dapo_overlong": "DAPO soft overlong (TRL)",
    "cosine": "cosine-scaled (TRL)", "band+lora": "band, LoRA instead of the output layer",
    "siri-low": "SIRI, low phase", "siri-high": "SIRI, high phase", "dot": "DOT", "gdpo": "GDPO (TRL)",
    "drpo": "DRPO", "length_penalty": "naive length penalty",
}


def _bracket(low: float, high: float, scale: float = 1.0, sign: bool = False) -> str:
    return f" [{_num(scale * low, sign=sign)}, {_num(scale * high, sign=sign)}]"


def _compression_caption(meta: dict[str, Any]) -> str:
    return (f"{meta['steps']} GRPO steps × {meta['prompts_per_step']} prompts × {meta['generations']} completions per "
            f"method and seed from one RFT student, {meta['eval_tasks']} test tasks. Target: ≥ 60% fewer tokens, "
            "C ≥ RFT − 2 points, H ≥ RFT, on every seed.")


def compression(report: Report) -> list[str]:
    """Each stage-2 method against the RFT student: tokens, reduction, ΔC, ΔH (95% intervals), target verdicts."""
    meta, rft = report["meta"], report["rows"][0]
    per_seed = {(r["name"], r["seed"]): r for r in report["per_seed"]}
    lines = [_compression_caption(meta) + " Brackets: tokens and reduction, min and max over seeds; Δ C and Δ H, "
             "Newcombe 95%, unpaired (the results hold no per-task verdicts to pair), so no row is claimed better "
             "than RFT on them.", "",
             "| method | seeds | tokens | reduction | Δ C (pts) | Δ H (pts) | target met |", "|---|---|---|---|---|---|---|",
             f"| RFT student | – | {rft['tokens']:.1f} | – | ({_pct(rft['correctness'])}) | "
             f"({_pct(rft['helpfulness'])}) | – |"]
    for r in report["rows"][1:]:
        ci = r["ci"]
        cells = {k: (_bracket(*ci[k]) if ci[k] else "") for k in ("tokens",)}
        cells["reduction"] = _bracket(*ci["token_reduction"], scale=100) if ci["token_reduction"] else ""
        for key, paired in (("d_correctness_pts", "d_correctness_ci_pts"), ("d_helpfulness_pts", "d_helpfulness_ci_pts")):
            interval = ci[key] or (per_seed[(r["name"], r["seeds"][0])].get(paired) if len(r["seeds"]) == 1 else None)
            cells[key] = _bracket(*interval, sign=True) if interval else ""
        lines.append(f"| {COMPRESSION_NAMES.get(r['name'], r['name'])} | {','.join(map(str, r['seeds']))} | "
                     f"{r['tokens']:.1f}{cells['tokens']} | {_pct(r['token_reduction'])}{cells['reduction']} | "
                     f"{_num(r['d_correctness_pts'], sign=True)}{cells['d_correctness_pts']} | "
                     f"{_num(r['d_helpfulness_pts'], sign=True)}{cells['d_helpfulness_pts']} | "
                     f"{r['meets_target_seeds']}/{len(r['seeds'])} |")
    best, verdicts = report["best"], list(report["best_verdicts"].values())
    reductions = [100 * v["token_reduction"] for v in verdicts]
    d_c = [v["d_correctness_pts"] for v in verdicts]
    lines += ["", f"Closest to the target: {COMPRESSION_NAMES.get(best['name'], best['name'])}, "
              f"met on {best['meets_target_seeds']} of {len(verdicts)} seeds ({min(reductions):.0f}–"
              f"{max(reductions):.0f}% shorter, ΔC from {_num(min(d_c), sign=True)} to {_num(max(d_c), sign=True)})."]
    return lines


def compression_brief(report: Report) -> list[str]:
    """The README's short form of ``compression``: means over seeds, the target verdicts and the best variant."""
    rft = report["rows"][0]
    full = compression(report)
    lines = ["| method | tokens | reduction | Δ C (pts) | Δ H (pts) | target met (seeds) |", "|---|---:|---:|---:|---:|---:|",
             f"| RFT student | {rft['tokens']:.1f} | – | ({_pct(rft['correctness'])}) | ({_pct(rft['helpfulness'])}) | – |"]
    for r in report["rows"][1:]:
        lines.append(f"| {COMPRESSION_NAMES.get(r['name'], r['name'])} | {r['tokens']:.1f} | {_pct(r['token_reduction'])} | "
                     f"{_num(r['d_correctness_pts'], sign=True)} | {_num(r['d_helpfulness_pts'], sign=True)} | "
                     f"{r['meets_target_seeds']}/{len(r['seeds'])} |")
    return [_compression_caption(report["meta"]), "", *lines, "", full[-1]]


def budget_training(report: Report) -> list[str]:
    """Correctness at each thinking cap, tokens and floors: RFT and each shipped stage-2 config, means over seeds
    with the Clopper–Pearson 95% interval pooled over tasks × seeds."""
    rft, caps = report["rft"], report["rft"]["caps"]
    names = {"drpo": "DRPO", "drpo_budget": "DRPO trained for the cut, one run",
             "drpo_then_budget64": "DRPO, then trained for the cut (the demo's)"}
    lines = ["| model | " + " | ".join(f"cap {c}" for c in caps) + " | uncapped | tokens | floor |",
             "|---|" + "---:|" * (len(caps) + 3),
             "| RFT student | " + " | ".join(f"{100 * v:.1f}" for v in rft["correct_at_cap"])
             + f" | {100 * rft['correct']:.1f} | {rft['tokens']:.0f} | {rft['floor']} |"]
    for row in (r for r in report["methods"] if r["method"] in names):  # ablations: the full report only
        lines.append(f"| {names[row['method']]} | "
                     + " | ".join(_ci(row["correct_at_cap"][str(c)]) for c in caps)
                     + f" | {_ci(row['correct'])} | {row['tokens']['mean']:.0f} | "
                     + ", ".join(str(f) for f in row["floors"]) + " |")
    return lines


def budget_training_summary(report: Report) -> list[str]:
    """One sentence: the shipped budget-trained student at a 64-token cap and uncapped, against RFT, and its
    targets."""
    rft = report["rft"]
    by = {row["method"]: row for row in report["methods"]}
    shipped = report["meta"]["shipped_method"]
    cut, plain = by[shipped], by["drpo"]
    at64 = rft["caps"].index(64)
    targets = list(report["targets"].values())
    met64 = sum(t["correct_at_64_vs_rft_uncapped"]["met"] for t in targets)
    floor64 = sum(t["floor_tokens"]["met"] for t in targets)
    every = sum(all(v["met"] for v in t.values()) for t in targets)
    floors = sorted(cut["floors"])
    from livethink.eval.intervals import pass_rate

    passed, c64 = pass_rate(every, len(targets)), cut["correct_at_cap"]["64"]
    return [f"The demo's student (`grpo_{shipped}.yaml`) is right {_pct(c64['mean'])}{_bracket(c64['low'], c64['high'], 100)} "
            f"at a 64-token cap (RFT {100 * rft['correct_at_cap'][at64]:.1f}%, plain DRPO {100 * plain['correct_at_cap']['64']['mean']:.1f}%) "
            f"with floors of {floors[0]}–{floors[-1]} tokens (RFT {rft['floor']}); uncapped it is right "
            f"{100 * cut['correct']['mean']:.1f}% (RFT {100 * rft['correct']:.1f}%) in {cut['tokens']['mean']:.0f} "
            f"tokens. The product's target, {_pct(targets[0]['correct_at_64_vs_rft_uncapped']['target'])} right at a "
            f"64-token cap (90% of RFT uncapped), is met on {met64} of {len(targets)} seeds, a 64-token floor on "
            f"{floor64}, every target on {every} (95%: {_num(100 * passed.low, 0)}–{_num(100 * passed.high, 0)}%)."]


# -- the make demo students on holdout ---------------------------------------------------------------------
HOLDOUT_CAPS = (0, 32, 64, 128, 256)


def holdout_students(report: Report) -> list[str]:
    """Teacher, RFT student and served student on holdout as served: correct, helpful and false-claim shares
    (Clopper–Pearson 95%), tokens, the validation floor, and correct at a few thinking caps."""
    def cell(c: dict[str, Any]) -> str:
        return f"{_pct(c['mean'])}{_bracket(c['low'], c['high'], scale=100)}"

    caps = [c for c in HOLDOUT_CAPS if c in report["caps"]]
    t = report["teacher"]
    lines = ["| model | correct [95%] | helpful [95%] | false claim [95%] | tokens | floor |", "|---|---:|---:|---:|---:|---:|",
             f"| scripted teacher | {cell(t['correct'])} | {cell(t['helpful'])} | {cell(t['false_claim'])} | "
             f"{t['tokens']:.1f} | – |"]
    for m in report["models"]:
        lines.append(f"| {m['name']} | {cell(m['correct'])} | {cell(m['helpful'])} | {cell(m['false_claim'])} | "
                     f"{m['tokens']:.1f} | {m['floor_validation']} |")
    lines += ["", "| correct at thinking cap | " + " | ".join(str(c) for c in caps) + " |", "|---|" + "---:|" * len(caps)]
    for m in report["models"]:
        lines.append(f"| {m['name']} | " + " | ".join(cell(m["correct_at_cap"][str(c)]) for c in caps) + " |")
    return lines


def holdout_students_summary(report: Report) -> list[str]:
    """One sentence: the served student against RFT at a 64-token cap and uncapped (paired), and its targets."""
    d64, d = report["paired"]["64"], report["paired"]["uncapped"]
    met = [name for name, t in report["targets"].items() if t["met"]]

    def diff(x: dict[str, Any]) -> str:
        verdict = "an interval that excludes 0" if x["excludes_zero"] else "an interval that includes 0"
        return (f"{_num(100 * x['difference'], sign=True)} points [{_num(100 * x['low'], sign=True)}, "
                f"{_num(100 * x['high'], sign=True)}] ({verdict})")

    return [f"{report['n_tasks']} holdout tasks, one `make demo` run (one stage-2 seed), every reply stopped "
            f"{report['reply_reserve']} tokens after its think block as the server stops it, load average "
            f"{report['load_before'][0]} before and {report['load_after'][0]} after. Served − RFT, paired on the same "
            f"tasks: {diff(d64)} at a 64-token cap, {diff(d)} uncapped. Budget targets met: {len(met)} of "
            f"{len(report['targets'])} ({', '.join(met) or 'none'})."]


def shipped_seeds(report: Report) -> list[str]:
    """The shipped recipe's stage-2 seeds on holdout: per seed the five budget targets (✓/✗ with the value),
    then one line with the seeds meeting every target (Clopper–Pearson 95%) and the paired differences from RFT
    over tasks and seeds."""
    rft, meta = report["rft"], report["meta"]
    shipped = meta["shipped_method"]
    rows = {r["seed"]: r for r in report["per_seed"] if r["method"] == shipped}

    def mark(t: dict[str, Any], text: str) -> str:
        return f"{text} {'✓' if t['met'] else '✗'}"

    goal = {name: t["target"] for name, t in next(iter(report["targets"].values())).items()}  # budget_training.verdicts
    lines = [f"| stage-2 seed | correct at cap 64 (≥ {_pct(goal['correct_at_64_vs_rft_uncapped'])}) | "
             f"floor ≤ {goal['floor_tokens']} | correct (≥ {_pct(goal['uncapped_correct'])}) | "
             f"helpful (≥ {_pct(goal['uncapped_helpful'])}) | tokens "
             f"(≤ {(1 - goal['token_reduction']) * rft['tokens']:.0f}) | false claim (RFT {_pct(rft['false_claim'])}) |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for seed, t in report["targets"].items():
        r = rows[int(seed)]
        lines.append(f"| {seed} | {mark(t['correct_at_64_vs_rft_uncapped'], _pct(t['correct_at_64_vs_rft_uncapped']['value']))} | "
                     f"{mark(t['floor_tokens'], str(t['floor_tokens']['value']))} | "
                     f"{mark(t['uncapped_correct'], _pct(t['uncapped_correct']['value']))} | "
                     f"{mark(t['uncapped_helpful'], _pct(t['uncapped_helpful']['value']))} | "
                     f"{mark(t['token_reduction'], format(r['tokens'], '.0f'))} | {_pct(r['false_claim'])} |")
    tally = report["target_tally"][shipped]
    rate = tally["all_met_rate"]
    paired = report["paired_vs_rft"][shipped]

    def diff(c: dict[str, Any]) -> str:
        return f"{_num(c['difference'], sign=True)} [{_num(c['low'], sign=True)}, {_num(c['high'], sign=True)}]"

    lines += ["", f"{rft['n']} `{meta['split']}` tasks, the served reply, the claim-checking rubric; floors measured on "
              f"this split. Every target met on {len(tally['all_met'])} of {tally['seeds']} seeds "
              f"(95%: {_num(100 * rate['low'], 0)}–{_num(100 * rate['high'], 0)}%). Against RFT, paired over tasks and "
              f"seeds (points): {diff(paired['correct_at_64'])} at cap 64, {diff(paired['correct'])} uncapped. "
              f"Greedy: the load ({meta['loadavg_before'][0]:g} before, {meta['loadavg_after'][0]:g} after) does not "
              "change them."]
    return lines


# -- serving ---------------------------------------------------------------------------------------------
def serve_goodput(report: Report) -> list[str]:
    """Goodput against the deadline: each served model unloaded and at the sweep's rate, and plain vLLM."""
    rows = report["deadline_sweep"]["rows"]
    deadlines = sorted({r["deadline_ms"] for r in rows})
    series: dict[tuple[str, str, str], dict[float, dict[str, Any]]] = {}
    for r in rows:
        series.setdefault((r["server"], r["model"], r["load"]), {})[r["deadline_ms"]] = r
    lines = ["| server, model, load | " + " | ".join(f"{d:,.0f} ms" for d in deadlines) + " |",
             "|---|" + "---:|" * len(deadlines)]
    for (server, model, load), by_deadline in series.items():
        rate = next(iter(by_deadline.values()))["rate"]
        label = f"{'livethink' if server == 'livethink' else 'plain vLLM'}, {model}, " + (
            "one at a time" if load == "unloaded" else f"{rate:g} req/s")
        lines.append(f"| {label} | " + " | ".join(
            f"{100 * by_deadline[d]['goodput']:.1f}%" if d in by_deadline else "–" for d in deadlines) + " |")
    return lines


def serve_summary(load: Report, recovery: Report) -> list[str]:
    """The deployment under load at its deadline, and its recovery after an overload burst."""
    runs = load["deployment"]["load"]
    rates = [r["rate"] for r in runs]
    within = min(r["all"]["within_deadline_of_accepted"] for r in runs)
    refused = sum(r["all"]["rejected_429"] for r in runs)
    gap = max(r["all"]["gap_ms"]["max_abs"] for r in runs)
    top = runs[-1]
    latency_rate = max(s["latency_only_rate"] for s in load["deployment"]["sustainable"].values())
    burst, idle = recovery["burst"], recovery["idle_decode"]
    forced = recovery["forced"]["rft"]["forced_deadline_used"]
    errors = " / ".join(f"{_num(100 * v['relative_error'], 0, sign=True)}%" for v in idle.values())
    return [f"At {load['deadline_ms']:,} ms, {_pct(within, 0 if within == 1 else 2)} of accepted replies met the deadline (client's clock) at "
            f"{rates[0]:g}–{rates[-1]:g} req/s ({top['rate'] / latency_rate:g}× the latency-sustainable {latency_rate:g}), "
            f"{refused} refused, server timing within {gap:.0f} ms of the client's; goodput at {top['rate']:g} req/s: "
            f"{_pct(top['all']['goodput_share'])}. After a {burst['burst_s']:.0f} s burst at "
            f"{burst['rate'] / recovery['sustainable']['rate']:.0f}× capacity, "
            f"{_pct(burst['after_from_5s']['answered_share'], 0)} answered from 5 s on (`serve_recovery.md`); forced "
            f"replies use p50 {_pct(forced['50'])} / p99 {_pct(forced['99'])} of the deadline; the idle per-token "
            f"estimate is off by {errors}."]


# -- A/B, training, GPU ----------------------------------------------------------------------------------
def ab_checks(assignment: Report, ingest: Report, replicas: Report, power: Report, truth: Report,
              rolling: Report, frozen: Report) -> list[str]:  # fmt: skip
    """The A/B package's checks: assignment shares, durable ingest, replicas, the A/A false-positive rate, a
    refusing arm's latency against the client's, a rolling restart and a frozen replica under load."""
    splits = assignment["splits"]
    best = {store: max(r["events_per_s"] for r in ingest["runs"] if r["store"] == store)
            for store in ("sqlite", "postgresql")}
    rates = {s["replicas"]: s["sustainable_rate"] for s in replicas["sets"]}
    aa = power["aa_200_looks20"]
    return ["| check | command | result |", "|---|---|---|",
            f"| {assignment['viewers']:,} assignments, share vs weight | `python benchmarks/ab_assignment.py` | "
            f"max error {splits['50/50']['max_abs_diff_pp']:.3f} pp (50/50), "
            f"{splits['90/10']['max_abs_diff_pp']:.3f} pp (90/10) |",
            f"| durable ingest (fsync per commit) | `python benchmarks/ab_ingest.py` | SQLite {best['sqlite']:,.0f} / "
            f"PostgreSQL {best['postgresql']:,.0f} events/s |",
            "| " + " vs ".join(str(n) for n in rates) + " replicas | `python benchmarks/replica_scaling.py` | "
            + " vs ".join("< " + f"{min(x['offered_rate'] for st in replicas['sets'] for x in st['rows']):g}" if r is None else f"{r:g}" for r in rates.values())
            + f" req/s sustained ({replicas['engine']} engine, 99% within {replicas['deadline_ms']:,} ms) |",
            f"| {aa['reps']} A/A tests, false positives | `python benchmarks/ab_power.py` | fixed horizon "
            f"{_pct(aa['fixed'])}, mSPRT with {aa['looks']} looks {_pct(aa['msprt'])} |",
            f"| a refusing arm's A/B latency (answered replies) vs the viewer's clock, p50 | "
            f"`python benchmarks/ab_latency_truth.py` | {_gap(truth)} |",
            f"| rolling restart of 2 replicas at {rolling['rate']:g} req/s, {rolling['deadline_ms']:,} ms | "
            f"`python benchmarks/rolling_restart.py` | {_rolling(rolling)} |",
            f"| one of 2 replicas frozen (SIGSTOP) for {frozen['replica_out_s'][0]:.0f} s at {frozen['rate']:g} req/s, "
            f"{frozen['deadline_ms']:,} ms | `{frozen['command']}` | {_frozen(frozen)} |"]


def _frozen(frozen: Report) -> str:
    """What the viewers got while a replica was frozen: answered, refused, and anything held past the deadline."""
    t = frozen["phases"]["all"]
    return (f"{t['answered']:,} answered, {t['refused_429']:,} refused with 429 and {t['refused_503']:,} with 503, "
            f"{t['failed']} failed, {t['held_past_deadline']} held past the deadline of {t['requests']:,} requests "
            f"(slowest answer {t['held_max_ms']:,.0f} ms)")


def _gap(truth: Report) -> str:
    """The refusing arm's gap between the A/B log's answered-only latency p50 and the client's."""
    arm = max(truth["arms"], key=lambda a: truth["arms"][a]["log"]["refused"])
    a = truth["arms"][arm]
    return (f"{a['gap_ms']:+.1f} ms ({a['log']['refused']} of {a['log']['sent']} refused; every response "
            f"unfiltered: {a['unfiltered_p50_ms']:.0f} ms)")


def _rolling(rolling: Report) -> str:
    """Failed, late, refused and lost A/B events over a rolling restart."""
    t = rolling["phases"]["all"]
    return (f"{t['failed']} failed, {t['late']} late, {t['responses_lost'] + t['outcomes_lost']} A/B events lost of "
            f"{t['requests']:,} requests ({t['refused_429']:,} refused with 429)")


def training(tiny: Report, smollm2: Report, gpu: Report) -> list[str]:
    """Training throughput on this CPU, and the one-H100 check."""
    steps = {v["steps"] for v in gpu["grpo"].values() if "steps" in v}
    return [f"`python benchmarks/train_throughput.py`: tiny MoE {tiny['best_tokens_per_s']:.0f}, SmolLM2-135M "
            f"{smollm2['best_tokens_per_s']:.0f} tokens/s (fwd + bwd + AdamW). `bash benchmarks/gpu_check.sh`, one "
            f"{gpu['device']}: stage 1 in {gpu['rft']['timings_s']['total_s']:.1f} s, "
            f"{'/'.join(map(str, sorted(steps)))} GRPO steps of {', '.join(gpu['grpo'])}."]


def rollouts(report: Report) -> list[str]:
    """Each stage-2 rollout mode against sync: run wall, speed-up, idle shares, the final student's quality."""
    meta = report["meta"]

    def cell(row: dict[str, Any], key: str, scale: float = 1.0, digits: int = 1) -> str:
        low_high = row["ci"].get(key)
        text = f"{scale * row[key]:.{digits}f}"
        return text if not low_high else f"{text} [{scale * low_high[0]:.{digits}f}, {scale * low_high[1]:.{digits}f}]"

    lines = [f"{meta['steps']} GRPO steps × {meta['prompts_per_step']} prompts × {meta['generations']} completions "
             f"(max {meta['max_completion_length']} tokens) per run, band variant, tiny student, stage-2 seeds "
             f"{', '.join(map(str, meta['seeds']))}; final students on {meta['eval_tasks']} test tasks"
             + (f"; on {meta['machine']}, the trainer in bf16" if meta.get("device") == "cuda" else "")
             + ("; sync and tail roll out on transformers `generate`" if meta.get("rollout_engine") == "transformers"
                else "") + ". Brackets: C and H, Clopper–Pearson 95% pooled over tasks × seeds; the rest, min and "
             "max over seeds.", "",
             "| mode | run wall (s) | speed-up | engine idle | trainer idle | staleness (bound) | tokens | C (%) | H (%) "
             "| inside sync's interval (T/C/H) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["tiny"]["summary"]:
        inside = "/".join({True: "yes", False: "no", None: "–"}[row["inside_sync_ci"][k]]
                          for k in ("tokens", "correctness", "helpfulness"))
        lines.append(f"| {row['mode']} | {cell(row, 'train_wall_s')} | {row['speedup']:.2f}× | "
                     f"{_pct(row['engine_idle_share'], 0)} | {_pct(row['trainer_idle_share'], 0)} | "
                     f"{row['staleness_max']} ({row['staleness_bound']}) | {cell(row, 'tokens')} | "
                     f"{cell(row, 'correctness', 100)} | {cell(row, 'helpfulness', 100)} | {inside} |")
    lines += [f"| {mode} | not supported: {why} | | | | | | | | |" for mode, why in report.get("unsupported", {}).items()]
    return lines


def vllm_bench(bench: Report) -> list[str]:
    """vLLM's benchmark client against the deployment: failures and its median TTFT beside the server's own."""
    rows = ["| arm, load | requests | failed | `vllm bench serve` median TTFT | server's first token (median) | "
            "difference | target |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in bench["rows"]:
        rows.append(f"| {r['arm']}, {r['load']} | {r['num_prompts']} | {r['failed']} | "
                    f"{r['median_ttft_ms_vllm_bench']:.1f} ms | {r['median_first_token_ms_server']:.1f} ms | "
                    f"{_num(r['median_difference_ms'], sign=True)} ms | {'met' if r['target_met'] else 'missed'} |")
    load = f"load average {bench['loadavg_before'][0]:g} before and {bench['loadavg_after'][0]:g} after"
    return [*rows, "", f"`{bench['command']}`, {load}, {bench['wall_s']:.0f} s."]


def speech_goodput(result: Report) -> list[str]:
    """Speech goodput against goodput in one piece, per arm, paired over the same tasks."""
    dl = f"{result['deadline_ms']:,} ms"
    rows = ["| arm | goodput in one piece | speech goodput | speech − one piece (paired) | thinking tokens gained | "
            "first sentence p99 | stalls | retracted |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, r in result["arms"].items():
        w, s, c = r["whole"], r["speech"], r["paired"]
        rows.append(f"| {arm} | {_pct(w['goodput'])} | {_pct(s['goodput'])} | "
                    f"{_num(100 * c['difference'], sign=True)} [{_num(100 * c['ci95'][0], sign=True)}, "
                    f"{_num(100 * c['ci95'][1], sign=True)}] | {_num(c['thinking_tokens_gained'], sign=True)} | "
                    f"{s['latency_ms']['p99']:,.0f} ms | {s['stalls']} | {s['retracted']} |")
    return [*rows, "", f"{result['tasks']} `{result['split']}` tasks per arm, one at a time, deadline {dl}, "
            f"{result['speech_rate_wps']:g} words/s; `{result['command']}`, load average "
            f"{result['loadavg_before'][0]:g} before and {result['loadavg_after'][0]:g} after."]


def speech_goodput_brief(result: Report) -> list[str]:
    """The README's sentence: each arm's speech goodput against its goodput in one piece, paired."""
    parts = []
    for arm, r in result["arms"].items():
        c = r["paired"]
        parts.append(f"{arm} {_pct(r['whole']['goodput'])} in one piece, {_pct(r['speech']['goodput'])} streamed "
                     f"({_num(100 * c['difference'], sign=True)} points [{_num(100 * c['ci95'][0], sign=True)}, "
                     f"{_num(100 * c['ci95'][1], sign=True)}], {_num(c['thinking_tokens_gained'], sign=True)} thinking "
                     f"tokens a reply)")
    speech = list(result["arms"].values())
    return [f"Goodput at {result['deadline_ms']:,} ms over {result['tasks']} `{result['split']}` tasks, paired: "
            + "; ".join(parts) + f". Streamed: {sum(r['speech']['stalls'] for r in speech)} speech stalls, "
            f"{sum(r['speech']['retracted'] for r in speech)} retracted sentences."]


def llm_judge(report: Report) -> list[str]:
    """The LLM judge's false-accept rate per probe kind beside the rubric's, and its κ with the rubric."""
    meta, llm, rubric = report["meta"], report["probes"]["llm"], report["probes"]["rubric"]
    rows = ["| kind | n | LLM judge: C = 1 | rubric: C = 1 |", "|---|---:|---:|---:|"]
    for kind, row in llm.items():
        if row["n"]:
            rows.append(f"| {kind} | {row['n']} | {_pct(row['C1_rate'])} [{100 * row['C1_ci95'][0]:.1f}, "
                        f"{100 * row['C1_ci95'][1]:.1f}] | {_pct(rubric[kind]['C1_rate'])} |")
    out = [*rows, ""]
    agreement = report.get("agreement")
    if agreement:
        parts = []
        for name in ("C", "H"):
            k = agreement[name]
            parts.append(f"{name}: κ {k['kappa']:.3f} [{k['kappa_ci95'][0]:.3f}, {k['kappa_ci95'][1]:.3f}], "
                         f"raw agreement {_pct(k['agreement'])}" if k["kappa"] is not None
                         else f"{name}: κ undefined ({k['note']})")
        out.append(f"Agreement with the rubric on {agreement['C']['n']} student replies ({meta['split']}): "
                   + "; ".join(parts) + ".")
    out.append(f"{report['verdict']} `{meta['command']}`, {meta['wall_s']:.0f} s, load average "
               f"{meta['loadavg_before'][0]:g} before and {meta['loadavg_after'][0]:g} after.")
    return out


BLOCKS: dict[str, tuple[tuple[str, ...], Callable[..., list[str]]]] = {
    "stage1": (("teacher_quality.json", "compression.json"), stage1),
    "compression": (("compression.json",), compression),
    "compression_brief": (("compression.json",), compression_brief),
    "budget_training": (("budget_training.json",), budget_training),
    "budget_training_summary": (("budget_training.json",), budget_training_summary),
    "holdout_students": (("holdout_students.json",), holdout_students),
    "holdout_students_summary": (("holdout_students.json",), holdout_students_summary),
    "shipped_seeds": (("budget_training_holdout/budget_training.json",), shipped_seeds),
    "serve_goodput": (("serve_load.json",), serve_goodput),
    "serve_summary": (("serve_load.json", "serve_recovery.json"), serve_summary),
    "vllm_bench": (("vllm_bench.json",), vllm_bench),
    "llm_judge": (("llm_judge_probes.json",), llm_judge),
    "speech_goodput": (("speech_goodput.json",), speech_goodput),
    "speech_goodput_brief": (("speech_goodput.json",), speech_goodput_brief),
    "ab_checks": (("ab_assignment.json", "ab_ingest.json", "replica_scaling.json", "ab_power.json",
                   "ab_latency_truth.json", "rolling_restart.json", "frozen_replica.json"), ab_checks),
    "rollouts": (("rollouts.json",), rollouts),
    "rollouts_gpu": (("rollouts_gpu.json",), rollouts),
    "training": (("train_throughput.json", "train_throughput_smollm2.json", "gpu_check.json"), training),
}


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {re.escape(name)} -->\n)(.*?)(<!-- /{re.escape(name)} -->)", re.S)


def render(text: str, results: Path = RESULTS) -> str:
    """``text`` with every block it holds rewritten from its results files."""
    for name, (files, build) in BLOCKS.items():
        pattern = _pattern(name)
        if not pattern.search(text):
            continue
        block = "\n".join(build(*(json.loads((results / f).read_text()) for f in files))) + "\n"
        text = pattern.sub(lambda m, b=block: m.group(1) + b + m.group(3), text)
    return text


def stale_tables(text: str, results: Path = RESULTS) -> list[str]:
    """Names of the blocks whose text differs from what their results files give."""
    fresh = render(text, results)
    return [name for name in BLOCKS if _section(text, name) != _section(fresh, name)]


def _section(text: str, name: str) -> str | None:
    match = _pattern(name).search(text)
    return match.group(2) if match else None


def documents(root: Path = ROOT) -> list[Path]:
    """The Markdown files that may hold blocks: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when a block is stale")
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md and docs/*.md)")
    args = parser.parse_args(argv)
    stale_any = False
    for path in args.files or documents():
        text = path.read_text()
        if args.check:
            for name in stale_tables(text):
                stale_any = True
                print(f"{path}: block {name} differs from benchmarks/results/{', '.join(BLOCKS[name][0])}; "
                      "run python benchmarks/readme_tables.py", file=sys.stderr)
        elif (fresh := render(text)) != text:
            path.write_text(fresh)
            print(f"rewrote {path}")
    return 1 if stale_any else 0


if __name__ == "__main__":
    raise SystemExit(main())
