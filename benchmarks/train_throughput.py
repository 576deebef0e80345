"""Training throughput of a student on CPU: forward + backward (+ AdamW step), tokens/s.

    .venv/bin/python benchmarks/train_throughput.py [--config configs/tiny/student.yaml] [--batch 16 --seq 256]
    .venv/bin/python benchmarks/train_throughput.py --config configs/smollm2/student_liveshop.yaml --batch 8 --seq 600 \
        --steps 2 --tag smollm2      # a pretrained student (here SmolLM2-135M-Instruct, converted on first use)

Random token ids (throughput does not depend on the text); the LM loss includes the router aux loss, as in
SFT. Runs fp32 and bf16 autocast and writes ``benchmarks/results/train_throughput[_TAG].{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
from pathlib import Path

import torch

from livethink.models.params import count_params
from livethink.models.student import StudentConfig, load_student_config

ROOT = Path(__file__).resolve().parents[1]


def build_model(config: StudentConfig):
    """The student a config describes: a pretrained checkpoint, or a seeded from-scratch Qwen3-MoE."""
    if config.pretrained:
        from livethink.models.student import build_student

        return build_student(config)[0].to(torch.float32)
    from transformers import Qwen3MoeForCausalLM

    torch.manual_seed(config.seed)
    return Qwen3MoeForCausalLM(config.to_hf_config())


def describe(model) -> str:
    c = model.config
    text = f"{type(model).__name__} {c.num_hidden_layers} layers, hidden {c.hidden_size}"
    if getattr(c, "num_experts", None):
        text += f", {c.num_experts} experts top-{c.num_experts_per_tok}, moe_intermediate {c.moe_intermediate_size}"
    return text + f", vocab {c.vocab_size}"


def measure(model, vocab_size: int, batch: int, seq: int, steps: int, warmup: int, bf16: bool) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab_size, (batch, seq), generator=gen)
    model.train()
    times, fwd_bwd = [], []
    cpu0 = time.process_time()
    for step in range(warmup + steps):
        if step == warmup:
            cpu0 = time.process_time()
        t0 = time.perf_counter()
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
        with ctx:
            loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        t1 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t2 = time.perf_counter()
        if step >= warmup:
            times.append(t2 - t0)
            fwd_bwd.append(t1 - t0)
    cpu_s = (time.process_time() - cpu0) / steps
    tokens = batch * seq
    step_s = sorted(times)[len(times) // 2]  # median
    fb_s = sorted(fwd_bwd)[len(fwd_bwd) // 2]
    return {
        "precision": "bf16 autocast" if bf16 else "fp32",
        "step_s_median": round(step_s, 4),
        "tokens_per_s": round(tokens / step_s, 1),
        "fwd_bwd_tokens_per_s": round(tokens / fb_s, 1),
        "cpu_s_per_step": round(cpu_s, 4),  # CPU time of all threads: wall * threads on an idle machine
        # what the step would take with every thread on its own core: robust to other jobs on a shared machine
        "cpu_bound_tokens_per_s": round(tokens * torch.get_num_threads() / cpu_s, 1),
        "final_loss": round(float(loss), 4),
    }


def to_markdown(result: dict) -> str:
    p = result["params"]
    lines = [
        "# Training throughput of a student on CPU",
        "",
        f"Command: `{result['command']}`",
        "",
        f"Model: {result['model']}; total {p['total']:,} params, active {p['active']:,} per token.",
        f"Batch {result['batch']} x {result['seq']} tokens, {result['steps']} timed steps after "
        f"{result['warmup']} warm-up; {result['threads']} torch threads; torch {result['torch']}; "
        f"{result['cpu']}.",
        "",
        f"Load average (1 min) before / after: {result['loadavg_before']} / {result['loadavg_after']} "
        "(the machine is shared: a load above the core count means the wall-clock numbers are pessimistic).",
        "",
        "| precision | step (median, s) | tokens/s (fwd+bwd+AdamW) | tokens/s (fwd+bwd) | CPU s per step "
        "| tokens/s if uncontended (tokens x threads / CPU s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(f"| {r['precision']} | {r['step_s_median']} | {r['tokens_per_s']:,.0f} | "
                     f"{r['fwd_bwd_tokens_per_s']:,.0f} | {r['cpu_s_per_step']} | "
                     f"{r['cpu_bound_tokens_per_s']:,.0f} |")
    lines += ["", f"Best: **{result['best_tokens_per_s']:,.0f} tokens/s** ({result['best_precision']})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs/tiny/student.yaml"))
    parser.add_argument("--vocab-size", type=int, default=1024, help="used when the config leaves it null")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--precision", choices=["fp32", "bf16", "both"], default="both")
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results"))
    parser.add_argument("--tag", default="", help="suffix of the result files (train_throughput_TAG.json)")
    args = parser.parse_args(argv)

    config = load_student_config(args.config)
    if config.vocab_size is None and not config.pretrained:
        config.vocab_size = args.vocab_size
    model = build_model(config)
    vocab_size = model.config.vocab_size
    counts = count_params(model)
    load_before = round(os.getloadavg()[0], 2)
    precisions = {"fp32": [False], "bf16": [True], "both": [False, True]}[args.precision]
    runs = [measure(model, vocab_size, args.batch, args.seq, args.steps, args.warmup, bf16)
            for bf16 in precisions]
    best = max(runs, key=lambda r: r["tokens_per_s"])
    result = {
        "benchmark": "train_throughput",
        "command": " ".join(["python benchmarks/train_throughput.py", *(argv or [])]),
        "model": describe(model),
        "params": counts.to_dict(),
        "batch": args.batch,
        "seq": args.seq,
        "steps": args.steps,
        "warmup": args.warmup,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "loadavg_before": load_before,
        "loadavg_after": round(os.getloadavg()[0], 2),
        "runs": runs,
        "best_tokens_per_s": best["tokens_per_s"],
        "best_precision": best["precision"],
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"train_throughput_{args.tag}" if args.tag else "train_throughput"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / f"{stem}.md").write_text(to_markdown(result))
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
