"""A real pretrained model behind `livethink serve`: livestream latency by the client's clock at a fixed deadline.

    python benchmarks/real_model_serving.py [--model runs/smollm2/grpo/final] [--requests 60] [--deadline-ms 1000]

It serves the model with ``configs/smollm2/serve.yaml`` (vLLM engine, the model's own reasoning format), then sends
``--requests`` livestream questions from ``examples/my_shop/test.jsonl`` one at a time and measures, per request, the
client's wall time (connection to last byte), the server's ``e2e_ms``, whether the server says the deadline was met,
and whether the reply is the fallback. Without ``--model`` it serves SmolLM2-135M-Instruct as converted by
``python -m livethink.models.smollm2`` (a chat model that does not think: the deadline becomes a reply token cap).

Results: ``benchmarks/results/real_model_serving.{json,md,png}``. Loopback only; bounded in requests and time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import yaml

from livethink.server_process import ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks/results"
SMOLLM2 = Path("~/.cache/livethink/smollm2-135m-instruct").expanduser()


def percentile_ms(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values) * 1000, q)), 1)


def run(model: Path, requests: int, deadline_ms: int) -> dict:
    config = yaml.safe_load((ROOT / "configs/smollm2/serve.yaml").read_text())
    config["models"] = {"student": {"path": str(model)}}
    config["server"]["log_level"] = "warning"
    tasks = [json.loads(line) for line in (ROOT / "examples/my_shop/test.jsonl").read_text().splitlines()]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "serve.yaml"
        path.write_text(yaml.safe_dump(config))
        port = free_port()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        server = ServerProcess([sys.executable, "-m", "livethink.serve.cli", "--config", str(path), "--port", str(port)],
                               port=port, log_path=Path(tmp) / "server.log", ready_path="/health", cwd=ROOT, env=env,
                               startup_timeout_s=600)
        try:
            health = httpx.get(f"{server.url}/health", timeout=10).json()
            rows = []
            with httpx.Client(timeout=deadline_ms / 1000 + 10) as client:
                for i in range(requests):
                    task = tasks[i % len(tasks)]
                    body = {"viewer_id": f"viewer-{i}", "question": task["question"],
                            "product_docs": task["product_docs"], "deadline_ms": deadline_ms}
                    t0 = time.monotonic()
                    response = client.post(f"{server.url}/v1/livestream/reply", json=body)
                    wall = time.monotonic() - t0
                    answer = response.json()
                    rows.append({"status": response.status_code, "client_s": wall,
                                 "server_s": answer.get("timings", {}).get("e2e_ms", float("nan")) / 1000,
                                 "deadline_met": answer.get("deadline_met"), "fallback": answer.get("fallback"),
                                 "reply": answer.get("reply"), "reasoning_tokens": answer.get("tokens", {}).get("reasoning")})
        finally:
            server.close()
    answered = [r for r in rows if r["status"] == 200]
    client_s = [r["client_s"] for r in answered]
    return {
        "meta": {"command": "python benchmarks/real_model_serving.py " + " ".join(sys.argv[1:]), "model": str(model),
                 "deadline_ms": deadline_ms, "requests": requests, "machine": f"{os.cpu_count()} CPUs, {platform.machine()}",
                 "load_average_after": list(os.getloadavg()), "startup_s": round(server.startup_s, 1),
                 "engine": health["engines"], "reasoning": health["reasoning"]},
        "answered": len(answered),
        "refused_429": sum(r["status"] == 429 for r in rows),
        "within_deadline_client": round(sum(c <= deadline_ms / 1000 for c in client_s) / max(1, len(client_s)), 4),
        "server_says_met": round(sum(bool(r["deadline_met"]) for r in answered) / max(1, len(answered)), 4),
        "fallback_share": round(sum(bool(r["fallback"]) for r in answered) / max(1, len(answered)), 4),
        "client_ms": {"p50": percentile_ms(client_s, 50), "p99": percentile_ms(client_s, 99),
                      "max": round(max(client_s) * 1000, 1)},
        "server_ms": {"p50": percentile_ms([r["server_s"] for r in answered], 50),
                      "p99": percentile_ms([r["server_s"] for r in answered], 99)},
        "examples": [r["reply"] for r in answered[:3]],
        "rows": rows,
    }


def write(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "real_model_serving.json").write_text(json.dumps(result, indent=2) + "\n")
    m, d = result["meta"], result["meta"]["deadline_ms"]
    lines = [
        "# A real pretrained model behind `livethink serve`", "",
        f"Command: `{m['command']}`  ",
        f"Model: `{m['model']}` on {m['engine']}, reasoning format {m['reasoning']}; deadline {d} ms; "
        f"{m['requests']} livestream requests one at a time; {m['machine']} (load average after: "
        f"{', '.join(f'{x:.1f}' for x in m['load_average_after'])}); server start {m['startup_s']} s.", "",
        "| answered | 429 | within deadline (client clock) | server says met | fallback replies | "
        "client p50 / p99 / max ms | server p50 / p99 ms |",
        "|---|---|---|---|---|---|---|",
        f"| {result['answered']} | {result['refused_429']} | {100 * result['within_deadline_client']:.1f}% | "
        f"{100 * result['server_says_met']:.1f}% | {100 * result['fallback_share']:.1f}% | "
        f"{result['client_ms']['p50']} / {result['client_ms']['p99']} / {result['client_ms']['max']} | "
        f"{result['server_ms']['p50']} / {result['server_ms']['p99']} |", "",
        "First replies:", "", *[f"> {r}" for r in result["examples"]], "",
    ]
    (OUT / "real_model_serving.md").write_text("\n".join(lines))
    client = [r["client_s"] * 1000 for r in result["rows"] if r["status"] == 200]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.hist(client, bins=30, color="#3b6ea5")
    ax.axvline(d, color="#c0392b", linestyle="--", label=f"deadline {d} ms")
    ax.set_xlabel("client latency (ms)")
    ax.set_ylabel("requests")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "real_model_serving.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="checkpoint dir (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--deadline-ms", type=int, default=1000)
    args = parser.parse_args()
    model = args.model or SMOLLM2
    if not (model / "config.json").is_file():
        raise SystemExit(f"--model: {model} is not a checkpoint (python -m livethink.models.smollm2 converts SmolLM2)")
    result = run(model, args.requests, args.deadline_ms)
    write(result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("rows", "examples")}, indent=2))


if __name__ == "__main__":
    main()
