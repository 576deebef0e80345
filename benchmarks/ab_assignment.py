"""Assignment at scale: per-arm shares vs weights, SRM, bucket uniformity, and reassignment on weight changes.

    .venv/bin/python benchmarks/ab_assignment.py                 # 1,000,000 viewers (about a minute)
    .venv/bin/python benchmarks/ab_assignment.py --viewers 100000

Viewer ids are 16-hex-digit random strings (seeded). Targets: each arm's share within 0.3 pp of its
weight with the SRM check quiet; after 50/50 -> 60/40 the share of reassigned viewers equals the theoretical
minimum (total variation distance between the weight vectors) within 0.2 pp. Writes ab_assignment.{json,md,png}
to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from ab_common import machine, publish  # noqa: E402
from scipy import stats as sps  # noqa: E402

from livethink.ab_test.assignment import bucket_ranges, choose_variation, gb_hash  # noqa: E402
from livethink.ab_test.stats import srm_test  # noqa: E402

SPLITS = {"50/50": [0.5, 0.5], "90/10": [0.9, 0.1], "34/33/33": [0.34, 0.33, 0.33]}
CHANGES = [("50/50", "60/40", [0.5, 0.5], [0.6, 0.4]), ("90/10", "50/50", [0.9, 0.1], [0.5, 0.5]),
           ("34/33/33", "50/25/25", [0.34, 0.33, 0.33], [0.5, 0.25, 0.25])]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--viewers", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    ids = [f"{x:016x}" for x in rng.integers(0, 2**63, size=args.viewers, dtype=np.int64)]
    exp_seed = "drpo_vs_rft"

    t0 = time.perf_counter()
    buckets = np.fromiter((gb_hash(exp_seed, v, 2) for v in ids), dtype=float, count=len(ids))
    hash_s = time.perf_counter() - t0
    # uniformity of the 10,000 v2 buckets, in 100 bins
    hist = np.histogram(buckets, bins=100, range=(0, 1))[0]
    uniform_p = float(sps.chisquare(hist).pvalue)

    splits = {}
    for name, w in SPLITS.items():
        ranges = bucket_ranges(len(w), 1.0, w)
        t0 = time.perf_counter()
        arms = np.fromiter((choose_variation(b, ranges) for b in buckets), dtype=np.int64, count=len(buckets))
        choose_s = time.perf_counter() - t0
        counts = np.bincount(arms, minlength=len(w))
        shares = counts / counts.sum()
        srm = srm_test(counts, w)
        splits[name] = {
            "weights": w,
            "counts": counts.tolist(),
            "shares": shares.tolist(),
            "max_abs_diff_pp": float(np.max(np.abs(shares - np.array(w))) * 100),
            "srm_p": srm.p_value,
            "srm_flagged": srm.flagged,
            "assign_per_s": len(buckets) / (hash_s + choose_s),
        }

    changes = []
    for a_name, b_name, wa, wb in CHANGES:
        ra, rb = bucket_ranges(len(wa), 1.0, wa), bucket_ranges(len(wb), 1.0, wb)
        va = np.fromiter((choose_variation(b, ra) for b in buckets), dtype=np.int64, count=len(buckets))
        vb = np.fromiter((choose_variation(b, rb) for b in buckets), dtype=np.int64, count=len(buckets))
        moved = float(np.mean(va != vb))
        minimum = 0.5 * float(np.abs(np.array(wa) - np.array(wb)).sum())
        # what GrowthBook's contiguous ranges move by construction (exact, no sampling)
        edges = sorted({0.0, 1.0, *[x for r in ra + rb for x in r]})
        range_moved = sum(
            hi - lo
            for lo, hi in zip(edges, edges[1:], strict=False)
            if choose_variation(lo, ra) != choose_variation(lo, rb)
        )
        changes.append({
            "from": a_name, "to": b_name, "moved_share": moved, "theoretical_minimum": minimum,
            "moved_by_ranges_exact": range_moved, "diff_vs_minimum_pp": (moved - minimum) * 100,
        })  # fmt: skip

    data = {
        "viewers": args.viewers,
        "seed": args.seed,
        "hash": "GrowthBook v2 (FNV-1a 32), seed 'drpo_vs_rft'",
        "hash_seconds": hash_s,
        "bucket_uniformity_chi2_p_100_bins": uniform_p,
        "splits": splits,
        "weight_changes": changes,
        "targets": {"share_pp": 0.3, "reassignment_pp": 0.2},
        "pass": {
            "shares": all(s["max_abs_diff_pp"] <= 0.3 and not s["srm_flagged"] for s in splits.values()),
            "reassignment_50_50_to_60_40": abs(changes[0]["diff_vs_minimum_pp"]) <= 0.2,
        },
        "machine": machine(),
    }
    md = [
        "# A/B assignment at scale",
        "",
        f"`.venv/bin/python benchmarks/ab_assignment.py --viewers {args.viewers} --seed {args.seed}`",
        "",
        f"{args.viewers:,} random viewer ids, GrowthBook v2 hashing; hashing took {hash_s:.1f} s "
        f"({args.viewers / hash_s:,.0f} hashes/s, pure Python). Bucket uniformity (100 bins): chi-square p = {uniform_p:.3f}.",
        "",
        "| split | weights | shares | max abs diff (pp) | SRM p | SRM flag |",
        "|---|---|---|---:|---:|---|",
    ]
    for name, s in splits.items():
        md.append(
            f"| {name} | {', '.join(f'{w:.2f}' for w in s['weights'])} | {', '.join(f'{x:.4f}' for x in s['shares'])} "
            f"| {s['max_abs_diff_pp']:.3f} | {s['srm_p']:.3f} | {'SRM' if s['srm_flagged'] else 'quiet'} |"
        )
    md += ["", "| weight change | viewers reassigned | theoretical minimum | diff (pp) | GrowthBook ranges move (exact) |",
           "|---|---:|---:|---:|---:|"]  # fmt: skip
    for c in changes:
        md.append(
            f"| {c['from']} → {c['to']} | {c['moved_share'] * 100:.3f}% | {c['theoretical_minimum'] * 100:.3f}% "
            f"| {c['diff_vs_minimum_pp']:+.3f} | {c['moved_by_ranges_exact'] * 100:.3f}% |"
        )
    md += [
        "",
        "Theoretical minimum = total variation distance ½·Σ|w_i − w'_i|. With two arms GrowthBook's contiguous "
        "bucket ranges achieve it exactly; with three or more arms they can move more (last row), because each "
        "arm keeps a single contiguous range — the price of staying bucket-compatible with GrowthBook SDKs.",
        "",
        f"**Targets: shares within 0.3 pp and SRM quiet: {'PASS' if data['pass']['shares'] else 'FAIL'}; "
        f"50/50 → 60/40 reassignment within 0.2 pp of the minimum: "
        f"{'PASS' if data['pass']['reassignment_50_50_to_60_40'] else 'FAIL'}.**",
        "",
        "![assignment](ab_assignment.png)",
        "",
    ]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    ax1.bar(np.arange(100) / 100, hist, width=0.01, align="edge")
    ax1.axhline(args.viewers / 100, color="red", lw=1)
    ax1.set_title(f"bucket histogram (100 bins), chi-square p={uniform_p:.2f}")
    ax1.set_xlabel("bucket")
    names = list(splits)
    diffs = [splits[n]["max_abs_diff_pp"] for n in names]
    ax2.bar(names, diffs, label="max |share − weight| (pp)")
    ax2.axhline(0.3, color="red", ls="--", label="target 0.3 pp")
    ax2.set_title("per-arm share error")
    ax2.legend()
    publish("ab_assignment", data, "\n".join(md), fig)
    print("\n".join(md[6:-3]))


if __name__ == "__main__":
    main()
