"""`livethink grpo --config configs/tiny/grpo_<variant>.yaml [--key value ...]`: stage 2, TRL-style.

The YAML and the command line fill one `GRPOVariantConfig` (TRL's `GRPOConfig` + the variants' options) through
``livethink.config_sections``; a YAML's ``base: grpo_base.yaml`` is loaded first (``config_files``), the file's own
keys override it, and command-line values override both. `--dry-run` checks everything the run checks before its
first expensive step, without loading weights or a GPU (used for `configs/prod/`). Several GPUs:
`accelerate launch --config_file configs/accelerate/zero3.yaml -m livethink.length_rl.cli --config …`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


def dry_run(cfg) -> dict[str, Any]:
    """Check a config without a GPU: variant fields, batch shapes, judge, parameter patterns, the checkpoint (and
    the colocated-vLLM rule for an MoE on CPU), paths, URLs."""
    from livethink.run_check import Findings, check_path

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
    report["judge"] = cfg.judge_settings.describe()
    from livethink.rft_distill.checks import pattern_problems

    problems += pattern_problems(cfg.trainable_parameters)
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
            elif cfg.budget_forcing:
                problems += thinking_problems(model)
        except CheckpointError as exc:
            problems.append(str(exc))
        from livethink.length_rl.vllm_sync import check_cpu_colocate

        try:  # colocated vLLM on CPU keeps an MoE model's experts and routers as loaded: refuse training them
            check_cpu_colocate(cfg, str(model))
        except ValueError as exc:
            problems.append(f"trainable_parameters: {exc}")
    found = Findings(problems, notes=notes)
    check_path(found, "model_name_or_path", cfg.model_name_or_path, what="the RFT student")
    check_path(found, "data_dir", cfg.data_dir, what="the task data",
               generated=f"the run generates LiveShop there (data_seed {cfg.data_seed})")
    data = Path(cfg.data_dir)
    if data.is_dir() and any(data.iterdir()) and not (data / f"{cfg.train_split}.jsonl").is_file():
        problems.append(f"data_dir: {data} has no {cfg.train_split}.jsonl (train_split: {cfg.train_split}), and "
                        "is not empty (an empty or missing one gets LiveShop)")
    local = cfg.per_device_train_batch_size * cfg.steps_per_generation
    report["groups_per_process_per_generation"] = local // cfg.num_generations
    return found.into(report)


def thinking_problems(model: Path) -> list[str]:
    """Budget forcing cuts thinking: a student whose checkpoint does not think cannot be trained with it."""
    from livethink.data.reasoning_format import resolve
    from livethink.length_rl.budget_rollouts import not_thinking_problem
    from livethink.models.loading import load_tokenizer_for

    problem = not_thinking_problem(*resolve("auto", load_tokenizer_for(model), model), model)
    return [problem] if problem else []


def parse_config(argv: list[str], config: dict[str, Any]):
    """One ``GRPOVariantConfig`` from the YAML mapping ``config`` and the command line (which overrides it)."""
    from livethink.config_sections import parse_config as parse
    from livethink.length_rl.config import SECTIONS, GRPOVariantConfig

    return parse(GRPOVariantConfig, list(argv), config, SECTIONS, prog="livethink grpo")


def main(argv: list[str] | None = None) -> int:
    from livethink.config_sections import load_training_config, pop_config, requested_hardware, training_main

    hardware: dict[str, Any] = {}

    def load(args: list[str], dry: bool):
        from livethink.length_rl.config import SECTIONS, GRPOVariantConfig

        cpu_override = False
        if dry:
            hardware.update(requested_hardware(pop_config(list(args)), args))
            import torch

            cpu_override = not torch.cuda.is_available()  # TrainingArguments refuses bf16 without a GPU
        return load_training_config(GRPOVariantConfig, args, SECTIONS, cpu_override=cpu_override,
                                    prog="livethink grpo")

    def run(cfg) -> int:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from livethink.length_rl.script import run_grpo

        final = run_grpo(cfg)
        print(f"GRPO ({cfg.variant}) policy saved to {final}")
        return 0

    def check(cfg) -> dict[str, Any]:
        from livethink.run_check import Findings, check_hardware

        found = Findings()
        check_hardware(found, hardware)
        return found.into(dry_run(cfg) | hardware)

    return training_main("grpo", sys.argv[1:] if argv is None else argv, load, check, run)


if __name__ == "__main__":
    raise SystemExit(main())
