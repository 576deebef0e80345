"""Report of ``bash benchmarks/gpu_smollm2.sh``: the real-model recipe (SmolLM2-135M-Instruct) on a GPU.

    python benchmarks/gpu_smollm2_report.py [--runs runs/gpu_smollm2] [--out benchmarks/results]

Reads the runs' own files (times.jsonl, rft_summary.json, grpo_summary.json, metrics.jsonl, the eval reports and
``serve_load_gpu_smollm2.json``, ``decode_speed_gpu_smollm2.json``) and writes ``gpu_smollm2.{json,md,png}``: stage wall times, stage 1's acceptance
and losses, stage 2's per-step lengths and rewards, each student's correctness against the thinking cap with its
floor, and goodput against the deadline through the server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EVALS = {"rft": "eval_rft", "budget64": "eval_budget64"}


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def device() -> dict[str, Any]:
    info: dict[str, Any] = {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                            "versions": {n: version(n) for n in ("torch", "transformers", "trl", "peft", "datasets")}}
    try:
        import torch

        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        info["cuda"] = torch.version.cuda
    except ImportError:
        info["gpu"] = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        info["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()
    return info


def logged(text: str, key: str) -> list[float]:
    return [float(x) for x in re.findall(rf"'{key}': '?([0-9.eE+-]+|nan|inf)'?", text)]


def stage1(runs: Path) -> dict[str, Any] | None:
    summary = read_json(runs / "rft/rft_summary.json")
    if not summary:
        return None
    log = (runs / "logs/rft.log").read_text(errors="replace") if (runs / "logs/rft.log").is_file() else ""
    losses = logged(log, "loss")
    runtime, speed = logged(log, "train_runtime"), logged(log, "train_steps_per_second")
    return {"timings_s": summary["timings"], "acceptance_rate": summary["acceptance"]["acceptance_rate"],
            "sft_targets": summary["acceptance"]["selected"], "train_runtime_s": runtime[-1] if runtime else None,
            "steps_per_s": speed[-1] if speed else None, "losses": len(losses),
            "all_losses_finite": bool(losses) and all(math.isfinite(x) for x in losses),
            "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None}


def stage2(runs: Path) -> dict[str, Any] | None:
    """Stage 2's logged steps; ``finished`` is False where the run stopped (its time limit) before saving."""
    summary = read_json(runs / "grpo_drpo_budget64/grpo_summary.json")
    rows = read_jsonl(runs / "grpo_drpo_budget64/metrics.jsonl")
    if not summary and not rows:
        return None
    return {"finished": bool(summary), "steps": summary["global_step"] if summary else len(rows),
            "train_runtime_s": summary["train_runtime_s"] if summary else None,
            "wall_s": summary["wall_s"] if summary else None,
            "step_time_s": [r.get("step_time") for r in rows],
            "mean_length": [r.get("completions/mean_length") for r in rows],
            "accuracy": [r.get("accuracy") for r in rows], "reward": [r.get("reward") for r in rows]}


def curves(runs: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for name, folder in EVALS.items():
        report = read_json(runs / folder / "eval.json")
        if not report:
            continue
        (r,) = report["results"]
        o, curve = r["overall"], r.get("thinking_curve") or {}
        out[name] = {"n": o["n"], "correct": o["correctness"], "helpful": o["helpfulness"],
                     "total_tokens": o["total_tokens"], "reasoning_tokens": o["reasoning_tokens"],
                     "truncated": o["truncated_rate"], "caps": curve.get("caps", []),
                     "correct_at_cap": curve.get("correct", []), "floor": curve.get("min_thinking_tokens"),
                     "e2e_ms_p50": (r.get("latency") or {}).get("e2e_ms_p50"), "command": report["meta"].get("command")}
    return out


def serving(out_dir: Path) -> dict[str, Any] | None:
    """Goodput rows of serve_load's deadline sweep (livethink server only), and the load rate they ran at."""
    report = read_json(out_dir / "serve_load_gpu_smollm2.json")
    if not report:
        return None
    sweep = report["deadline_sweep"]
    rows = [{k: r[k] for k in ("model", "load", "deadline_ms", "sent", "good", "goodput", "goodput_ci95", "fallback",
                               "refused", "late", "client_ms")} for r in sweep["rows"] if r["server"] == "livethink"]
    deployment = report.get("deployment") or {}
    engines = {name: {k: c.get(k) for k in ("capacity", "observations", "estimated_tpot_ms", "estimated_tpot_hi_ms")}
               | {"decode": deployment.get("engines", {}).get(name, {}).get("decode")}
               for name, c in deployment.get("controller", {}).items()}
    return {"load_rate": sweep["load_rate"], "rows": rows, "command": report["command"],
            "environment": report["environment"], "engines": engines}


def decode_speed(out_dir: Path) -> dict[str, Any] | None:
    """The serving engine's ms per token, eager and replayed from a CUDA graph (``benchmarks/decode_speed.py``)."""
    report = read_json(out_dir / "decode_speed_gpu_smollm2.json")
    if not report:
        return None
    modes = [{k: m[k] for k in ("mode", "decode", "ms_per_token_p50", "ms_per_token_min", "ms_per_token_max")}
             for m in report["modes"]]
    return {"command": report["command"], "tokens": report["tokens"], "reps": report["reps"], "modes": modes}


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def markdown(report: dict[str, Any]) -> str:
    d = report["device"]
    lines = ["# The real-model recipe on a GPU: SmolLM2-135M-Instruct through every stage", "",
             f"Device: {d.get('gpu')} ({d.get('nvidia_smi', '')}), {d['cpu_count']} CPU cores, CUDA {d.get('cuda')}, "
             f"Python {d['python']}; " + ", ".join(f"{k} {v}" for k, v in d["versions"].items() if v) + ". "
             f"Load average (1/5/15 min) before / after: {report['load_before']} / {report['load_after']}.", "",
             "Generated by `bash benchmarks/gpu_smollm2.sh` (stage `report`: `python benchmarks/gpu_smollm2_report.py`) "
             "from the runs' own files. One run of each stage: one seed, no interval.", "",
             "## Stages", "", "| stage | rc | wall s | command |", "|---|---|---|---|"]
    lines += [f"| {t['stage']} | {t['rc']} | {t['wall_s']} | `{t['command']}` |" for t in report["stages"]]
    if s := report.get("stage1"):
        lines += ["", "## Stage 1: RFT (scripted teacher, rubric judge, LoRA SFT under bf16 autocast)", "",
                  f"- timings (s): {s['timings_s']}",
                  f"- accepted (C ∧ H): {pct(s['acceptance_rate'])}%, {s['sft_targets']} SFT targets",
                  f"- SFT: {s['train_runtime_s']} s, {s['steps_per_s']} steps/s; {s['losses']} logged losses, all finite: "
                  f"{s['all_losses_finite']} (first {s['first_loss']}, last {s['last_loss']})"]
    if s := report.get("stage2"):
        lengths = ", ".join("–" if x is None else f"{x:.0f}" for x in s["mean_length"])
        accuracy = ", ".join("–" if x is None else f"{x:.2f}" for x in s["accuracy"])
        seconds = ", ".join("–" if x is None else f"{x:.1f}" for x in s["step_time_s"])
        done = (f"- {s['steps']} steps, {s['train_runtime_s']} s of training ({s['wall_s']} s with loading)"
                if s["finished"] else
                f"- **stopped at its time limit after {s['steps']} logged steps, before a checkpoint was saved**: "
                "no budget-trained student to evaluate or serve")
        lines += ["", "## Stage 2: DRPO with budget-forced rollouts (caps 48/64/96, a quarter uncut), LoRA", "", done,
                  f"- seconds per step: {seconds or '–'}",
                  f"- rollout mean length per step (tokens): {lengths}", f"- rollout accuracy per step: {accuracy}"]
    if c := report.get("curves"):
        caps = sorted({cap for v in c.values() for cap in v["caps"]})
        lines += ["", "## Correctness (%) against the thinking cap (test split, greedy, 48-token reply reserve)", "",
                  "| student | n | " + " | ".join(str(x) for x in caps) + " | uncapped | H | tokens | floor | e2e p50 ms |",
                  "|---|---:|" + "---:|" * (len(caps) + 5)]
        for name, v in c.items():
            at = dict(zip(v["caps"], v["correct_at_cap"], strict=True))
            lines.append(f"| {name} | {v['n']} | " + " | ".join(pct(at.get(x)) for x in caps) +
                         f" | {pct(v['correct'])} | {pct(v['helpful'])} | {v['total_tokens']:.1f} | {v['floor']} | "
                         f"{v['e2e_ms_p50']} |")
    if d := report.get("decode_speed"):
        lines += ["", "## Decode speed of the serving engine (transformers, bf16, one request at a time)", "",
                  f"`{d['command']}`: {d['reps']} requests of {d['tokens']} thinking tokens per mode, after a warm-up. "
                  "Full report: `decode_speed_gpu_smollm2.md`.", "",
                  "| mode | decoding | ms per token, median [min, max] |", "|---|---|---|"]
        lines += [f"| {m['mode']} | {m['decode']} | {m['ms_per_token_p50']} [{m['ms_per_token_min']}, "
                  f"{m['ms_per_token_max']}] |" for m in d["modes"]]
    if v := report.get("serving"):
        engines = [f"Engine `{name}` as its controller measured it: capacity {e['capacity']}, "
                   f"{e['estimated_tpot_ms']} ms per token (tail {e['estimated_tpot_hi_ms']} ms) after "
                   f"{e['observations']} observations; decoding: {e.get('decode') or 'not reported'}."
                   for name, e in v["engines"].items()]
        lines += ["", "## Goodput against the deadline through the server (transformers engine on the GPU)", "",
                  f"`{v['command']}`; loaded: Poisson arrivals at {v['load_rate']} req/s. Full report: "
                  "`serve_load_gpu_smollm2.md`." + ("" if any(t["stage"] == "serve" for t in report["stages"]) else
                  " These figures are from an earlier run of the `serve` stage, on that run's RFT student: the "
                  "stages above did not include it."), "", *engines, *([""] if engines else []),
                  "| student | load | deadline ms | sent | goodput % [95% CI] | fallback | 429 | late | client p50 / p95 ms |",
                  "|---|---|---:|---:|---|---:|---:|---:|---|"]
        for r in v["rows"]:
            lo, hi = r["goodput_ci95"]
            lines.append(f"| {r['model']} | {r['load']} | {r['deadline_ms']} | {r['sent']} | {pct(r['goodput'])} "
                         f"[{pct(lo)}, {pct(hi)}] | {r['fallback']} | {r['refused']} | {r['late']} | "
                         f"{r['client_ms']['p50']} / {r['client_ms']['p95']} |")
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    for name, v in (report.get("curves") or {}).items():
        ax.plot(v["caps"], [100 * x for x in v["correct_at_cap"]], marker="o", label=name)
        ax.axhline(100 * v["correct"], linestyle=":", color=ax.lines[-1].get_color())
    ax.set_xlabel("thinking cap (tokens)")
    ax.set_ylabel("correct (%)")
    ax.set_title("SmolLM2-135M students on the GPU (dotted: uncapped)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=ROOT / "runs/gpu_smollm2")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = p.parse_args(argv)
    report = {"device": device(), "load_before": (read_json(args.runs / "load_before.json") or {}).get("load"),
              "load_after": [round(x, 2) for x in os.getloadavg()], "stages": read_jsonl(args.runs / "times.jsonl"),
              "stage1": stage1(args.runs), "stage2": stage2(args.runs), "curves": curves(args.runs),
              "decode_speed": decode_speed(args.out), "serving": serving(args.out)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_smollm2.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "gpu_smollm2.md").write_text(markdown(report))
    if report["curves"]:
        plot(report, args.out / "gpu_smollm2.png")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
