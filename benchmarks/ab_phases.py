"""Phases: a 90/10 canary ramped to 50/50 is not a sample-ratio mismatch; a 5% assignment bug is.

    .venv/bin/python benchmarks/ab_phases.py                     # 200 simulations x 20,000 viewers
    .venv/bin/python benchmarks/ab_phases.py --sims 50 --viewers 5000

Each simulation is one experiment (its own hashing seed) with 20,000 viewers whose first visit is uniform over the
test; the weights change from 90/10 to 50/50 half-way (a new registered version: a new phase). Viewers are hashed
with livethink's GrowthBook-compatible assignment (v2) under the weights of the phase of their first exposure, and
SRM is tested per phase against that phase's weights (``livethink.ab_test.phases``), flagging at p < 0.01.

- no true effect, no bug: the target is SRM p ≥ 0.01 in every phase in ≥ 95% of simulations; the pre-phase
  analysis (every viewer against the latest weights, 50/50) is shown beside it;
- a 5% assignment bug: 5% of the viewers hashed to the treatment are served (and logged as) the control, in both
  phases (a redirect that drops the treatment); the target is the experiment flagged in ≥ 99% of simulations.

Writes ab_phases.{json,md,png} to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from ab_common import machine, publish  # noqa: E402

from livethink.ab_test.assignment import bucket_ranges, choose_variation, gb_hash  # noqa: E402
from livethink.ab_test.phases import Phase, combined_srm, srm_by_phase  # noqa: E402
from livethink.ab_test.stats import srm_test  # noqa: E402

THRESHOLD = 0.01
W0, W1 = (0.9, 0.1), (0.5, 0.5)
BUG = 0.05


def one(sim: int, viewers: int, rng: np.random.Generator) -> dict:
    """One experiment: per-phase SRM without and with the bug, and the pooled test against the latest weights."""
    seed = f"ramp-{sim}"
    buckets = np.array([gb_hash(seed, f"v{i:06d}", 2) for i in range(viewers)])
    first = rng.random(viewers)  # first visit in [0, 1); the ramp at 0.5
    phases = [Phase(0, -np.inf, 0.5, W0, 1.0), Phase(1, 0.5, np.inf, W1, 1.0)]
    ranges = [bucket_ranges(2, 1.0, list(W0)), bucket_ranges(2, 1.0, list(W1))]
    arm = np.array([choose_variation(b, ranges[int(t >= 0.5)]) for b, t in zip(buckets, first, strict=True)])
    bugged = np.where((arm == 1) & (rng.random(viewers) < BUG), 0, arm)
    clean = srm_by_phase(phases, arm, first, 2, THRESHOLD)
    bug = srm_by_phase(phases, bugged, first, 2, THRESHOLD)
    pooled_latest = srm_test(np.bincount(arm, minlength=2).tolist(), list(W1), THRESHOLD)
    return {
        "phase_p": [p["srm"]["p_value"] for p in clean],
        "all_phases_quiet": all(p["srm"]["p_value"] >= THRESHOLD for p in clean),
        "bug_phase_p": [p["srm"]["p_value"] for p in bug],
        "bug_flagged": combined_srm(bug, THRESHOLD)["flagged"],
        "pooled_latest_p": pooled_latest.p_value,
        "viewers_per_phase": [p["viewers"] for p in clean],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--viewers", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    runs = [one(s, args.viewers, rng) for s in range(args.sims)]
    quiet = float(np.mean([r["all_phases_quiet"] for r in runs]))
    flagged = float(np.mean([r["bug_flagged"] for r in runs]))
    naive = float(np.mean([r["pooled_latest_p"] < THRESHOLD for r in runs]))
    per_phase_fp = [float(np.mean([r["phase_p"][k] < THRESHOLD for r in runs])) for k in range(2)]
    per_phase_bug = [float(np.mean([r["bug_phase_p"][k] < THRESHOLD for r in runs])) for k in range(2)]
    data = {
        "sims": args.sims, "viewers": args.viewers, "threshold": THRESHOLD, "weights": [W0, W1], "bug_share": BUG,
        "null_all_phases_quiet": quiet, "null_flag_rate_per_phase": per_phase_fp,
        "bug_flagged": flagged, "bug_flag_rate_per_phase": per_phase_bug,
        "pooled_vs_latest_weights_false_alarm": naive,
        "targets": {"null_all_phases_quiet": ">= 0.95", "bug_flagged": ">= 0.99"},
        "met": {"null": quiet >= 0.95, "bug": flagged >= 0.99},
        "seconds": round(time.perf_counter() - t0, 1), "machine": machine(),
    }  # fmt: skip
    md = "\n".join([
        "# A/B phases: SRM per phase on a 90/10 → 50/50 ramp", "",
        f"{args.sims} simulated experiments × {args.viewers:,} viewers (GrowthBook v2 hashing, own seed each), "
        f"weights 90/10 then 50/50 from half-way; SRM per phase against that phase's weights, flag at p < "
        f"{THRESHOLD}. Command: `.venv/bin/python benchmarks/ab_phases.py`.", "",
        "| check | result | target |", "|---|---|---|",
        f"| no bug: SRM p ≥ 0.01 in every phase | {quiet:.1%} of simulations (per phase flagged: "
        f"{per_phase_fp[0]:.1%}, {per_phase_fp[1]:.1%}) | ≥ 95% |",
        f"| 5% assignment bug (treatment → control) flagged | {flagged:.1%} (per phase: {per_phase_bug[0]:.1%}, "
        f"{per_phase_bug[1]:.1%}) | ≥ 99% |",
        f"| before phases: every viewer vs the latest weights (50/50) | false alarm in {naive:.1%} | — |", "",
        f"{data['seconds']} s on {data['machine']['cpus']} CPUs (load {data['machine']['load_average_1m_at_end']}).",
        "",
    ])  # fmt: skip
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for k, ax in enumerate(axes):
        ax.hist([r["phase_p"][k] for r in runs], bins=20, range=(0, 1), alpha=0.7, label="no bug")
        ax.hist([r["bug_phase_p"][k] for r in runs], bins=20, range=(0, 1), alpha=0.7, label="5% bug")
        ax.axvline(THRESHOLD, color="k", lw=1)
        ax.set_title(f"phase {k} ({'90/10' if k == 0 else '50/50'}): SRM p-values")
        ax.set_xlabel("p")
        ax.legend()
    publish("ab_phases", data, md, fig)


if __name__ == "__main__":
    main()
