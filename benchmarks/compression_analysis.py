"""The compression benchmark's analysis (pure): deltas against the RFT student, the summary over seeds, the stage-2
target verdicts, the comparisons at equal tokens and the merge of an ``--add`` invocation with the published runs."""

from __future__ import annotations

from typing import Any

from compression_runs import BASELINES, LIVETHINK, split_method

from livethink.eval.compare import interpolate_at
from livethink.eval.intervals import paired_bootstrap, pooled_rate, rate_difference, seed_range


def curve_columns(result: dict[str, Any], cap: int = 64) -> dict[str, Any]:
    """A model's correctness at thinking ``cap`` and its floor (the smallest cap keeping 90% of its uncapped
    correctness), from its harness result's thinking curve (None where it has none)."""
    curve = result.get("thinking_curve") or {}
    caps = list(curve.get("caps") or [])
    return {"correct_at_64": curve["correct"][caps.index(cap)] if cap in caps else None,
            "floor": curve.get("min_thinking_tokens"), "cap_curve": dict(zip(map(str, caps), curve.get("correct", []),
                                                                              strict=True)) if caps else None}


def overall(result: dict[str, Any]) -> tuple[float, float, float]:
    o = result["overall"]
    return o["total_tokens"], o["correctness"], o["helpfulness"]


def compare(rows: list[dict[str, Any]], rft: dict[str, Any]) -> None:
    """Adds token reduction and quality deltas vs the RFT student, and whether the stage-2 target is met."""
    t0, c0, h0 = rft["tokens"], rft["correctness"], rft["helpfulness"]
    for r in rows:
        r["token_reduction"] = round(1 - r["tokens"] / t0, 4) if t0 else None
        r["d_correctness_pts"] = round(100 * (r["correctness"] - c0), 1)
        r["d_helpfulness_pts"] = round(100 * (r["helpfulness"] - h0), 1)
        r["meets_target"] = bool(r["token_reduction"] is not None and r["token_reduction"] >= 0.6
                                 and r["correctness"] >= c0 - 0.02 and r["helpfulness"] >= h0)


def paired_deltas(rft_samples: list[dict[str, Any]], samples: list[dict[str, Any]]) -> dict[str, list[float]]:
    """95% paired bootstrap intervals (points) of ΔC and ΔH against the RFT student, over the tasks both were
    scored on: the same test tasks, so task difficulty cancels out of the difference."""
    base = {s["task_id"]: s for s in rft_samples}
    pairs = [(base[s["task_id"]], s) for s in samples if s["task_id"] in base]
    out = {}
    for metric, key in (("correct", "d_correctness_ci_pts"), ("helpful", "d_helpfulness_ci_pts")):
        d = paired_bootstrap([float(a[metric]) for _, a in pairs], [float(b[metric]) for b, _ in pairs])
        out[key] = [round(100 * d.low, 1), round(100 * d.high, 1)]
    return out



def versus_baselines(rows: list[dict[str, Any]], rft: dict[str, Any], challengers: tuple[str, ...] = ("siri", "dot", "drpo"),
                     baselines: tuple[str, ...] = BASELINES) -> dict[str, dict[str, str]]:
    """Each challenger's final point against each baseline at equal tokens: a baseline's curve runs from the RFT
    student through its midpoint to its final point (means over seeds)."""
    out: dict[str, dict[str, str]] = {}
    for baseline in baselines:
        curve = [rft, *(r for r in rows if r["variant"] == baseline)]
        if len(curve) < 2:
            continue
        for r in rows:
            if r["variant"] in challengers and r["kind"] == "variant":
                out.setdefault(r["name"], {})[baseline] = versus(r, interpolate_at(r["tokens"], curve, baseline))
    return out


def versus(a: dict[str, Any], b: dict[str, Any]) -> str:
    """How variant ``a`` compares with ``b`` (a baseline's point at equal tokens) on the means over seeds: no claim
    that one beats the other (that needs a paired interval, and ``b`` is interpolated, evaluated on no task)."""
    fewer = a["tokens"] <= b["tokens"]
    c_ok, h_ok = a["correctness"] >= b["correctness"], a["helpfulness"] >= b["helpfulness"]
    if fewer and c_ok and h_ok:
        return (f"at or above {b['name']} on the means (no more tokens, no less correctness and helpfulness; "
                "not a tested difference)")
    if a["tokens"] >= b["tokens"] and not c_ok and not h_ok:
        return (f"below {b['name']} on the means (more tokens, less correctness and helpfulness; "
                "not a tested difference)")
    return (f"trade-off with {b['name']}: tokens {a['tokens']:.0f} vs {b['tokens']:.0f}, correctness "
            f"{100 * a['correctness']:.1f}% vs {100 * b['correctness']:.1f}%, helpfulness {100 * a['helpfulness']:.1f}% vs "
            f"{100 * b['helpfulness']:.1f}%")


SUMMARY_KEYS = {"tokens": 1, "correctness": 4, "helpfulness": 4, "truncated_rate": 4, "token_reduction": 4,
                "d_correctness_pts": 2, "d_helpfulness_pts": 2, "correct_at_64": 4, "floor": 1}  # key -> decimals
SHARES = ("correctness", "helpfulness", "truncated_rate", "correct_at_64")  # shares of the evaluation's tasks
DELTAS = {"d_correctness_pts": "correctness", "d_helpfulness_pts": "helpfulness"}  # points against the RFT student


def summary_interval(key: str, rs: list[dict[str, Any]], rft: dict[str, Any], n_tasks: int) -> list[float] | None:
    """The interval of ``key``'s mean over the seeds ``rs`` (``livethink.eval.intervals``): a share of tasks, the
    Clopper–Pearson interval pooled over tasks × seeds; ΔC / ΔH, Newcombe's unpaired interval against the RFT
    student (the results hold no per-task verdicts to pair over seeds); anything else, its range over seeds (none
    for one seed)."""
    if key in SHARES:
        ci = pooled_rate([r[key] for r in rs], n_tasks)
    elif key in DELTAS:
        rate = DELTAS[key]
        ci = rate_difference([r[rate] for r in rs], n_tasks, [rft[rate]], n_tasks)
        return [round(100 * ci.low, 2), round(100 * ci.high, 2)]
    elif len(rs) > 1:
        ci = seed_range([r[key] for r in rs])
    else:
        return None
    return [round(ci.low, SUMMARY_KEYS[key]), round(ci.high, SUMMARY_KEYS[key])]


def aggregate(per_seed: list[dict[str, Any]], rft: dict[str, Any], n_tasks: int) -> list[dict[str, Any]]:
    """One row per method (``name``, in order of first appearance): each ``SUMMARY_KEYS`` value's mean over the
    seeds, its interval in ``ci`` (``summary_interval``), and on how many seeds the stage-2 target was met."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in per_seed:
        groups.setdefault(r["name"], []).append(r)
    out = []
    for name, rs in groups.items():
        row: dict[str, Any] = {"name": name, "kind": rs[0]["kind"], "variant": rs[0]["variant"],
                               "seeds": [r["seed"] for r in rs], "ci": {}}
        for key, digits in SUMMARY_KEYS.items():
            if any(r.get(key) is None for r in rs):
                continue
            row[key] = round(sum(r[key] for r in rs) / len(rs), digits)
            row["ci"][key] = summary_interval(key, rs, rft, n_tasks)
        row["meets_target_seeds"] = sum(bool(r.get("meets_target")) for r in rs)
        out.append(row)
    return out


def pick_best_livethink(summary: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The livethink variant (final checkpoint) meeting the target on the most seeds, then the most compressed."""
    pool = [r for r in summary if split_method(r["variant"])[0] in LIVETHINK and r["kind"] == "variant"]
    return max(pool, key=lambda r: (r["meets_target_seeds"], r["token_reduction"])) if pool else None


def target_verdicts(per_seed: list[dict[str, Any]], name: str, rft: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per seed, the stage-2 target for the method ``name``: ≥ 60% fewer tokens than the RFT student, correctness
    ≥ RFT − 2 points, helpfulness ≥ RFT."""
    out = {}
    for r in per_seed:
        if r["name"] != name:
            continue
        checks = {"shorter_60": r["token_reduction"] is not None and r["token_reduction"] >= 0.6,
                  "correctness_kept": r["correctness"] >= rft["correctness"] - 0.02,
                  "helpfulness_kept": r["helpfulness"] >= rft["helpfulness"]}
        out[str(r["seed"])] = {"token_reduction": r["token_reduction"], "d_correctness_pts": r["d_correctness_pts"],
                               "d_helpfulness_pts": r["d_helpfulness_pts"], **checks, "met": all(checks.values())}
    return out


def analyse(per_seed: list[dict[str, Any]], rft: dict[str, Any], n_tasks: int) -> dict[str, Any]:
    """Deltas per seed, the summary over seeds (each seed evaluated on the same ``n_tasks`` tasks), the best
    livethink variant with its verdict per seed, and SIRI, DOT and DRPO against every baseline at equal tokens."""
    for seed in sorted({r["seed"] for r in per_seed}):
        compare([r for r in per_seed if r["seed"] == seed], rft)
    summary = aggregate(per_seed, rft, n_tasks)
    best = pick_best_livethink(summary)
    return {"rows": [rft, *summary], "best": best,
            "best_verdicts": target_verdicts(per_seed, best["name"], rft) if best else {},
            "vs_baselines": versus_baselines(summary, rft)}

# Settings two invocations must share for their runs to sit in one table, and the RFT figures that must agree
# exactly (the same student, evaluated on the same tasks) for their deltas to share one reference.
SAME_BUDGET = ("steps", "prompts_per_step", "generations", "max_completion_length", "lr", "rollouts", "eval_tasks",
               "eval_max_tokens", "calculator")
RFT_FIGURES = ("tokens", "correctness", "helpfulness", "truncated_rate")


def merge_runs(published: dict[str, Any], per_seed: list[dict[str, Any]], rft: dict[str, Any],
               meta: dict[str, Any]) -> list[dict[str, Any]]:
    """``published``'s per-seed rows beside this invocation's (a run, i.e. variant and seed, run again replaces the
    published one). Raises ValueError naming every difference when the two did not measure the same RFT student
    under the same budget: their rows would not be comparable."""
    old_meta, old_rft = published.get("meta", {}), (published.get("rows") or [{}])[0]
    diffs = [f"{k}: {old_meta.get(k)!r} there, {meta[k]!r} here" for k in SAME_BUDGET if old_meta.get(k) != meta[k]]
    diffs += [f"RFT student's {k}: {old_rft.get(k)!r} there, {rft[k]!r} here"
              for k in RFT_FIGURES if old_rft.get(k) != rft[k]]
    if diffs:
        raise ValueError("; ".join(diffs))
    rerun = {(r["variant"], r["seed"]) for r in per_seed}
    return [r for r in published.get("per_seed", []) if (r["variant"], r["seed"]) not in rerun] + per_seed
