"""The engine benchmark's summaries and report: latency, goodput and shedding per offered rate, the sustainable
rate, the Markdown and the plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from serve_common import pct
from serve_engines_load import Outcome


def summarize(outcomes: list[Outcome], wall_s: float, rate: float, deadline_ms: int) -> dict[str, Any]:
    n = len(outcomes)
    ok = [o for o in outcomes if o.status == 200]
    rejected = sum(o.status == 429 for o in outcomes)
    hangs = sum(o.status == 0 for o in outcomes)
    errors = n - len(ok) - rejected - hangs
    e2e = [o.client_ms for o in ok]
    server_e2e = [o.data["timings"]["e2e_ms"] for o in ok]
    ttft = [
        o.data["timings"]["first_token_ms"] for o in ok if o.data["timings"]["first_token_ms"] is not None
    ]
    ttfr = [
        o.data["timings"]["first_reply_token_ms"]
        for o in ok
        if o.data["timings"]["first_reply_token_ms"] is not None
    ]
    within = [o for o in ok if o.client_ms <= deadline_ms]
    full = [o for o in within if not o.data.get("fallback")]
    good = [o for o in full if o.correct]
    tokens = sum(o.data["tokens"]["reasoning"] + o.data["tokens"]["reply"] for o in ok)
    return {
        "offered_rate": rate,
        "requests": n,
        "accepted": len(ok),
        "rejected_429": rejected,
        "errors": errors,
        "hangs": hangs,
        "wall_s": round(wall_s, 2),
        "throughput_rps": round(len(ok) / wall_s, 2),
        "replies_rps": round(len(full) / wall_s, 2),
        "generated_tokens_per_s": round(tokens / wall_s, 1),
        "ttft_ms": {"p50": pct(ttft, 50), "p95": pct(ttft, 95), "p99": pct(ttft, 99)},
        "first_reply_token_ms": {"p50": pct(ttfr, 50), "p95": pct(ttfr, 95), "p99": pct(ttfr, 99)},
        "e2e_ms": {"p50": pct(e2e, 50), "p95": pct(e2e, 95), "p99": pct(e2e, 99), "max": pct(e2e, 100)},
        "server_e2e_ms": {
            "p50": pct(server_e2e, 50),
            "p99": pct(server_e2e, 99),
            "max": pct(server_e2e, 100),
        },
        "within_deadline_of_accepted": round(len(within) / len(ok), 4) if ok else None,
        "within_deadline_of_all": round(len(within) / n, 4) if n else None,
        "fallback_share_of_accepted": round(sum(bool(o.data.get("fallback")) for o in ok) / len(ok), 4)
        if ok
        else None,
        "forced_end_of_thinking_share": round(
            sum(bool(o.data.get("forced_end_of_thinking")) for o in ok) / len(ok), 4
        )
        if ok
        else None,
        "reasoning_tokens_mean": round(float(np.mean([o.data["tokens"]["reasoning"] for o in ok])), 1)
        if ok
        else None,
        "reply_tokens_mean": round(float(np.mean([o.data["tokens"]["reply"] for o in ok])), 1)
        if ok
        else None,
        "correct_share_of_accepted": round(sum(o.correct for o in ok) / len(ok), 4) if ok else None,
        "goodput_share": round(len(good) / n, 4) if n else None,
        "goodput_rps": round(len(good) / wall_s, 2),
        "rejected_share": round(rejected / n, 4) if n else None,
    }



def sustainable_rate(rows: list[dict[str, Any]]) -> float | None:
    ok = [
        r["offered_rate"]
        for r in rows
        if (r["within_deadline_of_all"] or 0) >= 0.99
        and (r["rejected_share"] or 0) <= 0.01
        and not r["hangs"]
    ]
    return max(ok) if ok else None


# -- report -----------------------------------------------------------------------------------------------
def write_report(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve_engines.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# Serving engines benchmark (`benchmarks/serve_engines.py`)", ""]
    lines.append(f"Command: `{result['command']}`  ")
    env = result["environment"]
    lines.append(
        f"Machine: {env['cpus']} CPUs, load average before/after {env['loadavg_before']} / "
        f"{env['loadavg_after']} (shared with other jobs), {env['python']}, deadline "
        f"{result['deadline_ms']} ms.  "
    )
    for note in result["notes"]:
        lines.append(f"**Note:** {note}  ")
    lines += [
        "",
        "## Engine throughput at the same load (48 × 64 tokens, concurrent)",
        "",
        "| engine | model | startup s | tokens/s | wall s |",
        "|---|---|---:|---:|---:|",
    ]
    for run in result["runs"]:
        raw = run["raw_throughput"]
        lines.append(
            f"| {run['engine']} | {run['model']} | {run['startup_s']} | {raw['tokens_per_s']} | {raw['wall_s']} |"
        )
    if result.get("engine_ratio") is not None:
        lines.append(
            f"\nvLLM / transformers: **{result['engine_ratio']}×** tokens/s with 48 requests at once; "
            f"**{result.get('load_ratio')}×** accepted replies/s and {result.get('load_tokens_ratio')}× "
            f"generated tokens/s at the same Poisson load ({result.get('ratio_rate')} req/s). Target ≥ 5×."
        )
    lines += [
        "",
        "## Load sweep (livestream replies, Poisson arrivals)",
        "",
        "| engine | model | offered req/s | sent | ok | 429 | err | hang | ok req/s | TTFT p50/p95/p99 ms | "
        "e2e p50/p95/p99 ms (client) | server e2e p99 / max ms | within deadline (all) | reasoning / reply tok "
        "| forced end | fallback | correct | goodput req/s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for run in result["runs"]:
        for r in run["sweep"]:
            t, e = r["ttft_ms"], r["e2e_ms"]
            tag = " (3×)" if r.get("overload") else ""
            lines.append(
                f"| {run['engine']} | {run['model']} | {r['offered_rate']}{tag} | {r['requests']} | {r['accepted']} | "
                f"{r['rejected_429']} | {r['errors']} | {r['hangs']} | {r['throughput_rps']} | "
                f"{t['p50']}/{t['p95']}/{t['p99']} | {e['p50']}/{e['p95']}/{e['p99']} | "
                f"{r['server_e2e_ms']['p99']} / {r['server_e2e_ms']['max']} | "
                f"{r['within_deadline_of_all']} | {r['reasoning_tokens_mean']} / {r['reply_tokens_mean']} | "
                f"{r['forced_end_of_thinking_share']} | {r['fallback_share_of_accepted']} | {r['correct_share_of_accepted']} | "
                f"{r['goodput_rps']} |"
            )
    lines += ["", "## Targets", ""]
    for name, t in result["targets"].items():
        lines.append(f"- {name}: {t}")
    lines += [
        "",
        "Latency is measured by the client (loopback HTTP included); TTFT is the server's arrival → first "
        "generated token. 'within deadline (all)' counts refused requests as misses. goodput = replies "
        "within the deadline, not the fallback, and correct by `RubricJudge`.",
        "",
    ]
    (out / "serve_engines.md").write_text("\n".join(lines))
    _plot(result, out / "serve_engines.png")


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(14, 4))
    for run in result["runs"]:
        rows = sorted((r for r in run["sweep"] if not r.get("overload")), key=lambda r: r["offered_rate"])
        x = [r["offered_rate"] for r in rows]
        label = f"{run['engine']} / {run['model']}"
        line = ax1.plot(x, [r["e2e_ms"]["p50"] or np.nan for r in rows], "o-", label=f"{label} p50")[0]
        ax1.plot(
            x,
            [r["e2e_ms"]["p99"] or np.nan for r in rows],
            "s--",
            color=line.get_color(),
            label=f"{label} p99",
        )
        ax2.plot(x, [r["throughput_rps"] for r in rows], "o-", color=line.get_color(), label=label)
        ax3.plot(
            x, [100 * (r["rejected_share"] or 0) for r in rows], "o-", color=line.get_color(), label=label
        )
        for r in run["sweep"]:
            if r.get("overload"):
                ax1.plot(
                    [r["offered_rate"]],
                    [r["e2e_ms"]["p99"]],
                    "*",
                    ms=14,
                    color=line.get_color(),
                    label=f"{label} p99 at 3× sustainable",
                )
                ax3.plot([r["offered_rate"]], [100 * r["rejected_share"]], "*", ms=14, color=line.get_color())
    ax1.axhline(result["deadline_ms"], color="red", lw=1, label="deadline")
    ax1.axhline(result["deadline_ms"] + 100, color="red", lw=1, ls=":", label="deadline + 100 ms")
    ax1.set(
        xlabel="offered load (req/s)",
        ylabel="end-to-end latency of accepted replies (ms)",
        title="Latency vs load",
    )
    ax2.set(xlabel="offered load (req/s)", ylabel="accepted replies / s", title="Throughput")
    ax3.set(xlabel="offered load (req/s)", ylabel="% refused (429)", title="Admission control")
    for ax in (ax1, ax2, ax3):
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
