"""Room randomisation: a room-level effect needs the room as the unit of variance.

    .venv/bin/python benchmarks/ab_units.py                      # 500 simulations
    .venv/bin/python benchmarks/ab_units.py --sims 100

An avatar's spoken reply reaches the whole room, so an experiment on livestreams is randomised by stream (room):
every viewer of a room gets its arm. Each simulation has 200 rooms (half per arm, by GrowthBook v2 hashing of the
room id), 20-80 viewers per room, a conversion rate that varies by room (room effect ~ N(0, 0.04²) around 10%) and
a true treatment effect of +1 pp. The 95% interval of the difference is computed at the viewer level two ways:

- viewer-level (the analysis before units): two-proportion Wald interval, viewers as independent;
- cluster-robust (``livethink.ab_test.stats.cluster_ztest``, what ``analyze`` uses for ``unit: stream``).

Target: the cluster-robust interval covers the true effect in ≥ 93% of 500 simulations, where the viewer-level
one does not. Writes ab_units.{json,md,png} to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from ab_common import machine, publish  # noqa: E402

from livethink.ab_test.assignment import gb_hash  # noqa: E402
from livethink.ab_test.stats import cluster_ztest, two_proportion_ztest  # noqa: E402

ROOMS, EFFECT, BASE, ROOM_SD = 200, 0.01, 0.10, 0.04


def one(sim: int, rng: np.random.Generator) -> dict:
    treated = np.array([gb_hash(f"rooms-{sim}", f"room-{r}", 2) >= 0.5 for r in range(ROOMS)])
    sizes = rng.integers(20, 81, ROOMS)
    p_room = np.clip(BASE + ROOM_SD * rng.standard_normal(ROOMS) + EFFECT * treated, 0, 1)
    room = np.repeat(np.arange(ROOMS), sizes)
    y = (rng.random(len(room)) < p_room[room]).astype(float)
    t = treated[room]
    cl = cluster_ztest(y[~t], room[~t], y[t], room[t])
    naive = two_proportion_ztest(int(y[~t].sum()), int((~t).sum()), int(y[t].sum()), int(t.sum()))
    return {"cluster_ci": cl.ci, "naive_ci": naive.ci, "diff": cl.diff, "viewers": int(len(y))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    runs = [one(s, rng) for s in range(args.sims)]
    cover = {k: float(np.mean([r[f"{k}_ci"][0] <= EFFECT <= r[f"{k}_ci"][1] for r in runs])) for k in ("cluster", "naive")}
    width = {k: float(np.mean([r[f"{k}_ci"][1] - r[f"{k}_ci"][0] for r in runs])) for k in ("cluster", "naive")}
    data = {
        "sims": args.sims, "rooms": ROOMS, "true_effect": EFFECT, "base": BASE, "room_sd": ROOM_SD,
        "mean_viewers": float(np.mean([r["viewers"] for r in runs])), "coverage": cover, "mean_ci_width": width,
        "target": {"cluster_coverage": ">= 0.93"}, "met": cover["cluster"] >= 0.93,
        "seconds": round(time.perf_counter() - t0, 1), "machine": machine(),
    }  # fmt: skip
    md = "\n".join([
        "# A/B randomisation by room: coverage of the 95% interval", "",
        f"{args.sims} simulations × {ROOMS} rooms (~{data['mean_viewers']:.0f} viewers), room effect sd "
        f"{ROOM_SD}, true effect +{EFFECT:.0%}. Command: `.venv/bin/python benchmarks/ab_units.py`.", "",
        "| interval | coverage of the true effect | mean width | target |", "|---|---|---|---|",
        f"| cluster-robust (unit: stream) | {cover['cluster']:.1%} | {width['cluster']:.4f} | ≥ 93% |",
        f"| viewer-level (viewers independent) | {cover['naive']:.1%} | {width['naive']:.4f} | — |", "",
        f"{data['seconds']} s on {data['machine']['cpus']} CPUs (load {data['machine']['load_average_1m_at_end']}).",
        "",
    ])  # fmt: skip
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for k, color in (("naive", "tab:red"), ("cluster", "tab:blue")):
        lo = [r[f"{k}_ci"][0] for r in runs[:60]]
        hi = [r[f"{k}_ci"][1] for r in runs[:60]]
        x = np.arange(len(lo)) + (0.2 if k == "cluster" else -0.2)
        ax.vlines(x, lo, hi, color=color, label=f"{k} ({cover[k]:.0%} cover)")
    ax.axhline(EFFECT, color="k", lw=1)
    ax.set_xlabel("simulation")
    ax.set_ylabel("95% CI of the difference")
    ax.legend()
    publish("ab_units", data, md, fig)


if __name__ == "__main__":
    main()
