"""`livethink grpo --config configs/tiny/grpo_<variant>.yaml [--key value ...]`: stage 2, TRL-style.

The YAML and the command line fill one `GRPOVariantConfig` (TRL's `GRPOConfig` + the variants' options) through
`TrlParser`; a YAML's ``base: grpo_base.yaml`` is loaded first (``config_files``), the file's own keys override it,
and command-line values override both. `--dry-run` validates a config without loading weights or a
GPU (used for `configs/prod/`). Several GPUs:
`accelerate launch --config_file configs/accelerate/zero3.yaml -m livethink.length_rl.cli --config …`.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


def dry_run(cfg) -> dict[str, Any]:
    """Check a config without a GPU: variant fields, batch shapes, SIRI schedule, paths, URLs."""
    problems: list[str] = []
    notes: list[str] = []
    spec = cfg.spec
    report: dict[str, Any] = {
        "variant": cfg.variant, "summary": spec.summary, "rewards": dict(zip(spec.rewards, cfg.reward_weights, strict=True)),
        "loss": cfg.loss_type if spec.loss == "grpo" else spec.loss, "model": cfg.model_name_or_path,
        "num_generations": cfg.num_generations, "max_completion_length": cfg.max_completion_length,
        "rollouts": "vllm-" + cfg.vllm_mode if cfg.use_vllm else "transformers",
        "output_dir": cfg.output_dir,
    }
    if cfg.rollout_mode == "decoupled":
        report["rollout_mode"] = {"mode": "decoupled", "max_staleness": cfg.max_staleness,
                                  "importance_sampling": cfg.vllm_importance_sampling_mode}
    if cfg.tail_batching:
        report["tail_batching"] = {"short_tokens": cfg.tail_short_limit(), "overprovision": cfg.tail_overprovision}
    extra, variant_notes = spec.describe()
    report.update(extra)
    notes += variant_notes
    if cfg.use_vllm and cfg.vllm_mode == "server":
        url = cfg.vllm_server_base_url
        if url and not (urlparse(url).scheme in ("http", "https") and urlparse(url).netloc):
            problems.append(f"vllm_server_base_url: not an http(s) URL: {url!r}")
    if cfg.judge == "llm" and urlparse(cfg.judge_base_url).scheme not in ("http", "https"):
        problems.append(f"judge_base_url: not an http(s) URL: {cfg.judge_base_url!r}")
    model = Path(cfg.model_name_or_path)
    if model.is_dir():
        from livethink.models.loading import CheckpointError, inspect_checkpoint, params_of_checkpoint

        try:
            info = inspect_checkpoint(model)
            counts = params_of_checkpoint(model)
            report["model_check"] = {"model_type": info.model_type, "has_tokenizer": info.has_tokenizer,
                                     "total_params": counts.total, "active_params": counts.active}
            if not info.has_tokenizer:
                problems.append(f"{model}: no tokenizer files")
        except CheckpointError as exc:
            problems.append(str(exc))
    else:
        notes.append(f"model {model} is not on this machine (the RFT output, needed at run time)")
    data = Path(cfg.data_dir) / f"{cfg.train_split}.jsonl"
    if not data.is_file():
        notes.append(f"data {data} is not on this machine (needed at run time)")
    local = cfg.per_device_train_batch_size * cfg.steps_per_generation
    report["groups_per_process_per_generation"] = local // cfg.num_generations
    report["problems"], report["notes"] = problems, notes
    report["ok"] = not problems
    return report


def _requested_hardware(config: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """bf16 / use_cpu as the YAML (and command line) ask, before a GPU-less dry run overrides them."""
    values = {k: config.get(k) for k in ("bf16", "use_cpu")}
    for key in ("bf16", "use_cpu"):
        if f"--{key}" in argv and argv.index(f"--{key}") + 1 < len(argv):
            values[key] = argv[argv.index(f"--{key}") + 1].lower() in ("1", "true", "yes")
    return {"bf16": bool(values.get("bf16")), "use_cpu": bool(values.get("use_cpu")),
            "not_checked_here": "hardware-dependent options (bf16, GPU count) are checked when training starts"}


def _pop_config(argv: list[str]) -> dict[str, Any]:
    """Remove ``--config PATH`` from ``argv``; the file's mapping over its ``base`` chain ({} without one)."""
    from livethink.length_rl.config_files import load_config_file

    if "--config" not in argv:
        return {}
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise ValueError("--config needs a path")
    path = argv[i + 1]
    del argv[i:i + 2]
    return load_config_file(path)


def parse_config(argv: list[str], config: dict[str, Any]):
    """One ``GRPOVariantConfig`` from the YAML mapping ``config`` and the command line (which overrides it)."""
    import os

    from trl import TrlParser

    from livethink.length_rl.config import GRPOVariantConfig

    config = dict(config)
    env = config.pop("env", None) or {}
    if not isinstance(env, dict):
        raise ValueError("env: must be a mapping of environment variables")
    for key, value in env.items():
        os.environ[key] = str(value)
    parser = TrlParser((GRPOVariantConfig,))
    unknown = parser.set_defaults_with_config(**config)
    if unknown:
        raise ValueError(f"unknown options in the config file: {' '.join(unknown[::2])}")
    (cfg,) = parser.parse_args_into_dataclasses(args=argv)
    return cfg


def _pop_flag(argv: list[str], flag: str) -> bool:
    if flag in argv:
        argv.remove(flag)
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    dry = _pop_flag(argv, "--dry-run")
    hardware: dict[str, Any] = {}
    try:
        config = _pop_config(argv)
        if dry:
            hardware = _requested_hardware(config, argv)
            import torch

            if not torch.cuda.is_available():  # TrainingArguments refuses bf16 without a GPU: check the rest on CPU
                argv += ["--use_cpu", "true", "--bf16", "false"]
        cfg = parse_config(argv, config)
    except (ValueError, TypeError) as exc:
        print(f"livethink grpo: invalid config: {exc}", file=sys.stderr)
        return 2
    if dry:
        report = dry_run(cfg) | hardware
        print(json.dumps(report, indent=2, default=str))
        return 0 if report["ok"] else 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from livethink.length_rl.script import run_grpo

    final = run_grpo(cfg)
    print(f"GRPO ({cfg.variant}) policy saved to {final}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
