"""A/A experiments watched continuously: the live view's decisions (always-valid p of the primary metric and of
the sequential guardrails) keep their false-positive rate; fixed-horizon p-values peeked at the same looks do not.

    .venv/bin/python benchmarks/ab_aa_watch.py                   # 200 A/A experiments x 20,000 viewers, 120 looks
    .venv/bin/python benchmarks/ab_aa_watch.py --sims 50

Each A/A experiment has two identical arms (50/50): 20,000 viewers arrive uniformly over 20 minutes, one request
each; the order rate is 4.8%; the reply's latency is lognormal (600 ms, σ 0.35) and 5% of requests are refused.
The tab refreshes every 10 s (120 looks). At every look the analysis path itself
(``livethink.ab_test.comparisons.sequential``: the mSPRT of the primary metric and of each sequential guardrail,
with the experiment's tuning) gives the always-valid p; an experiment is a false positive when any look is
significant (p < 0.05). Target: ≤ 5% for the primary metric and for each guardrail. Writes
ab_aa_watch.{json,md,png} to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from ab_common import machine, publish  # noqa: E402

from livethink.ab_test.comparisons import compare, sequential  # noqa: E402
from livethink.ab_test.experiment import parse_experiment  # noqa: E402

EXP = parse_experiment({"name": "aa", "arms": [{"name": "A", "weight": 0.5}, {"name": "B", "weight": 0.5}],
                        "sequential": {"enabled": True, "tuning": 10000},
                        "guardrails": ["latency_ms", "refusal_rate"]})  # fmt: skip
METRICS = ("order_rate", "latency_ms", "refusal_rate")
ALPHA = 0.05


def one(rng: np.random.Generator, viewers: int, looks: list[float]) -> dict[str, tuple[bool, bool]]:
    arm = (rng.random(viewers) < 0.5).astype(np.int64)
    ts = np.sort(rng.random(viewers) * looks[-1])
    refused = rng.random(viewers) < 0.05
    values = {
        "order_rate": (rng.random(viewers) < 0.048).astype(float),
        "latency_ms": np.where(refused, np.nan, 600 * np.exp(0.35 * rng.standard_normal(viewers))),
        "refusal_rate": refused.astype(float),
    }
    out = {}
    for m in METRICS:
        seq = sequential(EXP, [values] * len(looks), ts, arm, None, m, 0, 1, looks)
        peeked = False
        for t in looks:  # naive peeking: the fixed-horizon p at the same looks
            res, _, _ = compare(m, np.where(ts <= t, values[m], np.nan), arm, 0, 1, ALPHA)
            peeked |= res is not None and res.p_value < ALPHA
        out[m] = (seq["p_value"] < ALPHA, peeked)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=200)
    ap.add_argument("--viewers", type=int, default=20_000)
    ap.add_argument("--looks", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    looks = [10.0 * (k + 1) for k in range(args.looks)]
    t0 = time.perf_counter()
    runs = [one(rng, args.viewers, looks) for _ in range(args.sims)]
    fp = {m: float(np.mean([r[m][0] for r in runs])) for m in METRICS}
    peek = {m: float(np.mean([r[m][1] for r in runs])) for m in METRICS}
    data = {"sims": args.sims, "viewers": args.viewers, "looks": args.looks, "alpha": ALPHA,
            "always_valid_false_positive": fp, "fixed_horizon_peeking_false_positive": peek,
            "target": "<= 0.05", "met": all(v <= 0.05 for v in fp.values()),
            "seconds": round(time.perf_counter() - t0, 1), "machine": machine()}  # fmt: skip
    md = "\n".join([
        "# A/A experiments watched every 10 s", "",
        f"{args.sims} A/A experiments × {args.viewers:,} viewers, {args.looks} looks (every 10 s); mSPRT through "
        "`comparisons.sequential`. Command: `.venv/bin/python benchmarks/ab_aa_watch.py`.", "",
        "| metric | always-valid (live view) | fixed-horizon p peeked at every look | target |", "|---|---|---|---|",
        *(f"| {m}{' (primary)' if m == 'order_rate' else ' (guardrail)'} | {fp[m]:.1%} | {peek[m]:.1%} | ≤ 5% |"
          for m in METRICS),
        "", f"{data['seconds']} s on {data['machine']['cpus']} CPUs (load {data['machine']['load_average_1m_at_end']}).",
        "",
    ])  # fmt: skip
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = np.arange(len(METRICS))
    ax.bar(x - 0.2, [fp[m] for m in METRICS], 0.4, label="always-valid")
    ax.bar(x + 0.2, [peek[m] for m in METRICS], 0.4, label="fixed-horizon, peeked")
    ax.axhline(0.05, color="k", lw=1)
    ax.set_xticks(x, METRICS)
    ax.set_ylabel("A/A false-positive rate")
    ax.legend()
    publish("ab_aa_watch", data, md, fig)


if __name__ == "__main__":
    main()
