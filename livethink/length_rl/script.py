"""Stage 2 as a library call: dataset, reward columns, trainer, train (resuming), save ``<output_dir>/final``."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from datasets import Dataset

from livethink.length_rl.config import GRPOVariantConfig
from livethink.length_rl.rewards import RewardContext, make_reward_funcs

logger = logging.getLogger(__name__)


def build_dataset(cfg: GRPOVariantConfig) -> Dataset:
    """GRPO rows: ``task_to_row(task)`` + conversational ``prompt`` (LiveShop is generated if ``data_dir`` is empty)."""
    from livethink.data.io import read_tasks, task_to_row
    from livethink.data.prompt import build_messages
    from livethink.rft_distill.pipeline import ensure_data

    data_dir = ensure_data(cfg.data_dir, cfg.data_seed)
    tasks = read_tasks(Path(data_dir) / f"{cfg.train_split}.jsonl")
    if cfg.n_prompts:
        tasks = tasks[: cfg.n_prompts]
    return Dataset.from_list([task_to_row(t) | {"prompt": build_messages(t)} for t in tasks])


def judge_config(cfg: GRPOVariantConfig) -> dict:
    return cfg.judge_settings.judge_config()


def build_trainer(cfg: GRPOVariantConfig, dataset: Dataset | None = None):
    from livethink.length_rl.trainer import LengthRLTrainer
    from livethink.models.loading import load_tokenizer_for

    if cfg.use_vllm and cfg.use_cpu:
        from livethink.engines import set_kv_cache_env

        set_kv_cache_env(cfg.vllm_cpu_kvcache_gb)  # the operator's own (checked) value wins
    if cfg.use_vllm and cfg.vllm_mode == "colocate":
        from livethink.engines import set_master_port

        set_master_port()
    tokenizer = load_tokenizer_for(cfg.model_name_or_path)
    tokenizer.padding_side = "left"
    ctx = RewardContext(l_ref=cfg.l_ref or None, zero_reward_if_cut=cfg.zero_reward_if_cut)
    funcs = make_reward_funcs(cfg.spec.rewards, ctx, judge_config(cfg), **cfg.spec.reward_options())
    peft_config = None
    if cfg.use_peft:
        from livethink.models.lora import to_peft_config

        peft_config = to_peft_config(cfg.lora_settings())
    return LengthRLTrainer(model=cfg.model_name_or_path, reward_funcs=funcs, args=cfg,
                           train_dataset=dataset if dataset is not None else build_dataset(cfg),
                           processing_class=tokenizer, reward_context=ctx, peft_config=peft_config)


def run_grpo(cfg: GRPOVariantConfig) -> Path:
    """Train (resuming from the newest checkpoint in ``output_dir``) and save the policy to ``final/`` (merged
    weights) and, with ``use_peft``, its LoRA adapter to ``adapter/``."""
    from transformers.trainer_utils import get_last_checkpoint

    from livethink.data.reasoning_format import saved_format
    from livethink.models.export import save_trained

    out = Path(cfg.output_dir)
    final = out / "final"
    if (final / "config.json").is_file():
        logger.info("reusing the trained policy in %s", final)
        return final
    start = time.perf_counter()
    trainer = build_trainer(cfg)
    last = get_last_checkpoint(str(out)) if out.is_dir() else None
    if last:
        logger.info("resuming from %s", last)
    result = trainer.train(resume_from_checkpoint=last)
    saved = save_trained(trainer, out, base=cfg.model_name_or_path)  # final/, and adapter/ with use_peft
    if trainer.accelerator.is_main_process:
        fmt = saved_format(cfg.model_name_or_path)
        if fmt is not None:  # the policy keeps the reasoning format stage 1 taught it
            for path in saved.values():
                fmt.save(path)
        summary = {"variant": cfg.variant, "final_dir": str(final),
                   "adapter_dir": str(saved["adapter"]) if "adapter" in saved else None,
                   "global_step": trainer.state.global_step,
                   "train_runtime_s": round(result.metrics.get("train_runtime", 0.0), 1),
                   "wall_s": round(time.perf_counter() - start, 1), "resumed_from": last,
                   "l_ref": trainer.reward_context.l_ref}
        (out / "grpo_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return final
