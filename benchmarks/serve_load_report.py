"""The serving load benchmark's summaries and report: goodput and latency per scenario, the deadline sweep,
the target verdicts, the Markdown and the plot."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from serve_common import pct
from serve_load_client import Outcome, viewer_outcome

from livethink.eval.goodput import summarize as goodput_summary


# -- summaries --------------------------------------------------------------------------------------------
def summarize(outs: list[Outcome], deadline_ms: int, wall_s: float | None = None) -> dict[str, Any]:
    n = len(outs)
    ok = [o for o in outs if o.status == 200]
    client = [o.client_ms for o in ok]
    gaps = [o.client_ms - o.server_ms for o in ok if o.server_ms is not None]
    within = [o for o in ok if o.client_ms <= deadline_ms]
    viewers = [viewer_outcome(o, deadline_ms) for o in outs]
    g = goodput_summary(viewers)
    helpful = sum(v.good and o.helpful for v, o in zip(viewers, outs, strict=True))
    return {
        "requests": n,
        "accepted": len(ok),
        "rejected_429": sum(o.status == 429 for o in outs),
        "rejected_below_min_thinking": sum(o.status == 429 and o.fallback_reason == "below_min_thinking" for o in outs),
        "hangs_or_transport_errors": sum(o.status == 0 for o in outs),
        "errors": sum(o.status not in (0, 200, 429) for o in outs),
        "fallback": sum(o.fallback for o in ok),
        "fallback_below_min_thinking": sum(o.fallback_reason == "below_min_thinking" for o in ok),
        "fallback_reasons": dict(Counter(o.fallback_reason or "unknown" for o in ok if o.fallback)),
        "forced_end_of_thinking": sum(o.forced for o in ok),
        "client_ms": {"p50": pct(client, 50), "p99": pct(client, 99), "max": pct(client, 100)},
        "server_ms": {"p50": pct([o.server_ms for o in ok if o.server_ms is not None], 50),
                      "p99": pct([o.server_ms for o in ok if o.server_ms is not None], 99)},
        "gap_ms": {"p50": pct(gaps, 50), "max_abs": round(max(abs(g) for g in gaps), 1) if gaps else None},
        "within_deadline_of_accepted": round(len(within) / len(ok), 4) if ok else None,
        "goodput_share": round(g.goodput, 4) if n else None,
        "helpful_share": round(helpful / n, 4) if n else None,
        "goodput_rps": round(g.good / wall_s, 2) if wall_s else None,
    }


def deadline_stats(outs: list[Outcome], deadline_ms: float) -> dict[str, Any]:
    """One row of the goodput-against-the-deadline table: ``outs`` judged against ``deadline_ms`` by the client's
    clock with the one goodput definition (``livethink.eval.goodput``), its 95% Wilson interval, and client e2e
    percentiles of the 200 replies (model or fallback; refusals are fast and would flatter them)."""
    viewers = [viewer_outcome(o, deadline_ms) for o in outs]
    g = goodput_summary(viewers)
    lo, hi = g.goodput_interval()
    replied = [o.client_ms for o in outs if o.status == 200]
    return {"sent": g.sent, "answered": g.answered, "correct": g.correct, "fallback": g.fallback,
            "refused": g.refused, "late": g.late, "errors": g.errors, "good": g.good,
            "goodput": round(g.goodput, 4), "goodput_ci95": [round(lo, 4), round(hi, 4)],
            "helpful": sum(v.good and o.helpful for v, o in zip(viewers, outs, strict=True)),
            "client_ms": {"p50": pct(replied, 50), "p95": pct(replied, 95)}}


def sweep_row(server: str, model: str, load: str, rate: float | None, deadline_ms: float,
              outs: list[Outcome]) -> dict[str, Any]:
    return {"server": server, "model": model, "load": load, "rate": rate, "deadline_ms": deadline_ms,
            **deadline_stats(outs, deadline_ms)}


def by_arm(outs: list[Outcome], deadline_ms: int, wall_s: float | None) -> dict[str, dict[str, Any]]:
    arms = sorted({o.arm for o in outs if o.arm})
    return {a: summarize([o for o in outs if o.arm == a], deadline_ms, wall_s) for a in arms}


def meets_latency(s: dict[str, Any], deadline_ms: int) -> bool:
    p99 = s["client_ms"]["p99"]
    return (s["within_deadline_of_accepted"] or 0) >= 0.999 and p99 is not None and p99 <= deadline_ms + 100 \
        and not s["hangs_or_transport_errors"]


def sustains(s: dict[str, Any], unloaded_goodput: float, deadline_ms: int) -> bool:
    """An arm sustains a rate: the latency targets, and goodput ≥ 90% of the arm's unloaded goodput."""
    return meets_latency(s, deadline_ms) and (s["goodput_share"] or 0) >= 0.9 * unloaded_goodput


def sustainable_rates(load: list[dict[str, Any]], unloaded: dict[str, dict[str, Any]],
                      deadline_ms: int) -> dict[str, dict[str, Any]]:
    """Per arm: the highest tested rate it sustains, the highest that meets the latency targets alone."""
    out = {}
    for arm, u in unloaded.items():
        base = u["goodput_share"] or 0
        rows = [r for r in load if arm in r["arms"]]
        ok = [r["rate"] for r in rows if sustains(r["arms"][arm], base, deadline_ms)]
        lat = [r["rate"] for r in rows if meets_latency(r["arms"][arm], deadline_ms)]
        out[arm] = {"rate": max(ok) if ok else None, "latency_only_rate": max(lat) if lat else None,
                    "unloaded_goodput": base}
    return out


def deployment_rate(load: list[dict[str, Any]], unloaded: dict[str, dict[str, Any]],
                    deadline_ms: int) -> tuple[float, str]:
    """The rate of the deadline sweep's loaded phase: the highest tested rate that every arm sustains, else the
    lowest tested rate; with a line saying which."""
    common = [r["rate"] for r in load if all(
        arm in r["arms"] and sustains(r["arms"][arm], u["goodput_share"] or 0, deadline_ms)
        for arm, u in unloaded.items())]
    if common:
        return max(common), f"the highest tested rate every arm sustains at {deadline_ms} ms"
    lowest = min(r["rate"] for r in load)
    return lowest, f"no tested rate is sustained by every arm at {deadline_ms} ms: the lowest tested rate"


# -- report -----------------------------------------------------------------------------------------------
def _row(label: str, s: dict[str, Any]) -> str:
    c, sv, g = s["client_ms"], s["server_ms"], s["gap_ms"]
    w = s["within_deadline_of_accepted"]
    return (f"| {label} | {s['requests']} | {s['accepted']} | {s['rejected_429']} ({s.get('rejected_below_min_thinking', '–')}) | {s['fallback']} "
            f"({s['fallback_below_min_thinking']}) | {s['hangs_or_transport_errors']} | {s['errors']} | "
            f"{c['p50']} / {c['p99']} / {c['max']} | {sv['p50']} / {sv['p99']} | {g['p50']} / {g['max_abs']} | "
            f"{'-' if w is None else f'{100 * w:.1f}%'} | {100 * (s['goodput_share'] or 0):.1f}% | "
            f"{_share(s.get('helpful_share'))} |")


def _share(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


HEADER = ("| scenario | sent | ok | 429 (below floor) | fallback (below floor) | hang | err | client p50 / p99 / max ms | "
          "server p50 / p99 ms | gap p50 / max ms | within deadline (accepted, client) | goodput (of sent) | "
          "correct & helpful (of sent) |\n"
          "|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|")

SWEEP_HEADER = ("| server | model | load | deadline ms | sent | answered | correct | fallback | 429 | late | err | "
                "goodput [95% CI] | correct & helpful | client p50 / p95 ms |\n"
                "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")

GOODPUT_NOTE = ("goodput = the share of the requests sent answered by the model (not the fallback, not refused) "
                "correctly by `RubricJudge`, within the deadline by the client's clock (`livethink.eval.goodput`); "
                "'correct & helpful' also needs the judge's helpfulness.")
OLD_GOODPUT_NOTE = ("goodput = correct AND helpful by `RubricJudge`, not the fallback, within the deadline by the "
                    "client's clock, as a share of all requests sent.")


def series_key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["server"], row["model"], row["load"]


def series_label(row: dict[str, Any]) -> str:
    server = "livethink" if row["server"] == "livethink" else "plain vLLM"
    load = "one at a time" if row["load"] == "unloaded" else f"{row['rate']:g} req/s"
    return f"{server} {row['model']}, {load}"


def sweep_table(rows: list[dict[str, Any]]) -> list[str]:
    """The goodput-against-the-deadline table, one line per server, model, load and deadline."""
    order = list(dict.fromkeys(series_key(r) for r in rows))
    lines = SWEEP_HEADER.split("\n")
    for r in sorted(rows, key=lambda r: (order.index(series_key(r)), r["deadline_ms"])):
        lo, hi = r["goodput_ci95"]
        c = r["client_ms"]
        load = "unloaded" if r["load"] == "unloaded" else f"{r['rate']:g} req/s"
        lines.append(f"| {'livethink' if r['server'] == 'livethink' else 'plain vLLM'} | {r['model']} | {load} | "
                     f"{r['deadline_ms']:g} | {r['sent']} | {r['answered']} | {r['correct']} | {r['fallback']} | "
                     f"{r['refused']} | {r['late']} | {r['errors']} | {100 * r['goodput']:.1f}% "
                     f"[{100 * lo:.1f}, {100 * hi:.1f}] | {_share(r['helpful'] / r['sent'] if r['sent'] else None)} | "
                     f"{'–' if c['p50'] is None else c['p50']} / {'–' if c['p95'] is None else c['p95']} |")
    return lines


def plot_sweep(sweep: dict[str, Any], path: Path) -> Path:
    """Goodput against the deadline with 95% intervals, one line per server, model and load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sweep["rows"]
    order = list(dict.fromkeys(series_key(r) for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows if r["server"] == "livethink"))
    colours = {m: plt.get_cmap("tab10")(i) for i, m in enumerate(models)}
    span = max(sweep["deadlines_ms"]) - min(sweep["deadlines_ms"]) or 1000
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, key in enumerate(order):
        pts = sorted((r for r in rows if series_key(r) == key), key=lambda r: r["deadline_ms"])
        dodge = (i - (len(order) - 1) / 2) * 0.006 * span  # side by side, so the intervals stay apart
        x = [r["deadline_ms"] + dodge for r in pts]
        y = [100 * r["goodput"] for r in pts]
        err = [[yi - 100 * r["goodput_ci95"][0] for yi, r in zip(y, pts, strict=True)],
               [100 * r["goodput_ci95"][1] - yi for yi, r in zip(y, pts, strict=True)]]
        vllm = key[0] != "livethink"
        ax.errorbar(x, y, yerr=err, label=series_label(pts[0]), capsize=3, linewidth=1.5,
                    color="black" if vllm else colours[key[1]], linestyle="--" if key[2] == "loaded" else "-",
                    marker="s" if vllm else "o", markersize=4, alpha=0.9)
    ax.set_xticks(sweep["deadlines_ms"])
    ax.set_xlabel("deadline (ms, the client's clock)")
    ax.set_ylabel("goodput (% of requests sent)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"Goodput against the deadline, one at a time and at {sweep['load_rate']:g} req/s (95% Wilson)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def latency_verdict(s: dict[str, Any], deadline_ms: int) -> str:
    """MET / NOT MET for one scenario's latency target, with its figures; none to judge when nothing was accepted."""
    if not s["accepted"]:
        below = s.get("rejected_below_min_thinking")
        floor = "" if below is None else f", {below} of them below the thinking floor"
        return f"nothing to judge: no request accepted ({s['rejected_429']} of {s['requests']} refused with 429{floor})"
    return (f"{'MET' if meets_latency(s, deadline_ms) else 'NOT MET'} "
            f"({100 * (s['within_deadline_of_accepted'] or 0):.2f}% within, p99 {s['client_ms']['p99']} ms)")


def delivery_note(s: dict[str, Any]) -> str:
    """Where a late reply's time went: the server's own late count by its last-byte clock, and the client's GC."""
    if "server_late_last_byte" not in s:
        return ""
    return (f"; late by the server's own last-byte clock: {s['server_late_last_byte']} of {s['server_answered']}, "
            f"client GC pauses max {s['client_gc']['max_ms']} ms")


def target_lines(result: dict[str, Any]) -> list[str]:
    """The report's target verdicts, from the measured figures in ``result``."""
    dl, lines = result["deadline_ms"], []
    dep = result.get("deployment") or {}
    for r in dep.get("load", []):
        s, gap = r["all"], r["all"]["gap_ms"]["max_abs"]
        gap_verdict = ("nothing to judge" if gap is None
                       else f"{'MET' if gap <= 50 else 'NOT MET'} (max gap {gap} ms)")
        lines.append(f"{r['rate']} req/s{' (3×)' if r.get('overload') else ''}: ≥ 99.9% within {dl} ms and p99 ≤ "
                     f"{dl + 100} ms: {latency_verdict(s, dl)}; server figure within 50 ms of the client's: "
                     f"{gap_verdict}; hangs {s['hangs_or_transport_errors']}{delivery_note(s)}")
    for arm, v in dep.get("sustainable", {}).items():
        lines.append(f"{arm}: sustainable rate with goodput ≥ 90% of unloaded ({100 * v['unloaded_goodput']:.1f}%): "
                     f"{v['rate'] if v['rate'] is not None else 'none of the tested rates'} "
                     f"(latency targets alone: {v['latency_only_rate']})")
    cold = result.get("cold")
    for tag in ("cold", "warm") if cold else ():
        s = cold[tag]
        lines.append(f"{tag} never-stopping student at {cold['rate']} req/s: {latency_verdict(s, dl)}, "
                     f"{s['rejected_429']} of {s['requests']} refused{delivery_note(s)}")
    return lines


def write_report(result: dict[str, Any], out: Path, tag: str = "") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    result["targets"] = target_lines(result)
    stem = f"serve_load_{tag}" if tag else "serve_load"
    if result.get("deadline_sweep"):
        result["deadline_sweep"]["plot"] = plot_sweep(result["deadline_sweep"], out / f"{stem}.png").name
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    env = result["environment"]
    busy = (" **busy with other jobs when it started**" if env["loadavg_before"][0] >= env["cpus"] / 2 else "")
    lines = ["# Serving load benchmark: the `make demo` deployment (`benchmarks/serve_load.py`)", "",
             f"Command: `{result['command']}`  ",
             f"Machine: {env['cpus']} CPUs{busy} (load average before/after {env['loadavg_before']} / "
             f"{env['loadavg_after']}), Python {env['python']}, deadline "
             f"{result['deadline_ms']} ms, {env['total_s']} s in all. Latency by the client's clock (loopback "
             "HTTP, httpx); the server's own `timings.e2e_ms` beside it.", ""]
    lines += [f"**Note:** {n}  " for n in result["notes"]]
    d = result.get("deployment")
    if d:
        ab = d.get("experiment", True)  # results written before --model always ran the experiment
        lines += ["", "## Deployment: two arms, A/B on" if ab else f"## Deployment: {len(d['arms'])} model(s), no "
                  "experiment", "", f"Arms: {d['arms']}", "",
                  f"### Unloaded (one request at a time, {'arm' if ab else 'model'} forced)", "", HEADER]
        for arm, s in d["unloaded"].items():
            lines.append(_row(f"{arm} alone", s))
        lines += ["", f"### Poisson load ({'viewers hashed to arms' if ab else 'requests name the models in turn'})",
                  "", HEADER]
        for r in d["load"]:
            tag = " (3× sustainable)" if r.get("overload") else ""
            lines.append(_row(f"{r['rate']} req/s{tag}, all", r["all"]))
            for arm, s in r["arms"].items():
                lines.append(_row(f"{r['rate']} req/s{tag}, {arm}", s))
        lines += ["", "### Sustainable rate per arm", ""]
        for arm, v in d["sustainable"].items():
            lines.append(f"- {arm}: {v}")
    cold = result.get("cold")
    if cold:
        lines += ["", f"## Cold start vs warm: never-stopping student at {cold['rate']} req/s", "", HEADER,
                  _row("cold (first requests after start)", cold["cold"]), _row("warm (same server, again)", cold["warm"])]
    v = result.get("vllm")
    if v:
        lines += ["", f"## Plain vLLM OpenAI server, same model ({v.get('model', 'RFT')}) and token cap "
                  f"({v['max_tokens']})", "", HEADER]
        for r in v["load"]:
            lines.append(_row(f"{r['rate']} req/s", r["all"]))
    sw = result.get("deadline_sweep")
    if sw:
        models = ", ".join(dict.fromkeys(r["model"] for r in sw["rows"] if r["server"] == "livethink"))
        vllm = [r["model"] for r in sw["rows"] if r["server"] == "vllm"]
        lines += ["", "## Goodput against the deadline", "",
                  f"Models {models}: {sw['requests_per_model']} questions per model one at a time (unloaded), then "
                  f"{sw['loaded_requests']} Poisson arrivals at {sw['load_rate']:g} req/s ({sw['load_rate_source']}), "
                  f"the same questions and arrivals at each deadline (the request's `deadline_ms`)."
                  + (f" Plain vLLM ({vllm[0]}, same token cap) answered the same questions once one at a time and "
                     "once at the same rate; each reply counts at each deadline by its client time." if vllm else ""),
                  "", *sweep_table(sw["rows"]), ""]
        if sw.get("plot"):
            lines += [f"![goodput against the deadline]({sw['plot']})", "",
                      "Points of one deadline are shifted a little sideways so that their intervals stay apart.", ""]
    lines += ["", "## Targets", ""] + [f"- {t}" for t in result["targets"]] + [""]
    note = GOODPUT_NOTE if result.get("goodput_definition") == "correct" else OLD_GOODPUT_NOTE
    lines += [f"{note} Refused requests count as misses. 'gap' = client − server latency of the same reply.", ""]
    (out / f"{stem}.md").write_text("\n".join(lines))
    return out / f"{stem}.md"
