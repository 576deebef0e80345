"""What exporting vLLM's engine statistics costs: per-token decode time with ``engine.export_engine_stats`` on and off.

The statistics come from a stat logger vLLM calls after every scheduler step, on the server's event loop
(``livethink/serve/engines/vllm_stats.py``), and vLLM's engine core computes them each step. This benchmark starts
the ``make demo`` server (vLLM, the RFT student of ``--runs``) once with the export on and once off (order
alternating over ``--rounds``), streams ``--requests`` chat replies of ``--tokens`` tokens each (EOS ignored, no
deadline pressure), one at a time, and takes each reply's median gap between streamed chunks by the client's clock
(the prefill excluded). Reported: the median per-token time per mode, their difference with a 95% interval
(``scipy.stats.bootstrap`` over requests) and the Mann-Whitney U test.

    .venv/bin/python benchmarks/engine_stats_cost.py [--runs runs/tiny] [--requests 20] [--tokens 160] [--rounds 2]

Writes ``benchmarks/results/engine_stats_cost.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the serving helpers, by name

from serve_common import OUT, RFT_STUDENT, RunRecord, runs_label, save_figure, trained_student, write_outputs  # noqa: E402
from serve_load_client import livethink_server  # noqa: E402

MESSAGES = [{"role": "user", "content": "Which colours does the hoodie come in, and is it machine washable?"}]


def per_token_ms(client: httpx.Client, tokens: int) -> float:
    """One streamed chat reply: the median gap (ms) between content chunks after the first, by the client's clock."""
    body = {"model": "rft", "messages": MESSAGES, "stream": True, "max_tokens": tokens, "ignore_eos": True,
            "deadline_ms": 60_000, "thinking_token_budget": tokens // 2, "temperature": 0}  # fmt: skip
    stamps = []
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data:") and line.strip() != "data: [DONE]":
                stamps.append(time.perf_counter())
    gaps = np.diff(stamps[1:]) * 1000
    if len(gaps) < tokens // 4:
        raise RuntimeError(f"only {len(stamps)} chunks streamed for {tokens} tokens")
    return float(np.median(gaps))


def run_mode(on: bool, runs: Path, requests: int, tokens: int, work: Path) -> list[float]:
    sets = ["models=" + json.dumps({"rft": {"path": str(runs / RFT_STUDENT)}}), "default_model=rft",
            f"engine.export_engine_stats={'true' if on else 'false'}", "engine.probe_interval_s=null"]  # fmt: skip
    server = livethink_server(sets, work, f"stats-{'on' if on else 'off'}")
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            per_token_ms(client, tokens)  # warm-up
            return [per_token_ms(client, tokens) for _ in range(requests)]
    finally:
        server.close()


def analyse(on: list[float], off: list[float]) -> dict[str, Any]:
    from scipy import stats

    a, b = np.asarray(on), np.asarray(off)
    ci = stats.bootstrap((a, b), lambda x, y, axis=-1: np.median(x, axis=axis) - np.median(y, axis=axis),
                         n_resamples=5000, random_state=0, vectorized=True).confidence_interval  # fmt: skip
    return {"on_median_ms": round(float(np.median(a)), 3), "off_median_ms": round(float(np.median(b)), 3),
            "difference_ms": round(float(np.median(a) - np.median(b)), 3),
            "difference_ci_ms": [round(float(ci.low), 3), round(float(ci.high), 3)],
            "relative": round(float(np.median(a) / np.median(b) - 1), 4),
            "mann_whitney_p": float(stats.mannwhitneyu(a, b).pvalue)}  # fmt: skip


def markdown(r: dict[str, Any]) -> str:
    a = r["analysis"]
    return "\n".join([
        "# The cost of exporting vLLM's engine statistics", "",
        f"Command: `{r['command']}`  ",
        f"Server: `configs/tiny/serve.yaml`, the RFT student of `{r['runs']}` on vLLM; {r['requests_per_mode']} streamed "
        f"chat replies of {r['tokens']} tokens per mode (EOS ignored), one at a time, modes alternating over "
        f"{r['rounds']} rounds; per reply the median gap between streamed chunks (client's clock).  ",
        f"Machine: {r['environment']}; load average (1, 5, 15 min) before {r['loadavg_before']}, after "
        f"{r['loadavg_after']}; {r['wall_s']:.0f} s.", "",
        "| `engine.export_engine_stats` | per-token time, median of replies |", "|---|---:|",
        f"| on | {a['on_median_ms']} ms |", f"| off | {a['off_median_ms']} ms |", "",
        f"Difference (on − off): **{a['difference_ms']:+.3f} ms per token** ({a['relative']:+.1%}), 95% bootstrap "
        f"interval [{a['difference_ci_ms'][0]:+.3f}, {a['difference_ci_ms'][1]:+.3f}] ms; Mann-Whitney p = "
        f"{a['mann_whitney_p']:.3g}.", "",
        "![per-token time, statistics on and off](engine_stats_cost.png)", "",
    ])  # fmt: skip


def plot(r: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    ax.boxplot([r["per_token_ms"]["on"], r["per_token_ms"]["off"]], tick_labels=["stats on", "stats off"])
    ax.set_ylabel("ms per token (median of a reply)")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny", help="make demo's runs folder")
    p.add_argument("--requests", type=int, default=20, help="replies per mode and round")
    p.add_argument("--tokens", type=int, default=160)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    trained_student(p, args.runs)
    work = Path(tempfile.mkdtemp(prefix="engine-stats-cost-"))
    record = RunRecord("engine_stats_cost.py", argv)
    samples: dict[str, list[float]] = {"on": [], "off": []}
    for k in range(args.rounds):
        for on in ((True, False) if k % 2 == 0 else (False, True)):
            samples["on" if on else "off"] += run_mode(on, args.runs, args.requests, args.tokens, work)
            print(f"round {k + 1}: stats {'on' if on else 'off'} done", flush=True)
    result = {
        **record.fields(), "runs": runs_label(args.runs), "requests_per_mode": args.requests * args.rounds, "tokens": args.tokens,
        "rounds": args.rounds, "per_token_ms": samples, "analysis": analyse(samples["on"], samples["off"]),
    }  # fmt: skip
    write_outputs(args.out, "engine_stats_cost", result, markdown(result), plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
