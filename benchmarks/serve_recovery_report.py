"""The recovery benchmark's report: the verdicts, the Markdown and the plot of ``serve_recovery.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


# -- report ---------------------------------------------------------------------------------------------
def fmt_ms(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


def verdicts(result: dict[str, Any]) -> list[str]:
    lines = []
    b = result.get("burst")
    if b:
        s = b["after_from_5s"]["answered_share"]
        lines.append(f"after a {b['burst_s']:.0f} s burst at {b['rate']:.2f} req/s (3x sustainable): "
                     f"{100 * (s or 0):.1f}% of one-at-a-time requests answered from 5 s after it (target ≥ 99%): "
                     f"{'met' if s is not None and s >= 0.99 else 'NOT met'}")
    for model, v in result.get("idle_decode", {}).items():
        e = abs(v["relative_error"])
        lines.append(f"{model}: idle per-token estimate {v['estimated_idle_tpot_ms']:.2f} ms vs measured "
                     f"{v['measured_idle_tpot_ms']:.2f} ms ({100 * v['relative_error']:+.1f}%; target within 15%): "
                     f"{'met' if e <= 0.15 else 'NOT met'}")
    for arm, v in result.get("forced", {}).items():
        f = v["forced_deadline_used"]
        if f["50"] is None:
            lines.append(f"{arm}: no reply whose thinking the deadline ended at {result['forced_deadline_ms']} ms "
                         f"(the arm's thinking_budget {v['arm_thinking_budget']} or the model ended it first)")
            continue
        ok = f["50"] >= 0.85 and f["99"] <= 1.0
        lines.append(f"{arm}: the {v['deadline_forced']} replies whose thinking the deadline ended at "
                     f"{result['forced_deadline_ms']} ms use p50 {100 * f['50']:.1f}% / p99 {100 * f['99']:.1f}% of it "
                     f"(targets ≥ 85% / ≤ 100%): {'met' if ok else 'NOT met'}")
    return lines


def write_report(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve_recovery.json").write_text(json.dumps(result, indent=2))
    md = ["# Recovery and deadline use of the `make demo` deployment", "",
          f"Command: `{result['command']}`  ", f"Machine: {result['environment']}", "", "## Targets", ""]
    md += [f"- {line}" for line in verdicts(result)]
    md += ["", "## Idle decode: estimate vs measured (client's inter-token time, streamed)", "",
           "| model | estimate (ms/token) | measured (ms/token) | error |", "|---|---|---|---|"]
    for m, v in result.get("idle_decode", {}).items():
        md.append(f"| {m} | {v['estimated_idle_tpot_ms']:.2f} | {v['measured_idle_tpot_ms']:.2f} | "
                  f"{100 * v['relative_error']:+.1f}% |")
    b = result.get("burst")
    if b:
        md += ["", f"## Burst and recover (sustainable: {result['sustainable']['rate']} req/s answered in the deadline "
               f"by {result['sustainable'].get('viewers', 8)} closed-loop viewers; burst at {b['rate']} req/s for "
               f"{b['burst_s']:.0f} s)", "",
               "| phase | requests | answered | refused (429) | answered share |", "|---|---|---|---|---|"]
        for name in ("before", "during", "after", "after_from_5s"):
            s = b[name]
            md.append(f"| {name.replace('_', ' ')} | {s['requests']} | {s['answered']} | {s['refused']} | "
                      f"{100 * (s['answered_share'] or 0):.1f}% |")
        for k, s in b["after_bins"].items():
            md.append(f"| after, {k} | {s['requests']} | {s['answered']} | {s['refused']} | "
                      f"{100 * (s['answered_share'] or 0):.1f}% |")
        states = sorted({(h['status'], h['reason']) for h in b["health"]}, key=str)
        md += ["", f"/health after the burst: {', '.join(s for s, _ in states)} "
               f"({len(b['health'])} reads)."]
    f = result.get("forced")
    if f:
        md += ["", f"## Replies at {result['forced_deadline_ms']} ms, forced to answer (`below_min_thinking: answer`)",
               "", "Forced: thinking ended by a cap or a time limit; by the deadline: not by the arm's own "
               "`thinking_budget` (the experiment's cap). The target is on the replies the deadline ended.", "",
               "| arm (thinking_budget) | answered | forced | by the deadline | cut | fallback | deadline used p50 / p90 / "
               "p99 / max (all) | by the deadline: p50 / p99 | in deadline | plan error p50, all / by the deadline (ms) "
               "| thinking tokens | correct | goodput |",
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for arm, v in f.items():
            d, fd = v["deadline_used"], v["forced_deadline_used"]

            def p(x: float | None) -> str:
                return "–" if x is None else f"{100 * x:.1f}%"

            md.append(f"| {arm} ({v['arm_thinking_budget']}) | {v['answered']}/{v['requests']} | {v['forced']} | "
                      f"{v['deadline_forced']} | {v['cut_at_deadline']} | "
                      f"{v['fallback']} | {p(d['50'])} / {p(d['90'])} / {p(d['99'])} / {p(d['max'])} | "
                      f"{p(fd['50'])} / {p(fd['99'])} | {v['within_deadline']} | "
                      f"{v['plan_error_ms']['p50'] or 0:.0f} / {fmt_ms(v['plan_error_deadline_forced_ms']['p50'])} | "
                      f"{v['reasoning_tokens_mean'] or 0:.0f} | "
                      f"{p(v['correct_share'])} | {p(v['goodput'])} |")
    md += ["", f"Load average before {result['loadavg_before']}, after {result['loadavg_after']}; "
           f"wall time {result['wall_s']:.0f} s.", *[f"- {n}" for n in result.get("notes", [])]]
    (out / "serve_recovery.md").write_text("\n".join(md) + "\n")
    plot(result, out / "serve_recovery.png")


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    b = result.get("burst")
    if b:
        rows = b["after_rows"]
        xs = [r["after_s"] for r in rows]
        axes[0].scatter(xs, [r["client_ms"] for r in rows], c=["tab:green" if r["status"] == 200 else "tab:red"
                                                               for r in rows], s=14)
        axes[0].axvline(5, ls="--", c="grey")
        axes[0].set(xlabel="seconds after the burst", ylabel="client ms (green: answered, red: refused)",
                    title=f"one request at a time after a burst at {b['rate']} req/s")
    for arm, v in result.get("forced", {}).items():
        axes[1].hist(v["used_values"], bins=np.linspace(0, 1.1, 23), alpha=0.5, label=arm)
    axes[1].axvline(0.85, ls="--", c="grey")
    axes[1].axvline(1.0, c="black")
    axes[1].set(xlabel="share of the deadline used (client's clock)", ylabel="replies",
                title=f"replies at {result.get('forced_deadline_ms')} ms, forced to answer")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
