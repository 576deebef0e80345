"""Power and false-positive rate: fixed-horizon z-test and mSPRT with peeking.

    .venv/bin/python benchmarks/ab_power.py              # a few minutes on 2 cores
    .venv/bin/python benchmarks/ab_power.py --quick      # fewer pipeline A/A runs

1. End to end: the offline simulator writes a 50/50 experiment in which arm B truly lifts order conversion by
   10% relative (``order_lift: 0.10``, everything else identical) into SQLite, at the sample size computed by
   ``sample_size_two_proportions`` (α = 0.05 two-sided, power 0.8); ``analyze`` must find it at p < 0.05.
2. Calibration with the same statistics functions on exact binomial data: 200 A/A experiments (false-positive
   rate of the fixed-horizon test, of naive peeking at 20 looks, of the mSPRT at 20 and 100 looks) and 200 A/B
   experiments (power), plus 2,000 A/A for a tighter estimate.
3. End to end A/A: ``--pipeline-aa`` small experiments (2,000 viewers each) through simulator → SQLite →
   ``analyze``, counting fixed-horizon and sequential (24 looks) false positives.
Writes ab_power.{json,md,png} to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from ab_common import machine, publish  # noqa: E402

from livethink.ab_test import stats  # noqa: E402
from livethink.ab_test.analysis import analyze  # noqa: E402
from livethink.ab_test.experiment import parse_experiment  # noqa: E402
from livethink.ab_test.simulate import ArmProfile, OutcomeModel, SimulationConfig, simulate_offline  # noqa: E402
from livethink.ab_test.store import EventStore  # noqa: E402
from livethink.eval.goodput import wilson_interval  # noqa: E402

ALPHA, POWER, LIFT = 0.05, 0.80, 0.10
MODEL = OutcomeModel(base_click=0.30, base_add_to_cart=0.40, base_order=0.50, pre_period_orders=0.0,
                     pre_period_clicks=0.0)  # fmt: skip
PROFILE = ArmProfile(latency_ms=600, p_correct=0.85, p_helpful=0.70)


def true_order_rate(
    model: OutcomeModel, profile: ArmProfile, draws: int = 4_000_000, seed: int = 99
) -> float:
    """E[P(order)] of the outcome model for one arm profile (Monte Carlo over viewers and replies)."""
    rng = np.random.default_rng(seed)
    latency = profile.latency_ms * np.exp(profile.latency_sigma * rng.standard_normal(draws))
    correct = rng.random(draws) < profile.p_correct
    helpful = rng.random(draws) < profile.p_helpful
    m = model.multiplier(correct, helpful, latency, np.ones(draws, dtype=bool))
    s = model.propensity_sigma
    u = np.exp(s * rng.standard_normal(draws) - s * s / 2)
    p_click = np.minimum(1.0, model.base_click * u * m)
    return float(p_click.mean() * model.base_add_to_cart * model.base_order)


def replicate(p_c: float, p_t: float, n: int, reps: int, looks: int, rng: np.random.Generator) -> dict:
    """Reject rates of fixed-horizon z, naive peeking with z, and mSPRT, over ``reps`` experiments."""
    edges = np.linspace(0, n, looks + 1).round().astype(int)
    fixed = peek = seq = 0
    final_p = []
    for _ in range(reps):
        xc = np.cumsum(rng.binomial(np.diff(edges), p_c))
        xt = np.cumsum(rng.binomial(np.diff(edges), p_t))
        state = stats.SequentialState()
        any_sig = False
        for k in range(looks):
            nk = int(edges[k + 1])
            r = stats.two_proportion_ztest(int(xc[k]), nk, int(xt[k]), nk, ALPHA)
            any_sig |= r.p_value < ALPHA
            v = r.mean_control * (1 - r.mean_control) / nk + r.mean_treatment * (1 - r.mean_treatment) / nk
            state = stats.msprt_update(state, r.diff, v, 2 * nk, n, ALPHA)
        fixed += r.p_value < ALPHA
        peek += any_sig
        seq += state.p_value < ALPHA
        final_p.append(r.p_value)
    return {"reps": reps, "looks": looks, "fixed": fixed / reps, "naive_peeking": peek / reps,
            "msprt": seq / reps, "fixed_p_values": final_p}  # fmt: skip


def pipeline_aa(runs: int, viewers: int, seed: int) -> dict:
    """A/A experiments through simulator -> SQLite -> analyze (order_rate, z and mSPRT over 24 looks)."""
    fixed = seq = srm = 0
    t0 = time.perf_counter()
    cfg = SimulationConfig(outcome_model=MODEL, default_arm=PROFILE)
    with tempfile.TemporaryDirectory() as tmp, EventStore(Path(tmp) / "aa.db") as store:
        for i in range(runs):
            exp = parse_experiment({"name": f"aa{i:04d}", "arms": [{"name": "A", "weight": 0.5},
                                    {"name": "B", "weight": 0.5}], "sequential": {"tuning": viewers // 2}})  # fmt: skip
            simulate_offline(exp, store, viewers=viewers, seed=seed + i, config=cfg, run_id=f"aa{i}")
            s = analyze(store, exp).summary
            c = next(c for c in s["comparisons"] if c["metric"] == "order_rate")
            fixed += c["p_value"] < ALPHA
            seq += c["sequential"]["p_value"] < ALPHA
            srm += s["srm"]["flagged"]
    return {"runs": runs, "viewers": viewers, "fixed": fixed / runs, "msprt": seq / runs, "srm_flags": srm,
            "seconds": time.perf_counter() - t0}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--pipeline-aa", type=int, default=200, help="A/A runs through the full pipeline")
    ap.add_argument("--quick", action="store_true", help="40 pipeline A/A runs")
    args = ap.parse_args()
    if args.quick:
        args.pipeline_aa = 40
    rng = np.random.default_rng(args.seed)

    p_c = true_order_rate(MODEL, PROFILE)
    n = stats.sample_size_two_proportions(p_c, LIFT, ALPHA, POWER)
    print(f"true control order rate {p_c:.5f}; n per arm for +{LIFT:.0%} at α={ALPHA}, power {POWER}: {n}")

    # 1. end to end at the computed sample size
    exp = parse_experiment({"name": "power_ab", "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}],
                            "sequential": {"tuning": n}})  # fmt: skip
    cfg = SimulationConfig(outcome_model=MODEL, default_arm=PROFILE,
                           arms={"B": PROFILE.model_copy(update={"order_lift": LIFT})})  # fmt: skip
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, EventStore(Path(tmp) / "power.db") as store:
        sim = simulate_offline(exp, store, viewers=2 * n, seed=args.seed, config=cfg, run_id="power")
        t_sim = time.perf_counter() - t0
        s = analyze(store, exp).summary
    t_all = time.perf_counter() - t0
    c = next(c for c in s["comparisons"] if c["metric"] == "order_rate")
    e2e = {
        "viewers": sim["in_experiment"], "arms": sim["arms"], "events": sim["events_stored"],
        "order_rate": {a: s["arms"][a]["order_rate"] for a in ("A", "B")}, "lift": c["lift"],
        "lift_ci": c["lift_ci"], "p_value": c["p_value"], "always_valid_p": c["sequential"]["p_value"],
        "detected_fixed": c["p_value"] < ALPHA, "detected_sequential": c["sequential"]["p_value"] < ALPHA,
        "srm_p": s["srm"]["p_value"], "verdict": s["verdict"]["line"], "simulate_s": t_sim, "total_s": t_all,
        "guardrails_breached": [g for g in s["guardrails"] if g["status"] == "breached"],
    }  # fmt: skip
    print("end to end:", {k: v for k, v in e2e.items() if k != "verdict"})

    # 2. calibration on exact binomial data
    aa = replicate(p_c, p_c, n, 200, 20, rng)
    aa100 = replicate(p_c, p_c, n, 200, 100, rng)
    aa2000 = replicate(p_c, p_c, n, 2000, 20, rng)
    ab = replicate(p_c, p_c * (1 + LIFT), n, 200, 20, rng)
    print("A/A 200x20:", {k: v for k, v in aa.items() if k != "fixed_p_values"})
    print("A/A 200x100:", {k: v for k, v in aa100.items() if k != "fixed_p_values"})
    print("A/A 2000x20:", {k: v for k, v in aa2000.items() if k != "fixed_p_values"})
    print("A/B 200x20:", {k: v for k, v in ab.items() if k != "fixed_p_values"})

    # 3. A/A through the pipeline
    pipe = pipeline_aa(args.pipeline_aa, 2000, args.seed * 1000) if args.pipeline_aa else None
    print("pipeline A/A:", pipe)

    def rate(x: float, reps: int) -> str:
        lo, hi = wilson_interval(round(x * reps), reps)
        return f"{x * 100:.1f}% [{lo * 100:.1f}, {hi * 100:.1f}]"

    strip = lambda d: {k: v for k, v in d.items() if k != "fixed_p_values"}  # noqa: E731
    data = {
        "alpha": ALPHA, "power_target": POWER, "relative_lift": LIFT, "true_control_rate": p_c,
        "n_per_arm": n, "end_to_end": e2e, "aa_200_looks20": strip(aa), "aa_200_looks100": strip(aa100),
        "aa_2000_looks20": strip(aa2000), "ab_200_looks20": strip(ab), "pipeline_aa": pipe,
        "pass": {
            "detected_at_computed_n": e2e["detected_fixed"],
            "aa_fixed_fpr_about_5pct": wilson_interval(round(aa["fixed"] * 200), 200)[0] <= 0.05 <= wilson_interval(round(aa["fixed"] * 200), 200)[1],
            "aa_sequential_fpr_at_most_5pct": aa["msprt"] <= 0.05 and aa100["msprt"] <= 0.05,
        },
        "machine": machine(),
    }  # fmt: skip
    breached = ", ".join(f"{g['metric']} p = {g['p_value']:.2g}" for g in e2e["guardrails_breached"])
    cmd = (
        "`.venv/bin/python benchmarks/ab_power.py"
        + (f" --pipeline-aa {args.pipeline_aa}" if args.pipeline_aa != 200 else "")
        + f" --seed {args.seed}`"
    )
    md = [
        "# A/B power and false-positive rate",
        "",
        cmd,
        "",
        f"Outcome model: funnel click → cart → order with viewer heterogeneity; both arms serve identical replies "
        f"(latency {PROFILE.latency_ms:.0f} ms median, {PROFILE.p_correct:.0%} correct, {PROFILE.p_helpful:.0%} helpful); arm B "
        f"multiplies P(order | cart) by {1 + LIFT:.2f}. True control conversion {p_c * 100:.3f}% (Monte Carlo, 4M draws). "
        f"Sample size for a {LIFT:.0%} relative lift, two-sided α = {ALPHA}, power {POWER}: **{n:,} viewers per arm**.",
        "",
        "## 1. End to end at the computed sample size (simulator → SQLite → analyze)",
        "",
        "| arm | viewers | order rate |",
        "|---|---:|---:|",
        *[f"| {a} | {sim['arms'][a]:,} | {e2e['order_rate'][a] * 100:.3f}% |" for a in ("A", "B")],
        "",
        f"Observed lift {e2e['lift'] * 100:+.2f}% (95% CI [{e2e['lift_ci'][0] * 100:+.2f}%, {e2e['lift_ci'][1] * 100:+.2f}%]), "
        f"**fixed-horizon p = {e2e['p_value']:.2g} → {'detected' if e2e['detected_fixed'] else 'NOT detected'} at p < 0.05**; "
        f"always-valid p (mSPRT, 24 looks) = {e2e['always_valid_p']:.2g}; SRM p = {e2e['srm_p']:.2f}. "
        f"{e2e['events']:,} events, simulate + analyze {e2e['total_s']:.0f} s. Verdict line: “{e2e['verdict']}”.",
        *(
            [
                "",
                "The arms serve identical replies, so any guardrail flag here is a false alarm: guardrails are "
                f"screened per metric at α = {ALPHA} without multiplicity correction ({breached}).",
            ]
            if breached
            else []
        ),
        "",
        "## 2. Calibration (same statistics functions, exact binomial data at n per arm)",
        "",
        "| experiments | looks | fixed-horizon z (final look) | naive z, reject at any look | mSPRT always-valid p < 0.05 |",
        "|---|---:|---:|---:|---:|",
        f"| 200 A/A | 20 | {rate(aa['fixed'], 200)} | {rate(aa['naive_peeking'], 200)} | {rate(aa['msprt'], 200)} |",
        f"| 200 A/A | 100 | {rate(aa100['fixed'], 200)} | {rate(aa100['naive_peeking'], 200)} | {rate(aa100['msprt'], 200)} |",
        f"| 2,000 A/A | 20 | {rate(aa2000['fixed'], 2000)} | {rate(aa2000['naive_peeking'], 2000)} | {rate(aa2000['msprt'], 2000)} |",
        f"| 200 A/B (+10%) = power | 20 | {rate(ab['fixed'], 200)} | {rate(ab['naive_peeking'], 200)} | {rate(ab['msprt'], 200)} |",
        "",
        "Rates with 95% Wilson intervals. The fixed-horizon test holds α only when looked at once; rejecting at any "
        "of 20 looks (naive peeking) inflates the false-positive rate several-fold; the mSPRT's always-valid p-value "
        "stays below α however often one peeks (it is conservative with discrete looks), and pays for it with "
        "less power at the fixed-horizon sample size.",
    ]
    if pipe:
        md += [
            "",
            "## 3. A/A through the full pipeline",
            "",
            f"{pipe['runs']} A/A experiments × {pipe['viewers']:,} viewers (simulator → SQLite → analyze, order_rate): "
            f"fixed-horizon false positives {rate(pipe['fixed'], pipe['runs'])}, mSPRT with 24 looks "
            f"{rate(pipe['msprt'], pipe['runs'])}, SRM flags {pipe['srm_flags']} ({pipe['seconds']:.0f} s).",
        ]
    md += ["", f"**Pass: detected at computed n: {data['pass']['detected_at_computed_n']}; A/A fixed-horizon FPR "
           f"consistent with 5%: {data['pass']['aa_fixed_fpr_about_5pct']}; sequential FPR ≤ 5% with peeking: "
           f"{data['pass']['aa_sequential_fpr_at_most_5pct']}.**", "", "![power](ab_power.png)", ""]  # fmt: skip

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    ax1.hist(aa2000["fixed_p_values"], bins=20, range=(0, 1), edgecolor="white")
    ax1.axhline(2000 / 20, color="red", lw=1, label="uniform")
    ax1.set_title("A/A fixed-horizon p-values (2,000 experiments)")
    ax1.set_xlabel("p")
    ax1.legend()
    labels = ["fixed\n(1 look)", "naive\n20 looks", "mSPRT\n20 looks", "mSPRT\n100 looks"]
    vals = [aa2000["fixed"], aa2000["naive_peeking"], aa2000["msprt"], aa100["msprt"]]
    ax2.bar(labels, [v * 100 for v in vals], label="A/A false-positive rate")
    ax2.bar([x + "\n" for x in labels[:3]], [ab["fixed"] * 100, ab["naive_peeking"] * 100, ab["msprt"] * 100],
            label="A/B power (+10%)")  # fmt: skip
    ax2.axhline(5, color="red", ls="--", label="α = 5%")
    ax2.set_ylabel("% of experiments rejecting H0")
    ax2.set_title(f"n = {n:,} per arm")
    ax2.legend(fontsize=8)
    publish("ab_power", data, "\n".join(md), fig)


if __name__ == "__main__":
    main()
