"""Decode speed of the serving transformers engine: eager against the decode step captured as a CUDA graph
(``engine.enforce_eager: false``).

    python benchmarks/decode_speed.py --model runs/gpu_smollm2/rft/final --dtype bfloat16 --tag gpu_smollm2
    python benchmarks/decode_speed.py --model runs/tiny/rft/final          # CPU: the graph row says why it is eager

One request at a time through ``TransformersEngine.generate`` (the server's decode loop: budget forcing, sampling on
the host), greedy with EOS ignored, ``--tokens`` of thinking then the forced end. Per request: milliseconds per token
between the first delta and the last (the prefill excluded), by the wall clock. ``--reps`` requests per mode after
one warm-up request; the table gives their median and range. Writes
``benchmarks/results/decode_speed[_TAG].{json,md,png}``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ab_common import machine, publish

from livethink.serve.budget.plan import TokenBudget
from livethink.serve.engines.base import GenerationRequest, SamplingOptions
from livethink.serve.engines.transformers_engine import TransformersEngine

PROMPT = "A viewer asks: how much is the red hoodie in size M, and is it in stock?"
MODES = {"eager": False, "cuda_graph": True}


async def _request(engine: TransformersEngine, prompt: list[int], tokens: int, rid: str) -> dict[str, float]:
    request = GenerationRequest(rid, engine.name, prompt, SamplingOptions(temperature=0.0, ignore_eos=True))
    t_start = time.perf_counter()
    stamps, produced = [], 0
    async for delta in engine.generate(request, TokenBudget(thinking_cap=tokens, reply_reserve=0)):
        if delta.tokens:
            stamps.append(time.perf_counter())
            produced += delta.tokens
    return {"tokens": produced, "ttft_ms": 1000 * (stamps[0] - t_start),
            "ms_per_token": 1000 * (stamps[-1] - stamps[0]) / max(1, len(stamps) - 1)}


async def measure(model: Path, mode: str, dtype: str, device: str, tokens: int, reps: int) -> dict[str, Any]:
    engine = TransformersEngine("m", model, dtype=dtype, device=device, cuda_graph=MODES[mode])
    t0 = time.perf_counter()
    await engine.start()
    load_s = time.perf_counter() - t0
    try:
        prompt = engine.tokenizer.encode(PROMPT, add_special_tokens=False)
        await _request(engine, prompt, tokens, "warmup")
        runs = [await _request(engine, prompt, tokens, f"r{i}") for i in range(reps)]
    finally:
        await engine.stop()
    per_token = [r["ms_per_token"] for r in runs]
    return {"mode": mode, "decode": engine.decode, "device": str(engine.device), "load_s": round(load_s, 2),
            "tokens_per_request": runs[0]["tokens"], "ms_per_token_p50": round(statistics.median(per_token), 3),
            "ms_per_token_min": round(min(per_token), 3), "ms_per_token_max": round(max(per_token), 3),
            "ttft_ms_p50": round(statistics.median(r["ttft_ms"] for r in runs), 2), "runs": runs}


def markdown(data: dict[str, Any]) -> str:
    rows = ["| mode | decoding | device | ms per token (median [min, max]) | tokens/s | TTFT ms | load s |",
            "|---|---|---|---|---:|---:|---:|"]
    for r in data["modes"]:
        rows.append(f"| {r['mode']} | {r['decode']} | {r['device']} | {r['ms_per_token_p50']} "
                    f"[{r['ms_per_token_min']}, {r['ms_per_token_max']}] | {1000 / r['ms_per_token_p50']:.0f} | "
                    f"{r['ttft_ms_p50']} | {r['load_s']} |")
    m = data["machine"]
    return "\n".join([
        "# Decode speed of the serving transformers engine", "",
        f"Command: `{data['command']}`  ", f"Model: `{data['model']}` ({data['dtype']}); {data['reps']} requests per "
        f"mode after one warm-up, {data['tokens']} thinking tokens each, greedy, one at a time. Machine: "
        f"{m['cpus']} CPUs, load average before / after {data['load_before']} / {data['load_after']}"
        + (f"; {data['gpu']}" if data.get("gpu") else "") + ".", "", *rows, "",
        "Milliseconds per token between a request's first and last delta (the prefill excluded), by the wall clock. "
        "`cuda_graph` is `engine.enforce_eager: false`: the decode step replayed from a captured CUDA graph "
        "(`livethink/serve/engines/decoders.py`); without a CUDA device it decodes eagerly and says so.", ""])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--tokens", type=int, default=128, help="thinking tokens per request")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    import torch

    load_before = [round(x, 2) for x in os.getloadavg()]
    modes = [asyncio.run(measure(args.model, mode, args.dtype, args.device, args.tokens, args.reps)) for mode in MODES]
    data = {"command": "python benchmarks/decode_speed.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "model": str(args.model), "dtype": args.dtype, "tokens": args.tokens, "reps": args.reps,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "modes": modes,
            "load_before": load_before, "load_after": [round(x, 2) for x in os.getloadavg()], "machine": machine()}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.bar([r["mode"] for r in modes], [r["ms_per_token_p50"] for r in modes],
           yerr=[[r["ms_per_token_p50"] - r["ms_per_token_min"] for r in modes],
                 [r["ms_per_token_max"] - r["ms_per_token_p50"] for r in modes]], color=["#888", "#2a7"])
    ax.set_ylabel("ms per token (median, range)")
    ax.set_title(f"{args.model.name} on {data['gpu'] or 'CPU'}", fontsize=9)
    publish("decode_speed" + (f"_{args.tag}" if args.tag else ""), data, markdown(data), fig)


if __name__ == "__main__":
    main()
