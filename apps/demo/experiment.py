"""The Experiment tab: the live A/B summary from the server's event store, with plots and the verdict line.

The tab asks ``GET /v1/ab/experiments/{name}?view=full``: the whole ``livethink.ab_test.analysis`` summary (a
server that only has the compact live summary answers with that, and the tab draws what it can). Statistics are
never recomputed here: the numbers, intervals and the verdict come from the server's analysis. The verdict line
is the live view (always-valid when the experiment is sequential); the tables and the over-time plot, drawn by
``livethink.ab_test.report``'s own functions, are shown under an "End-of-test report" heading that says when
their fixed-horizon intervals hold.
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from matplotlib.figure import Figure

from apps.demo.client import LivethinkClient, ServerError

log = logging.getLogger(__name__)
FUNNEL = ("click_rate", "add_to_cart_rate", "order_rate")


@dataclass(frozen=True)
class ArmView:
    name: str
    viewers: int
    primary: float | None
    primary_ci: tuple[float, float] | None
    gmv: float | None
    latency: dict[str, float | None]  # p50 / p95 / p99 (ms)
    funnel: dict[str, float | None]


@dataclass(frozen=True)
class LiftView:
    arm: str
    metric: str
    lift: float | None
    ci: tuple[float, float] | None
    always_valid_ci: tuple[float, float] | None
    p_value: float | None
    significant: bool


def is_full(s: dict[str, Any]) -> bool:
    return "comparisons" in s and "timeseries" in s


def _pair(x: Any) -> tuple[float, float] | None:
    if isinstance(x, list | tuple) and len(x) == 2 and all(isinstance(v, int | float) for v in x):
        return float(x[0]), float(x[1])
    return None


def arm_views(s: dict[str, Any]) -> list[ArmView]:
    primary = s["primary_metric"]
    out = []
    for name, a in (s.get("arms") or {}).items():
        if is_full(s):
            ser = s["timeseries"]["arms"].get(name) or {}
            ci = _pair([(ser.get("ci_low") or [None])[-1], (ser.get("ci_high") or [None])[-1]])
            lat = a.get("latency_ms") or {}
            latency = {k: lat.get(k) for k in ("p50", "p95", "p99")}
            funnel = {m: a.get(m) for m in FUNNEL}
        else:
            ci, funnel = None, {}
            latency = {"p50": a.get("latency_p50_ms"), "p99": a.get("latency_p99_ms")}
        out.append(
            ArmView(
                name, int(a.get("viewers") or 0), a.get(primary), ci, a.get("gmv_per_viewer"), latency, funnel
            )
        )
    return out


def lift_views(s: dict[str, Any]) -> list[LiftView]:
    if is_full(s):
        metrics = (s["primary_metric"], "gmv_per_viewer")
        rows = [c for c in s["comparisons"] if c["metric"] in metrics]
        return [LiftView(c["arm"], c["metric"], c.get("lift"), _pair(c.get("lift_ci")),
                         _pair((c.get("sequential") or {}).get("lift_ci")), c.get("decision_p_value"),
                         bool(c.get("significant"))) for c in rows]  # fmt: skip
    return [LiftView(t["arm"], s["primary_metric"], t.get("lift"), _pair(t.get("lift_ci")), None,
                     t.get("decision_p_value"), bool(t.get("significant"))) for t in s.get("tests") or []]  # fmt: skip


def summary_figure(s: dict[str, Any]) -> Figure:
    """Conversion, GMV per viewer, latency by arm and the lift intervals, in one 2×2 figure."""
    arms, lifts, primary = arm_views(s), lift_views(s), s["primary_metric"]
    names = [a.name for a in arms]
    colors = [f"C{i}" for i in range(len(arms))]
    fig = Figure(figsize=(11, 6.6), dpi=90)
    (ax1, ax2), (ax3, ax4) = fig.subplots(2, 2)
    # conversion: the funnel when the full summary has it, the primary metric (with its 95% CI) always
    metrics = [m for m in FUNNEL if any(a.funnel.get(m) is not None for a in arms)] or [primary]
    width = 0.8 / max(1, len(arms))
    for i, a in enumerate(arms):
        vals = [100 * ((a.funnel.get(m) if a.funnel else a.primary) or 0) for m in metrics]
        xs = [j + i * width for j in range(len(metrics))]
        ax1.bar(xs, vals, width, color=colors[i], label=f"{a.name} (n={a.viewers:,})")
        if a.primary_ci is not None and a.primary is not None and primary in metrics:
            lo, hi = a.primary_ci
            err = [[100 * (a.primary - lo)], [100 * (hi - a.primary)]]
            ax1.errorbar(
                [xs[metrics.index(primary)]],
                [100 * a.primary],
                yerr=err,
                fmt="none",
                ecolor="black",
                capsize=3,
            )
    ax1.set_xticks([j + width * (len(arms) - 1) / 2 for j in range(len(metrics))], metrics)
    ax1.set_ylabel("% of viewers")
    ax1.set_title(
        f"conversion by arm ({primary}: 95% CI)" if any(a.primary_ci for a in arms) else "conversion by arm"
    )
    ax1.legend(fontsize=8)
    ax2.bar(names, [a.gmv or 0 for a in arms], color=colors)
    for i, a in enumerate(arms):
        if a.gmv is not None:
            ax2.annotate(f"{a.gmv:.2f}", (i, a.gmv), ha="center", va="bottom", fontsize=9)
    ax2.set_title("GMV per viewer")
    qs = [q for q in ("p50", "p95", "p99") if any(a.latency.get(q) is not None for a in arms)]
    width_q = 0.8 / max(1, len(qs))
    for k, q in enumerate(qs):
        ax3.bar([i + k * width_q for i in range(len(arms))], [a.latency.get(q) or 0 for a in arms], width_q,
                label=q, alpha=0.55 + 0.45 * k / max(1, len(qs) - 1))  # fmt: skip
    ax3.set_xticks([i + width_q * (len(qs) - 1) / 2 for i in range(len(arms))], names)
    ax3.set_ylabel("end-to-end latency (ms)")
    ax3.set_title("latency by arm")
    if qs:
        ax3.legend(fontsize=8)
    labels = []
    for y, lv in enumerate(lifts):
        labels.append(f"{lv.arm}: {lv.metric}")
        if lv.lift is None:
            continue
        if lv.ci is not None:
            ax4.errorbar([100 * lv.lift], [y], xerr=[[100 * (lv.lift - lv.ci[0])], [100 * (lv.ci[1] - lv.lift)]],
                         fmt="o", color="C3" if lv.significant else "C0", capsize=4,
                         label="95% CI" if y == 0 else None)  # fmt: skip
        if lv.always_valid_ci is not None:
            ax4.plot([100 * lv.always_valid_ci[0], 100 * lv.always_valid_ci[1]], [y + 0.15, y + 0.15], "--",
                     color="grey", label="always-valid CI" if y == 0 else None)  # fmt: skip
    ax4.axvline(0, color="black", lw=0.8)
    ax4.set_yticks(range(len(labels)), labels)
    ax4.set_ylim(-0.7, max(0.7, len(labels) - 0.3))
    ax4.set_xlabel(f"relative lift vs {s.get('control')} (%)")
    ax4.set_title("intervals: lift vs control")
    if lifts:
        ax4.legend(fontsize=8)
    fig.tight_layout()
    return fig


def over_time_image(s: dict[str, Any]) -> Any:
    """The primary metric and its lift over time (``livethink.ab_test.report``'s plot), full summary only."""
    if not is_full(s) or not s["timeseries"].get("checkpoints"):
        return None
    from PIL import Image

    from livethink.ab_test import report

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "over_time.png"
        try:
            report._plot_over_time(s, path)
        except Exception:  # a plot must never break the tab
            log.warning("over-time plot failed", exc_info=True)
            return None
        with Image.open(path) as im:
            return im.convert("RGB")


def _fmt(x: Any, spec: str = "") -> str:
    """``spec``: "%" (a rate), a format spec such as ",.2f", or "" (as is)."""
    if x is None:
        return "–"
    if spec == "%":
        return f"{100 * x:.2f}%"
    return format(x, spec) if spec and isinstance(x, int | float) else str(x)


def tables_markdown(s: dict[str, Any]) -> str:
    """Per-arm numbers, tests and guardrails (the report's own tables when the summary is full)."""
    if is_full(s):
        from livethink.ab_test import report

        t = report._tables(s)
        live = (s.get("regime") or {}).get("live", "fixed-horizon")
        note = "### End-of-test report\nThe tables below are the full analysis. Their fixed-horizon intervals and " \
               "p-values (`95% CI`, `p`) hold once the planned sample is reached, not for a test watched as it runs"
        note += (f"; the verdict above is the live view ({live}): decide from the always-valid columns until then."
                 if live != "fixed-horizon" else
                 ": this experiment is not sequential, so wait for its planned sample before deciding.")  # fmt: skip
        parts = [note, "#### Per arm", report._md_table(t["arms"]), "#### Tests (treatment vs control)",
                 report._md_table(t["comparisons"]), "#### Guardrails",
                 report._md_table(t["guardrails"]) if t["guardrails"][1] else "_none_"]  # fmt: skip
        return "\n\n".join(parts)
    primary = s["primary_metric"]
    head = (f"| arm | weight | viewers | {primary} | GMV/viewer | goodput | refused | fallback | "
            "answered latency p50 / p99 ms | errors |")
    rows = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in (s.get("arms") or {}).items():
        rows.append(f"| {name} | {_fmt(a.get('weight'))} | {_fmt(a.get('viewers'), ',')} | {_fmt(a.get(primary), '%')} | "
                    f"{_fmt(a.get('gmv_per_viewer'), ',.2f')} | {_fmt(a.get('goodput'), '%')} | "
                    f"{_fmt(a.get('refusal_rate'), '%')} | {_fmt(a.get('fallback_rate'), '%')} | "
                    f"{_fmt(a.get('latency_p50_ms'), ',.0f')} / {_fmt(a.get('latency_p99_ms'), ',.0f')} | "
                    f"{_fmt(a.get('error_rate'), '%')} |")  # fmt: skip
    tests = ["| arm vs control | lift | 95% CI | decision p | significant |", "|---|---|---|---|---|"]
    for lv in lift_views(s):
        ci = "–" if lv.ci is None else f"[{100 * lv.ci[0]:+.1f}%, {100 * lv.ci[1]:+.1f}%]"
        lift = "–" if lv.lift is None else f"{100 * lv.lift:+.1f}%"
        p = "–" if lv.p_value is None else f"{lv.p_value:.3g}"
        tests.append(
            f"| {lv.arm} vs {s.get('control')} | {lift} | {ci} | {p} | {'yes' if lv.significant else 'no'} |"
        )
    guard = ", ".join(f"{g['metric']} ({g['arm']})" for g in s.get("guardrails") or []) or "none"
    return "\n\n".join(["#### Per arm", "\n".join(rows), f"#### {primary}: treatment vs control", "\n".join(tests),
                        f"Breached guardrails: {guard}"])  # fmt: skip


def verdict_markdown(s: dict[str, Any]) -> str:
    line = (s.get("verdict") or {}).get("line") or "no verdict"
    srm = s.get("srm") or {}
    viewers = s.get("viewers", (s.get("data") or {}).get("viewers"))
    simulated = s.get("simulated", (s.get("data") or {}).get("simulated"))
    bits = [f"### Verdict: {line}",
            f"Experiment `{s.get('experiment')}` · {_fmt(viewers, ',')} viewers · primary metric `{s.get('primary_metric')}` · "
            f"control `{s.get('control')}` · SRM p = {_fmt(srm.get('p_value'), '.3g')}"
            + (" (**flagged**)" if srm.get("flagged") else "")]  # fmt: skip
    phase = s.get("phase") or {}
    if phase.get("count", 1) > 1:
        current = next((p for p in s.get("phases") or [] if p.get("index") == phase.get("current")), {})
        weights = ", ".join(f"{k} {v:g}" for k, v in (current.get("weights") or {}).items())
        bits.append(f"Phase {phase.get('current')} of {phase.get('count')} (weights {weights or '–'}, since "
                    f"{current.get('start') or '–'}): the SRM check and the tests use this phase's viewers only.")
    served = served_markdown(s)
    if served:
        bits.append(served)
    if simulated:
        bits.append("> Simulated traffic: these events come from the viewer simulator, not real viewers.")
    return "\n\n".join(bits)


def served_markdown(s: dict[str, Any]) -> str:
    """What each arm's viewers got, in words a product team reads: goodput (answered by the model, correct and in
    time, of requests sent) with its interval, the refused and fallback shares, and latency on answered replies
    only (a refusal is not a fast reply)."""
    lines = []
    for name, a in (s.get("arms") or {}).items():
        if a.get("goodput") is None and not a.get("requests", a.get("responses")):
            continue
        ci = _pair(a.get("goodput_ci"))
        p50 = a.get("latency_p50_ms", (a.get("latency_ms") or {}).get("p50"))
        lines.append(f"- **{name}**: goodput {_fmt(a.get('goodput'), '%')}"
                     + (f" [{100 * ci[0]:.1f}%, {100 * ci[1]:.1f}%]" if ci else "")
                     + f" of {_fmt(a.get('requests', a.get('responses')), ',')} requests; refused "
                     f"{_fmt(a.get('refusal_rate'), '%')}, fallback {_fmt(a.get('fallback_rate'), '%')}; latency p50 "
                     f"{_fmt(p50, ',.0f')} ms on answered replies")
    return "**What the viewers got**\n\n" + "\n".join(lines) if lines else ""


def goodput_markdown(report_path: str | Path | None) -> str:
    """Goodput per arm from the simulated viewer stream's report (``livethink ab simulate``'s JSON, saved by
    ``make demo``): correct, not the fallback, within the deadline by the client's clock, over requests sent."""
    if not report_path:
        return ""
    path = Path(report_path)
    if not path.is_file():
        return f"No simulated viewer stream yet ({path}): `make demo` writes it after its stream."
    try:
        arms = json.loads(path.read_text()).get("per_arm") or {}
    except (OSError, ValueError) as exc:
        return f"⚠ Could not read the viewer stream report {path}: {exc}"
    if not arms:
        return f"The viewer stream report {path} has no per-arm results."
    rows = ["| arm | sent | answered | fallback | refused (429) | correct in the deadline | **goodput** |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for arm, a in arms.items():
        rows.append(f"| {arm} | {a['sent']} | {a['answered']} | {a['fallback']} | {a['refused']} | {a['good']} | "
                    f"**{a['goodput']:.1%}** |")
    return ("#### Goodput per arm (simulated viewers)\nThe share of requests answered correctly, not with the fallback, "
            "within the deadline by the viewer's clock.\n\n" + "\n".join(rows) + f"\n\nFrom `{_shown(path)}`.")


def _shown(path: Path) -> str:
    """A path as the page shows it: relative to the working directory when it is inside it."""
    full = path.resolve()
    return str(full.relative_to(Path.cwd())) if full.is_relative_to(Path.cwd()) else str(path)


def load_experiment(client: LivethinkClient, name: str | None) -> tuple[str, Any, Any, str]:
    """(verdict Markdown, summary figure or None, over-time image or None, tables Markdown)."""
    name = (name or "").strip()
    if not name:
        return (
            "⚠ No experiment name: start the server with an experiment (`experiment:` in its config) or type one.",
            None,
            None,
            "",
        )
    try:
        s = client.experiment_summary(name)
        return verdict_markdown(s), summary_figure(s), over_time_image(s), tables_markdown(s)
    except ServerError as exc:
        return f"⚠ {exc.user_message()}", None, None, ""
    except Exception as exc:  # never a traceback in the UI
        log.exception("experiment summary failed")
        return f"⚠ Could not show experiment {name!r}: {type(exc).__name__}: {exc}", None, None, ""


def build_experiment_tab(client: LivethinkClient, experiment: str | None,
                         stream_report: str | Path | None = None) -> dict[str, Any]:
    """Lay out the tab (inside an open ``gr.Tab``); Refresh re-reads the live summary. ``stream_report``: the
    simulated viewer stream's JSON, shown as goodput per arm."""
    if stream_report:
        gr.Markdown(goodput_markdown(stream_report), elem_id="experiment-goodput")
    with gr.Row():
        name = gr.Textbox(experiment or "", label="Experiment", scale=3, elem_id="experiment-name")
        refresh = gr.Button("Refresh", variant="primary", scale=1, elem_id="experiment-refresh")
        auto = gr.Checkbox(False, label="Auto-refresh every 10 s", scale=1, elem_id="experiment-auto")
    verdict = gr.Markdown("Press **Refresh** to load the live A/B summary.", elem_id="experiment-verdict")
    plot = gr.Plot(
        label="Conversion, GMV per viewer, latency by arm, lift intervals", elem_id="experiment-plot"
    )
    over_time = gr.Image(label="Primary metric over time", type="pil", interactive=False, visible=False,
                         elem_id="experiment-over-time")  # fmt: skip
    tables = gr.Markdown(elem_id="experiment-tables")
    timer = gr.Timer(10, active=False)

    def load(n: str) -> tuple[Any, ...]:
        v, fig, img, t = load_experiment(client, n)
        return v, fig, gr.update(value=img, visible=img is not None), t

    outputs = [verdict, plot, over_time, tables]
    refresh.click(load, [name], outputs)
    name.submit(load, [name], outputs)
    timer.tick(load, [name], outputs)
    auto.change(lambda on: gr.Timer(active=on), [auto], [timer])
    return {"name": name, "load": load, "outputs": outputs}
