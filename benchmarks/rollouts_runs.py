"""The rollout benchmark's runs: each mode's ``livethink grpo`` command, the vLLM server process beside the trainer
for the decoupled mode, and one run's record read back from its ``metrics.jsonl`` (pure: ``run_record``).

How the idle shares are measured (per run, over the training loop, ``elapsed_s`` of its last metrics record):

- the rollout engine's busy time is ``rollout/engine_busy_s``: the wall time of every generation call on the vLLM
  engine (``livethink.length_rl.rollout_timing``; weight reloads not counted). Engine idle share = 1 − busy / loop;
- the trainer's idle time: with a colocated engine (``sync``, ``tail``) the trainer waits for every generation call,
  so it is the same engine busy time; with a server beside the trainer (``decoupled``) it is the sum of
  ``decoupled/wait_s`` (the trainer blocked on the prefetcher: a prefetch not ready yet, or a batch generated on
  demand). Trainer idle share = idle / loop.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from compression_runs import ROOT, read_metrics, run

MODES = ("sync", "tail", "decoupled", "both")
MAX_STALENESS = 1  # the decoupled modes' bound (optimizer steps); sync and tail train on-policy: bound 0
MODE_FLAGS = {"sync": (), "tail": ("--tail_batching", "true"),
              "decoupled": ("--rollout_mode", "decoupled", "--max_staleness", str(MAX_STALENESS)),
              "both": ("--tail_batching", "true", "--rollout_mode", "decoupled", "--max_staleness", str(MAX_STALENESS))}
SERVER_MODES = ("decoupled", "both")


def staleness_bound(mode: str) -> int:
    return MAX_STALENESS if mode in SERVER_MODES else 0


def unsupported(mode: str, config: str) -> str | None:
    """The config error that refuses ``mode`` for ``config`` (None when it validates): the trainer's own check."""
    if mode not in SERVER_MODES:
        return None
    if importlib.util.find_spec("vllm") is None:
        return "the rollout server is vLLM, and vllm is not installed here"
    from livethink.length_rl.config import GRPOVariantConfig

    flags = dict(zip(MODE_FLAGS[mode][::2], MODE_FLAGS[mode][1::2], strict=True))
    try:
        GRPOVariantConfig(output_dir="/tmp/livethink-rollouts-check", report_to="none", use_cpu=True, bf16=False,
                          use_vllm=True, vllm_mode="server", vllm_importance_sampling_correction=True, calculator=False,
                          tail_batching=flags.get("--tail_batching") == "true", rollout_mode=flags["--rollout_mode"],
                          max_staleness=int(flags["--max_staleness"]))
    except ValueError as exc:
        return str(exc)
    return None


def grpo_cmd(args, mode: str, out: Path, seed: int, server_url: str | None = None) -> list[str]:
    """One mode's training command: the band config, the benchmark's budget, calculator off in every mode (the
    decoupled modes refuse it), vLLM colocated or transformers ``generate`` (``sync``, ``tail``, by
    ``--rollout-engine``) or vLLM on the server beside the trainer; ``--device cuda`` trains on the GPU in bf16."""
    cmd = [sys.executable, "-m", "livethink.length_rl.cli", "--config", str(ROOT / args.config),
           "--output_dir", str(out), "--max_steps", str(args.steps), "--seed", str(seed), "--logging_steps", "1",
           "--save_steps", str(max(1, args.steps)), "--calculator", "false"]
    if not args.smollm2_run:
        cmd += ["--model_name_or_path", str(args.rft), "--data_dir", str(args.data_dir),
                "--num_generations", str(args.generations),
                "--per_device_train_batch_size", str(args.prompts_per_step * args.generations),
                "--max_completion_length", str(args.max_completion_length)]
        if args.n_prompts:
            cmd += ["--n_prompts", str(args.n_prompts)]
    if args.device == "cuda":
        cmd += ["--use_cpu", "false", "--bf16", "true"]
    if mode in SERVER_MODES:
        cmd += ["--use_vllm", "true", "--vllm_mode", "server", "--vllm_server_base_url", str(server_url),
                "--vllm_importance_sampling_correction", "true"]
    elif args.smollm2_run:  # SmolLM2 keeps its config's rollouts (transformers: LoRA)
        pass
    elif args.rollout_engine == "transformers":
        cmd += ["--use_vllm", "false"]
    else:
        cmd += ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_max_model_length", str(args.max_model_len)]
    if "--tail_batching" in MODE_FLAGS[mode]:
        cmd += ["--tail_short_tokens", str(args.tail_short_tokens)]
    return cmd + list(MODE_FLAGS[mode]) + args.extra


def server_argv(model: Path, port: int, max_model_len: int) -> list[str]:
    """The rollout server of the decoupled modes (as in docs/length_rl.md and its slow test)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--dtype", "bfloat16", "--max-model-len", str(max_model_len), "--enforce-eager",
            "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1"]


def train(args, mode: str, out: Path, seed: int, env: dict[str, str]) -> float:
    """Train one run (with its rollout server for the decoupled modes, started and stopped here); returns the wall
    time, server start-up included. A finished run is reused with ``--reuse``."""
    wall_file = out / "train_wall_s"
    if args.reuse and wall_file.is_file() and (out / "final" / "config.json").is_file():
        return float(wall_file.read_text())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    start = time.perf_counter()
    if mode in SERVER_MODES:
        from livethink.server_process import ServerProcess, free_port

        port = free_port()
        server = ServerProcess(server_argv(args.model, port, args.max_model_len), port=port,
                               log_path=out / "vllm_server.log", ready_path="/health", cwd=ROOT, name="vLLM",
                               env=dict(env, VLLM_SERVER_DEV_MODE="1"), startup_timeout_s=600)
        try:
            run(grpo_cmd(args, mode, out, seed, server.url), out / "train.log", env)
        finally:
            server.close()
    else:
        run(grpo_cmd(args, mode, out, seed), out / "train.log", env)
    wall = time.perf_counter() - start
    wall_file.write_text(f"{wall:.1f}\n")
    return wall


def _sum(rows: list[dict[str, Any]], key: str) -> float:
    return float(sum(r[key] for r in rows if isinstance(r.get(key), int | float)))


def _values(rows: list[dict[str, Any]], key: str, when: str | None = None, is_: float | None = None) -> list[float]:
    return [float(r[key]) for r in rows if isinstance(r.get(key), int | float)
            and (when is None or r.get(when) == is_)]


def run_record(mode: str, seed: int, wall_s: float, rows: list[dict[str, Any]], completions_per_step: int
               ) -> dict[str, Any]:
    """One run's timing, idle shares, lengths and staleness from its metrics records (one per step)."""
    if not rows:
        raise ValueError(f"{mode} seed {seed}: no metrics records")
    last = rows[-1]
    loop = float(last.get("elapsed_s") or 0.0)
    busy = last.get("rollout/engine_busy_s")
    steps = int(last["step"])
    trainer_idle = _sum(rows, "decoupled/wait_s") if mode in SERVER_MODES else busy
    staleness = max(_values(rows, "decoupled/staleness"), default=0.0)
    record: dict[str, Any] = {
        "mode": mode, "seed": seed, "steps": steps, "train_wall_s": round(wall_s, 1), "loop_s": round(loop, 1),
        "completions": steps * completions_per_step,
        "completions_per_s": round(steps * completions_per_step / loop, 3) if loop else None,
        "engine_busy_s": busy,
        "engine_idle_share": round(1 - busy / loop, 4) if busy is not None and loop else None,
        "trainer_idle_share": round(trainer_idle / loop, 4) if trainer_idle is not None and loop else None,
        "step_lengths": [round(v, 1) for v in _values(rows, "completions/mean_length")],
        "staleness_max": int(staleness), "staleness_bound": staleness_bound(mode),
        "staleness_ok": staleness <= staleness_bound(mode),
    }
    if "--tail_batching" in MODE_FLAGS[mode]:
        record["tail"] = {
            "deferred_prompts": int(_sum(rows, "tail/deferred")),
            "long_rounds": int(_sum(rows, "tail/long_round")),
            "kept_lengths": [round(v, 1) for v in _values(rows, "tail/kept_length_mean", "tail/long_round", 0)],
            "deferred_lengths": [round(v, 1) for v in _values(rows, "tail/long_length_mean", "tail/long_round", 1)],
            "queue_wait_max": int(max(_values(rows, "tail/staleness_max"), default=0.0)),
            "shortfall": int(_sum(rows, "tail/shortfall")), "wasted_tokens": int(_sum(rows, "tail/wasted_tokens"))}
    if mode in SERVER_MODES:
        record["decoupled"] = {"prefetch_hits": int(_sum(rows, "decoupled/hit")),
                               "trainer_wait_s": round(_sum(rows, "decoupled/wait_s"), 1)}
    return record


def train_and_record(args, mode: str, seed: int, env: dict[str, str]) -> tuple[dict[str, Any], Path]:
    """Train one run and read its record; returns it with the run's final model."""
    out = args.runs / mode / f"seed{seed}"
    wall = train(args, mode, out, seed, env)
    return run_record(mode, seed, wall, read_metrics(out), args.completions_per_step), out / "final"


def bench_env(threads: int) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), PYTHONUNBUFFERED="1",
                PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
