#!/usr/bin/env bash
# GPU check of livethink's training and eval paths on CUDA in bf16: the CUDA tests, stage 1 (RFT: scripted
# teacher -> rubric judge -> SFT), a few stage-2 GRPO steps of every variant with transformers rollouts, and the
# eval harness on the GPU. Every number in the report comes from these runs.
#
#   bash benchmarks/gpu_check.sh                 # every stage, in order
#   bash benchmarks/gpu_check.sh rft grpo        # some stages (test data rft grpo eval eval_bf16 rollouts report)
#
# The `rollouts` stage runs the rollout benchmark's sync and tail modes on the GPU (transformers rollouts, bf16) and
# writes benchmarks/results/rollouts_gpu.{json,md,png}; the decoupled modes need vLLM, which it reports as missing.
#
# Needs a CUDA GPU and livethink's Python dependencies (the `train` extra; vLLM is not used). Environment:
#   PY=python3  RUNS=runs/gpu  VARIANTS="baseline siri dot drpo length_penalty"  GRPO_STEPS=6  EVAL_N=200
#   LATENCY_PROBES=8  RFT_ARGS="" (extra `livethink rft` options, e.g. "--max_steps 200" to cut stage 1)
#   ROLLOUT_RFT=$RUNS/rft/final  ROLLOUT_MODES=sync,tail  ROLLOUT_SEEDS=0  ROLLOUT_STEPS=12  ROLLOUT_EVAL_N=100
# Writes $RUNS/{data,tokenizer,rft,grpo_<variant>,eval,eval_bf16,logs,times.jsonl} and, in the report stage,
# benchmarks/results/gpu_check.{json,md}. Finished stages are reused on a re-run (as the CLIs do). Re-running `report`
# keeps the notes written by hand: JSON keys it does not generate, and the Markdown from its notes marker on.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
RUNS=${RUNS:-runs/gpu}
VARIANTS=${VARIANTS:-baseline siri dot drpo length_penalty}
GRPO_STEPS=${GRPO_STEPS:-6}
EVAL_N=${EVAL_N:-200}
LATENCY_PROBES=${LATENCY_PROBES:-8}
RFT_ARGS=${RFT_ARGS:-}
ROLLOUT_RFT=${ROLLOUT_RFT:-$RUNS/rft/final}
ROLLOUT_MODES=${ROLLOUT_MODES:-sync,tail}
ROLLOUT_SEEDS=${ROLLOUT_SEEDS:-0}
ROLLOUT_STEPS=${ROLLOUT_STEPS:-12}
ROLLOUT_EVAL_N=${ROLLOUT_EVAL_N:-100}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$RUNS/logs"

# shellcheck source=benchmarks/gpu_stage.sh
source benchmarks/gpu_stage.sh  # stage NAME COMMAND...

run_test() { stage test "$PY" -m pytest -q -p no:cacheprovider tests/models/test_cuda.py; }

run_data() {
    [ -f "$RUNS/data/test.jsonl" ] || stage data "$PY" -m livethink.cli data generate --out "$RUNS/data"
}

run_rft() {
    run_data
    # shellcheck disable=SC2086
    stage rft "$PY" -m livethink.cli rft --config configs/tiny/rft.yaml --use_cpu false --bf16 true \
        --output_dir "$RUNS/rft" --data_dir "$RUNS/data" --tokenizer_dir "$RUNS/tokenizer" $RFT_ARGS
}

run_grpo() {
    run_data
    local v
    for v in $VARIANTS; do
        stage "grpo_$v" "$PY" -m livethink.cli grpo --config "configs/tiny/grpo_$v.yaml" \
            --model_name_or_path "$RUNS/rft/final" --data_dir "$RUNS/data" --use_cpu false --bf16 true \
            --use_vllm false --max_steps "$GRPO_STEPS" --save_steps 3 --output_dir "$RUNS/grpo_$v"
    done
}

# the RFT student (and the DRPO policy when it exists), greedy, calculator-assisted, transformers engine on the GPU
run_eval() {
    run_data
    local models=(--model "$RUNS/rft/final" --name rft)
    [ -f "$RUNS/grpo_drpo/final/config.json" ] && models+=(--model "$RUNS/grpo_drpo/final" --name "drpo@$GRPO_STEPS")
    stage eval "$PY" -m livethink.cli eval "${models[@]}" --data "$RUNS/data" --split test --limit "$EVAL_N" \
        --calculator --engine transformers --device auto --dtype float32 --latency-probes "$LATENCY_PROBES" \
        --out "$RUNS/eval"
}

run_eval_bf16() {
    run_data
    stage eval_bf16 "$PY" -m livethink.cli eval --model "$RUNS/rft/final" --name rft-bf16 --data "$RUNS/data" \
        --split test --limit "$EVAL_N" --calculator --engine transformers --device auto --dtype bfloat16 \
        --latency-probes "$LATENCY_PROBES" --out "$RUNS/eval_bf16"
}

# the rollout benchmark's modes on the GPU: transformers rollouts, the trainer in bf16, each run's student evaluated
run_rollouts() {
    run_data
    stage rollouts "$PY" benchmarks/rollouts.py --modes "$ROLLOUT_MODES" --seeds "$ROLLOUT_SEEDS" \
        --steps "$ROLLOUT_STEPS" --device cuda --rollout-engine transformers --engine transformers \
        --eval-n "$ROLLOUT_EVAL_N" --rft "$ROLLOUT_RFT" --data-dir "$RUNS/data" --runs-dir "$RUNS/rollouts" \
        --out benchmarks/results/rollouts_gpu
}

run_report() {
    RUNS="$RUNS" GRPO_STEPS="$GRPO_STEPS" "$PY" - <<'EOF'
"""Collect the runs' own numbers into benchmarks/results/gpu_check.{json,md}."""
import json, math, os, platform, re, subprocess
from importlib import metadata
from pathlib import Path

import torch

runs = Path(os.environ["RUNS"])
out_json, out_md = Path("benchmarks/results/gpu_check.json"), Path("benchmarks/results/gpu_check.md")
times = [json.loads(line) for line in (runs / "times.jsonl").read_text().splitlines()] if (runs / "times.jsonl").is_file() else []
last = {t["stage"]: t for t in times}  # the latest run of each stage


def read_json(path):
    return json.loads(path.read_text()) if path.is_file() else None


def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def log(name):
    path = runs / "logs" / f"{name}.log"
    return path.read_text(errors="replace") if path.is_file() else ""


def logged_number(text, key):
    found = re.findall(rf"'{key}': '?([0-9.eE+-]+)'?", text)
    return float(found[-1]) if found else None


report = {
    "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device",
    "gpu_count": torch.cuda.device_count(),
    "cpu_count": os.cpu_count(),
    "python": platform.python_version(),
    "versions": {n: version(n) for n in ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "tokenizers", "livethink")},
    "cuda": torch.version.cuda,
    "stages": times,
}
try:
    report["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                                          capture_output=True, text=True, timeout=20).stdout.strip()
except (OSError, subprocess.SubprocessError):
    pass

test_log = log("test")
summary_line = [line for line in test_log.splitlines() if re.search(r"\b(passed|failed|error)", line)]
report["cuda_tests"] = {"rc": last.get("test", {}).get("rc"), "summary": summary_line[-1].strip("= ") if summary_line else None}

rft = read_json(runs / "rft" / "rft_summary.json")
if rft:
    checkpoints = sorted((runs / "rft").glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    state = read_json(checkpoints[-1]) if checkpoints else {}
    text = log("rft")
    train_runtime = logged_number(text, "train_runtime")
    steps = logged_number(text, "train_steps_per_second")
    done_steps = round(train_runtime * steps) if train_runtime and steps else None  # (no checkpoint on hand)
    losses = [float(x) for x in re.findall(r"'loss': '?([0-9.eE+-]+|nan|inf)'?", text)]
    report["rft"] = {
        "timings_s": rft["timings"], "acceptance_rate": rft["acceptance"]["acceptance_rate"],
        "sft_targets": rft["acceptance"]["selected"], "max_steps": state.get("max_steps") or done_steps,
        "last_checkpoint_step": state.get("global_step"), "train_runtime_s": train_runtime,
        "train_steps_per_second": steps, "logged_losses": len(losses),
        "all_losses_finite": bool(losses) and all(math.isfinite(x) for x in losses),
        "first_loss": losses[0] if losses else None, "last_loss": losses[-1] if losses else None,
        "stage_wall_s": last.get("rft", {}).get("wall_s"), "rc": last.get("rft", {}).get("rc"),
    }

grpo = {}
for summary_path in sorted(runs.glob("grpo_*/grpo_summary.json")):
    variant = summary_path.parent.name.removeprefix("grpo_")
    s = read_json(summary_path)
    rows = [json.loads(line) for line in (summary_path.parent / "metrics.jsonl").read_text().splitlines()]
    non_finite = sorted({k for r in rows for k, v in r.items() if v is None or (isinstance(v, float) and not math.isfinite(v))})
    step_times = [r["step_time"] for r in rows if isinstance(r.get("step_time"), (int, float))]
    grpo[variant] = {
        "steps": s["global_step"], "train_runtime_s": s["train_runtime_s"], "wall_s": s["wall_s"],
        "s_per_step": round(s["train_runtime_s"] / max(1, s["global_step"]), 2),
        "s_per_step_after_first": round(sum(step_times[1:]) / len(step_times[1:]), 2) if len(step_times) > 1 else None,
        "stage_wall_s": last.get(f"grpo_{variant}", {}).get("wall_s"), "rc": last.get(f"grpo_{variant}", {}).get("rc"),
        "l_ref": s["l_ref"], "non_finite_metrics": non_finite,
        "loss": [r.get("loss") for r in rows], "reward": [r.get("reward") for r in rows],
        "mean_length": [r.get("completions/mean_length") for r in rows], "accuracy": [r.get("accuracy") for r in rows],
    }
report["grpo"] = grpo

evals = {}
for name in ("eval", "eval_bf16"):
    data = read_json(runs / name / "eval.json")
    if not data:
        continue
    for r in data["results"]:
        o, lat = r["overall"], r.get("latency") or {}
        evals[r["name"]] = {"device": r.get("device"), "dtype": r.get("dtype"), "engine": r.get("engine"),
                            "calculator": r.get("calculator"), "n": o["n"], "correctness": o["correctness"],
                            "helpfulness": o["helpfulness"], "total_tokens": o["total_tokens"],
                            "reasoning_tokens": o["reasoning_tokens"], "reply_tokens": o["reply_tokens"],
                            "truncated_rate": o["truncated_rate"], "ttft_ms_p50": lat.get("ttft_ms_p50"),
                            "e2e_ms_p50": lat.get("e2e_ms_p50"), "stage_wall_s": last.get(name, {}).get("wall_s"),
                            "command": data["meta"]["command"]}
report["eval"] = evals

# Notes written by hand after a run (fixes, the CPU comparison, what was not checked) survive a re-run of this stage:
# in the JSON, the keys this stage does not generate; in the Markdown, everything from NOTES_MARK on.
NOTES_MARK = "<!-- notes: kept when the report stage runs again -->"
old_json = read_json(out_json) or {}
GENERATED = {"device", "gpu_count", "cpu_count", "python", "versions", "cuda", "stages", "nvidia_smi", "cuda_tests", "rft",
             "grpo", "eval"}
report.update({k: v for k, v in old_json.items() if k not in GENERATED})
out_json.parent.mkdir(parents=True, exist_ok=True)
out_json.write_text(json.dumps(report, indent=2) + "\n")


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


md = ["# GPU check: training and eval on CUDA (bf16)", "",
      f"Device: {report['device']} ({report.get('nvidia_smi', '')}), {report['cpu_count']} CPU cores, CUDA {report['cuda']}, "
      f"Python {report['python']}; " + ", ".join(f"{k} {v}" for k, v in report["versions"].items() if v) + ".", "",
      "Generated by `bash benchmarks/gpu_check.sh` (stage `report`) from the runs' own logs and summaries.", "",
      "## Stages", "", "| stage | rc | wall s | command |", "|---|---|---|---|"]
md += [f"| {t['stage']} | {t['rc']} | {t['wall_s']} | `{t['command']}` |" for t in times]
md += ["", f"CUDA tests (`tests/models/test_cuda.py`): {report['cuda_tests']['summary']}", ""]
if "rft" in report:
    r = report["rft"]
    md += ["## Stage 1 (RFT, `configs/tiny/rft.yaml`, bf16 on the GPU)", "",
           f"- timings (s): {r['timings_s']}", f"- acceptance (C ∧ H): {pct(r['acceptance_rate'])}, {r['sft_targets']} SFT targets",
           f"- SFT: {r['max_steps']} steps, train_runtime {r['train_runtime_s']} s, {r['train_steps_per_second']} steps/s; "
           f"{r['logged_losses']} logged losses, all finite: {r['all_losses_finite']} (first {r['first_loss']}, last {r['last_loss']})", ""]
if grpo:
    md += ["## Stage 2 (GRPO, transformers rollouts, bf16 on the GPU)", "",
           "| variant | steps | train s | s/step | s/step after step 1 | L_ref | mean length per step | loss per step | non-finite metrics |",
           "|---|---|---|---|---|---|---|---|---|"]
    for v, g in grpo.items():
        lengths = ", ".join("-" if x is None else f"{x:.0f}" for x in g["mean_length"])
        losses = ", ".join("-" if x is None else f"{x:.3g}" for x in g["loss"])
        md.append(f"| {v} | {g['steps']} | {g['train_runtime_s']} | {g['s_per_step']} | {g['s_per_step_after_first']} | "
                  f"{g['l_ref']:.1f} | {lengths} | {losses} | {', '.join(g['non_finite_metrics']) or 'none'} |")
    md.append("")
if evals:
    md += ["## Eval (test split, greedy, calculator, transformers engine on the GPU)", "",
           "| model | device | dtype | n | correct | helpful | total tok | reasoning tok | reply tok | truncated | TTFT p50 ms | e2e p50 ms | stage wall s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, e in evals.items():
        md.append(f"| {name} | {e['device']} | {e['dtype']} | {e['n']} | {pct(e['correctness'])} | {pct(e['helpfulness'])} | "
                  f"{e['total_tokens']} | {e['reasoning_tokens']} | {e['reply_tokens']} | {pct(e['truncated_rate'])} | "
                  f"{e['ttft_ms_p50']} | {e['e2e_ms_p50']} | {e['stage_wall_s']} |")
    md.append("")
old_md = out_md.read_text() if out_md.is_file() else ""
notes = old_md[old_md.index(NOTES_MARK):] if NOTES_MARK in old_md else ""
out_md.write_text("\n".join(md) + "\n" + (f"\n{notes}" if notes else ""))
print(out_md.read_text())
EOF
}

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(test rft grpo eval eval_bf16 report)
status=0
for s in "${stages[@]}"; do
    case $s in
        test | data | rft | grpo | eval | eval_bf16 | rollouts | report) "run_$s" || status=1 ;;
        *) echo "unknown stage $s (test data rft grpo eval eval_bf16 rollouts report)" >&2; exit 2 ;;
    esac
done
exit $status
