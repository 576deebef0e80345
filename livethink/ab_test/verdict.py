"""The verdict of an analysis: guardrail checks and one line for people (winner, no difference yet, SRM)."""

from __future__ import annotations

from typing import Any

from livethink.ab_test.experiment import Experiment


def guardrails(exp: Experiment, comparisons: list[dict]) -> list[dict[str, Any]]:
    out = []
    for g in exp.guardrails:
        for c in comparisons:
            if c["metric"] != g:
                continue
            # the decision p: always-valid (mSPRT over the looks) when the experiment is sequential, so that a
            # guardrail watched on every refresh keeps its false-alarm rate
            p = c.get("decision_p_value", c["p_value"])
            worse = p < exp.alpha and ((c["diff"] > 0) != exp.higher_is_better(g))
            out.append(
                {
                    "metric": g,
                    "arm": c["arm"],
                    "control": c["control"],
                    "mean_control": c["mean_control"],
                    "mean_treatment": c["mean_treatment"],
                    "diff": c["diff"],
                    "lift": c["lift"],
                    "p_value": p,
                    "sequential": c.get("sequential") is not None,
                    "status": "breached" if worse else "ok",
                }
            )
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f}%"


def verdict(exp: Experiment, summary: dict[str, Any]) -> dict[str, Any]:
    """One line: winner / no difference yet / SRM — do not trust (or no data yet)."""
    arms = summary["arms"]
    if summary["data"]["viewers"] == 0:
        return {"kind": "no_data", "arm": None, "line": "no data yet: no exposures logged"}
    srm = summary["srm"]
    if srm["flagged"]:
        obs = ", ".join(f"{a}={o}" for a, o in zip(srm["arms"], srm["observed"], strict=True))
        return {
            "kind": "srm",
            "arm": None,
            "line": f"SRM — do not trust: viewers {obs} vs weights {[arms[a]['weight'] for a in srm['arms']]} "
            f"(chi-square p={srm['p_value']:.2g} < {srm['threshold']})",
        }
    smallest = min(a["analysed_viewers"] for a in arms.values())
    if smallest < exp.min_viewers_per_arm:
        return {
            "kind": "no_difference",
            "arm": None,
            "line": f"no difference yet: {smallest} viewers in the smallest arm (< {exp.min_viewers_per_arm})",
        }
    primary = [c for c in summary["comparisons"] if c["metric"] == exp.primary_metric]
    kind_p = "always-valid p" if exp.sequential.enabled else "p"
    good = [c for c in primary if c["significant"] and c["better"]]
    bad = [c for c in primary if c["significant"] and c["better"] is False]
    breached = {(g["arm"], g["metric"]) for g in summary["guardrails"] if g["status"] == "breached"}
    if good:
        c = max(good, key=lambda c: c["lift"] if c["lift"] is not None else c["diff"])
        lo, hi = (
            (c["lift_ci"] or (None, None))
            if not exp.sequential.enabled
            else (c["sequential"].get("lift_ci") or (None, None))
        )
        line = (
            f"winner: {c['arm']} ({_pct(c['lift'])} {exp.primary_metric} vs {c['control']}, "
            f"CI [{_pct(lo)}, {_pct(hi)}], {kind_p}={c['decision_p_value']:.2g})"
        )
        gb = sorted(m for a, m in breached if a == c["arm"])
        if gb:
            line += f" — but guardrail(s) breached: {', '.join(gb)}"
        return {"kind": "winner", "arm": c["arm"], "line": line, "guardrails_breached": gb}
    if bad and len(bad) == len(primary):
        worst = ", ".join(f"{c['arm']} {_pct(c['lift'])}" for c in bad)
        return {
            "kind": "winner",
            "arm": exp.control_arm,
            "line": f"winner: {exp.control_arm} (control); {exp.primary_metric} worse in {worst} ({kind_p} < {bad[0]['alpha_adjusted']:.3g})",
            "guardrails_breached": [],
        }
    ps = ", ".join(f"{c['arm']} {_pct(c['lift'])} ({kind_p}={c['decision_p_value']:.2g})" for c in primary)
    return {"kind": "no_difference", "arm": None, "line": f"no difference yet on {exp.primary_metric}: {ps}"}
