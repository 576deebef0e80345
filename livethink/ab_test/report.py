"""Experiment report: Markdown + HTML with PNG plots and one verdict line.

Files (each written to a temporary name and renamed, so a crash never leaves a half-written report):
``report.md``, ``report.html``, ``analysis.json``, ``metric_over_time.png``, ``distributions.png``,
``latency.png``.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from livethink.ab_test.analysis import Analysis  # noqa: E402
from livethink.ab_test.metrics import METRICS, VIEWER_METRICS  # noqa: E402

Table = tuple[list[str], list[list[str]]]


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _fmt(x: Any, kind: str = "num") -> str:
    if x is None:
        return "–"
    if kind == "pct":
        return f"{x * 100:.2f}%"
    if kind == "lift":
        return f"{x * 100:+.1f}%"
    if kind == "p":
        return f"{x:.3g}" if x >= 1e-4 else f"{x:.1e}"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _ci(ci: Any, kind: str) -> str:
    return "–" if not ci else f"[{_fmt(ci[0], kind)}, {_fmt(ci[1], kind)}]"


def _kind(metric: str) -> str:
    return "pct" if metric in METRICS and METRICS[metric].kind == "binary" else "num"


def _tables(s: dict[str, Any]) -> dict[str, Table]:
    arms = s["arms"]
    per_arm = (
        ["arm", "variant", "weight", "viewers", "exposures", "click", "add-to-cart", "order", "GMV/viewer",
         "answered latency p50 / p99 ms", "tokens", "deadline met", "correct", "helpful", "requests", "refused",
         "fallback", "errors", "goodput (95% CI)"],
        [
            [
                name, a["variant"] or "–", _fmt(a["weight"]), str(a["viewers"]), str(a["exposures"]),
                _fmt(a["click_rate"], "pct"), _fmt(a["add_to_cart_rate"], "pct"), _fmt(a["order_rate"], "pct"),
                _fmt(a["gmv_per_viewer"]), f"{_fmt(a['latency_ms']['p50'])} / {_fmt(a['latency_ms']['p99'])}",
                _fmt(a["tokens"]["mean"]), _fmt(a["deadline_met_rate"], "pct"), _fmt(a["correct_rate"], "pct"),
                _fmt(a["helpful_rate"], "pct"), str(a["responses"]), _fmt(a["refusal_rate"], "pct"),
                _fmt(a["fallback_rate"], "pct"), _fmt(a["error_rate"], "pct"),
                f"{_fmt(a['goodput'], 'pct')} {_ci(a['goodput_ci'], 'pct')}",
            ]
            for name, a in arms.items()
        ],
    )  # fmt: skip
    rows = []
    for c in s["comparisons"]:
        kind = _kind(c["metric"])
        seq = c.get("sequential") or {}
        rows.append(
            [
                c["metric"] + (" (primary)" if c["metric"] == s["primary_metric"] else ""),
                f"{c['arm']} vs {c['control']}", c["test"], _fmt(c["mean_control"], kind), _fmt(c["mean_treatment"], kind),
                _fmt(c["lift"], "lift"), _ci(c["lift_ci"], "lift"), _fmt(c["p_value"], "p"),
                _fmt(seq.get("p_value"), "p") if seq else "–", _ci(seq.get("lift_ci"), "lift") if seq else "–",
                _fmt(c["cuped"]["variance_reduction"], "pct") if c.get("cuped") else "–",
                "yes" if c["significant"] else "no",
            ]
        )  # fmt: skip
    comparisons = (
        ["metric", "comparison", "test", "control", "treatment", "lift", "95% CI (lift)", "p", "always-valid p",
         "always-valid CI (lift)", "CUPED variance reduction", "significant"],
        rows,
    )  # fmt: skip
    srm_t = (
        ["phase", "weights", "observed viewers", "expected", "chi-square", "p", "flag (p < threshold)"],
        [[str(p["index"]), ", ".join(f"{a} {w:g}" for a, w in zip(s["arms"], p["weights"], strict=True)),
          ", ".join(map(str, p["srm"]["observed"])), ", ".join(f"{e:.1f}" for e in p["srm"].get("expected") or []),
          _fmt(p["srm"].get("chi2")), _fmt(p["srm"]["p_value"], "p"), "SRM" if p["srm"]["flagged"] else "ok"]
         for p in s["phases"]],
    )  # fmt: skip
    guard = (
        ["guardrail", "arm", "control", "treatment", "lift", "p", "status"],
        [[g["metric"], g["arm"], _fmt(g["mean_control"], _kind(g["metric"])),
          _fmt(g["mean_treatment"], _kind(g["metric"])), _fmt(g["lift"], "lift"), _fmt(g["p_value"], "p"),
          g["status"]] for g in s["guardrails"]],
    )  # fmt: skip
    return {"arms": per_arm, "comparisons": comparisons, "srm": srm_t, "guardrails": guard}


def _md_table(t: Table) -> str:
    head, rows = t
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _html_table(t: Table) -> str:
    head, rows = t
    h = "".join(f"<th>{html.escape(x)}</th>" for x in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def _sections(s: dict[str, Any]) -> list[tuple[str, Any]]:
    d = s["data"]
    intro = (
        f"{d['viewers']} viewers, {d['events']} events"
        + (f", {d['multiple_arm_viewers']} viewers exposed to several arms (left out)" if d["multiple_arm_viewers"] else "")
        + (f", {d['unattributed_outcomes']} outcomes of never-exposed viewers (ignored)" if d["unattributed_outcomes"] else "")
        + f". Primary metric: {s['primary_metric']}; control: {s['control']}; alpha {s['alpha']}"
        + (" (Bonferroni over treatments)" if len(s["arms"]) > 2 else "")
        + f"; sequential (mSPRT) decisions: {'on' if s['sequential'] else 'off'}; CUPED: {'on' if s['cuped'] else 'off'}."
    )  # fmt: skip
    t = _tables(s)
    out: list[tuple[str, Any]] = []
    if d["simulated"]:
        out.append(
            (
                "warn",
                f"SIMULATED DATA: {d['simulated_events']} of {d['events']} events come from the simulator.",
            )
        )
    out += [
        ("verdict", s["verdict"]["line"]),
        ("p", intro),
        ("h2", "Per arm"),
        ("table", t["arms"]),
        ("h2", "Sample-ratio mismatch"),
        ("table", t["srm"]),
        ("h2", "Tests (treatment vs control)"),
        ("table", t["comparisons"]),
        ("h2", "Guardrails"),
        ("table", t["guardrails"]),
        ("h2", "Plots"),
        ("img", ("metric_over_time.png", f"{s['primary_metric']} over time with 95% and always-valid intervals")),
        ("img", ("distributions.png", "per-arm distributions")),
        ("img", ("latency.png", "latency by arm")),
        ("h2", "Method"),
        ("p", "Viewer-level metrics: two-proportion z-test (pooled SE) for rates, Welch t-test for means, Wald / "
              "Welch CIs, relative lift CI by the delta method; with CUPED, Welch on Y − θ(X − X̄) with the "
              "pre-exposure value of the metric as X. Always-valid p-values: normal-mixture SPRT (mSPRT) over "
              "the time checkpoints, running minimum of 1/Λ; always-valid CIs intersect over looks. SRM: "
              "chi-square goodness of fit against the configured weights, flagged at p < threshold. "
              "Response-level guardrails (latency, tokens, errors) are tested per reply. See docs/ab_test.md."),
    ]  # fmt: skip
    return out


def _render_sections(s: dict[str, Any], fmt: Mapping[str, Callable[[Any], str]]) -> list[str]:
    """Each report section as text, by ``fmt[kind]``; a kind without an entry (a paragraph) by ``fmt["p"]``."""
    return [fmt.get(kind, fmt["p"])(val) for kind, val in _sections(s)]


_MARKDOWN: dict[str, Callable[[Any], str]] = {
    "warn": lambda v: f"> **{v}**",
    "verdict": lambda v: f"**Verdict: {v}**",
    "h2": lambda v: f"## {v}",
    "table": lambda v: _md_table(v) if v[1] else "_none_",
    "img": lambda v: f"![{v[1]}]({v[0]})",
    "p": lambda v: v,
}
_HTML: dict[str, Callable[[Any], str]] = {
    "warn": lambda v: f'<p class="warn">{html.escape(v)}</p>',
    "verdict": lambda v: f'<p class="verdict">Verdict: {html.escape(v)}</p>',
    "h2": lambda v: f"<h2>{html.escape(v)}</h2>",
    "table": lambda v: _html_table(v) if v[1] else "<p><em>none</em></p>",
    "img": lambda v: (
        f'<figure><img src="{v[0]}" alt="{html.escape(v[1])}"><figcaption>{html.escape(v[1])}</figcaption></figure>'
    ),
    "p": lambda v: f"<p>{html.escape(v)}</p>",
}


def render_markdown(s: dict[str, Any]) -> str:
    parts = [f"# A/B report: {s['experiment']}", *_render_sections(s, _MARKDOWN)]
    return "\n\n".join(parts) + "\n"


def render_html(s: dict[str, Any]) -> str:
    body = [f"<h1>A/B report: {html.escape(s['experiment'])}</h1>", *_render_sections(s, _HTML)]
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px}"
        "th{background:#f4f4f4}.verdict{font-size:1.2em;font-weight:bold}.warn{background:#fff3cd;padding:.5em}"
        "img{max-width:100%}"
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>A/B report: {html.escape(s["experiment"])}</title>'
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n"
    )


def _save_figure(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def _plot_over_time(s: dict[str, Any], path: Path) -> None:
    ts = s["timeseries"]
    cps = np.array(ts["checkpoints"], dtype=float)
    hours = (cps - (s["data"]["first_ts"] or 0)) / 3600 if len(cps) else cps
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    binary = METRICS[ts["metric"]].kind == "binary"
    scale = 100 if binary else 1
    for name, ser in ts["arms"].items():
        v = np.array([np.nan if x is None else x for x in ser["value"]], dtype=float) * scale
        lo = np.array([np.nan if x is None else x for x in ser["ci_low"]], dtype=float) * scale
        hi = np.array([np.nan if x is None else x for x in ser["ci_high"]], dtype=float) * scale
        ax1.plot(hours, v, label=name)
        ax1.fill_between(hours, lo, hi, alpha=0.2)
    ax1.set_title(f"{ts['metric']} by arm (cumulative, 95% CI)")
    ax1.set_xlabel("hours since first exposure")
    ax1.set_ylabel(ts["metric"] + (" (%)" if binary else ""))
    ax1.legend()
    for name, ser in ts["lift"].items():
        arr = {k: np.array([np.nan if x is None else x for x in ser[k]], dtype=float) * 100 for k in ser}
        ax2.plot(hours, arr["lift"], label=f"{name} lift")
        ax2.fill_between(hours, arr["ci_low"], arr["ci_high"], alpha=0.25, label=f"{name} 95% CI")
        ax2.plot(hours, arr["seq_ci_low"], "--", color="grey")
        ax2.plot(hours, arr["seq_ci_high"], "--", color="grey", label=f"{name} always-valid CI")
    ax2.axhline(0, color="black", lw=0.8)
    band = [v for ser in ts["lift"].values() for k in ("ci_low", "ci_high") for v in ser[k] if v is not None]
    if band:  # early looks have huge intervals: frame the plot on the later, informative part
        lo, hi = np.percentile(np.array(band) * 100, [10, 90])
        pad = max(5.0, (hi - lo) * 0.5)
        ax2.set_ylim(min(lo, 0) - pad, max(hi, 0) + pad)
    ax2.set_title(f"relative lift vs {s['control']} (%)")
    ax2.set_xlabel("hours since first exposure")
    ax2.legend(fontsize=8)
    _save_figure(fig, path)


def _plot_distributions(s: dict[str, Any], a: Analysis, path: Path) -> None:
    arms = list(s["arms"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    rates = [m for m in VIEWER_METRICS if METRICS[m].kind == "binary"]
    width = 0.8 / max(1, len(arms))
    for i, name in enumerate(arms):
        vals, errs = [], []
        for m in rates:
            y = a.viewer_values.get(m, np.zeros(0))[a.viewer_arm == i] if len(a.viewer_arm) else np.zeros(0)
            p = float(y.mean()) if len(y) else 0.0
            vals.append(p * 100)
            errs.append(196 * np.sqrt(p * (1 - p) / len(y)) if len(y) else 0.0)
        ax1.bar(np.arange(len(rates)) + i * width, vals, width, yerr=errs, capsize=3, label=name)
    ax1.set_xticks(np.arange(len(rates)) + width * (len(arms) - 1) / 2, rates)
    ax1.set_ylabel("% of viewers (95% CI)")
    ax1.set_title("conversion funnel by arm")
    ax1.legend()
    gmv = a.viewer_values.get("gmv_per_viewer", np.zeros(0))
    for i, name in enumerate(arms):
        g = gmv[(a.viewer_arm == i) & (gmv > 0)] if len(gmv) else np.zeros(0)
        if len(g):
            ax2.hist(g, bins=40, alpha=0.5, label=f"{name} (n={len(g)})")
    ax2.set_title("GMV per ordering viewer")
    ax2.set_xlabel("GMV")
    ax2.legend()
    _save_figure(fig, path)


def _plot_latency(s: dict[str, Any], a: Analysis, path: Path) -> None:
    arms = list(s["arms"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    lat = a.responses.get("latency_ms", np.zeros(0))
    arm_of = a.responses.get("arm", np.zeros(0, dtype=int))
    data = [lat[(arm_of == i) & ~np.isnan(lat)] for i in range(len(arms))]
    for name, d in zip(arms, data, strict=True):
        if len(d):
            x = np.sort(d)
            ax1.plot(
                x,
                np.arange(1, len(x) + 1) / len(x),
                label=f"{name} p50={np.percentile(d, 50):.0f} p99={np.percentile(d, 99):.0f}",
            )
    ax1.set_xlabel("end-to-end latency of answered replies (ms)")
    ax1.set_ylabel("share of replies ≤ x")
    ax1.set_title("latency CDF by arm")
    ax1.legend(fontsize=8)
    nonempty = [(n, d) for n, d in zip(arms, data, strict=True) if len(d)]
    if nonempty:
        ax2.boxplot([d for _, d in nonempty], tick_labels=[n for n, _ in nonempty], showfliers=False)
    ax2.set_ylabel("latency (ms)")
    ax2.set_title("latency by arm (box: quartiles, whiskers 1.5 IQR)")
    _save_figure(fig, path)


def write_report(analysis: Analysis, out_dir: str | Path) -> dict[str, Path]:
    """Write the report files into ``out_dir``; returns name → path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = analysis.summary
    files = {
        "metric_over_time.png": lambda p: _plot_over_time(s, p),
        "distributions.png": lambda p: _plot_distributions(s, analysis, p),
        "latency.png": lambda p: _plot_latency(s, analysis, p),
        "analysis.json": lambda p: p.write_text(json.dumps(s, indent=2)),
        "report.md": lambda p: p.write_text(render_markdown(s)),
        "report.html": lambda p: p.write_text(render_html(s)),
    }
    paths = {}
    for name, write in files.items():
        _atomic_write(out / name, write)
        paths[name] = out / name
    return paths
