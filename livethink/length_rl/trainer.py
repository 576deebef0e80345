"""`LengthRLTrainer`: TRL's `GRPOTrainer` with the stage-2 variant applied at TRL's documented hook points.

- ``_generate_and_score_completions``: SIRI sets the generation cap L(t) for the step; DOT's truncation masks
  are applied to ``completion_mask``; predictive dynamic sampling oversamples prompts and keeps the informative
  groups; DRPO's positive labels are attached.
- ``_calculate_rewards``: L_ref is measured on the first rollouts (if not given); DOT truncates length outliers
  of all-correct groups and re-scores them, *before* advantages (and any zero-std filter) are computed.
- ``_compute_loss``: DRPO replaces TRL's clipped surrogate.
- ``_prepare_inputs``: shuffles whole groups, so a prompt's group never splits across micro-batches (and, with
  ``per_device_train_batch_size × steps_per_generation`` a multiple of G, never across processes).

The math lives in pure functions (``dot``, ``drpo``, ``schedules``); this class only moves tensors around.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import split_pixel_values_by_grid, split_tensor_dict, unsplit_pixel_values_by_grid

from livethink.length_rl import dot, drpo, schedules
from livethink.length_rl.advantages import zero_std_groups
from livethink.length_rl.callbacks import MetricsCallback, PhaseSaveCallback
from livethink.length_rl.config import GRPOVariantConfig
from livethink.length_rl.registry import CORRECTNESS, HELPFULNESS
from livethink.length_rl.rewards import RewardContext

logger = logging.getLogger(__name__)
STATE_FILE = "length_rl_state.json"


def shuffle_groups(batch: dict[str, Any], group_size: int, generator: torch.Generator | None = None) -> dict[str, Any]:
    """Permute whole groups of ``group_size`` consecutive rows (tensors and lists alike; scalars untouched)."""
    n = len(next(v for v in batch.values() if v is not None and (isinstance(v, list) or v.ndim > 0)))
    order = torch.randperm(n // group_size, generator=generator)
    index = (order.unsqueeze(1) * group_size + torch.arange(group_size)).view(-1)
    return select_rows(batch, index, n)


def select_rows(batch: dict[str, Any], index: torch.Tensor, n: int) -> dict[str, Any]:
    """Rows ``index`` of every per-row entry of ``batch`` (entries whose first dimension is ``n``)."""
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0 and value.size(0) == n:
            out[key] = value[index.to(value.device)]
        elif isinstance(value, list) and len(value) == n:
            out[key] = [value[i] for i in index.tolist()]
        else:
            out[key] = value
    return out


@contextmanager
def router_logits_off(model):
    """MoE router logits off during generation: transformers' load-balancing loss breaks on KV-cached decoding
    with an attention mask; TRL asks for the logits explicitly where it needs the aux loss."""
    config = getattr(getattr(model, "module", model), "config", None)
    saved = getattr(config, "output_router_logits", None)
    if saved:
        config.output_router_logits = False
    try:
        yield
    finally:
        if saved:
            config.output_router_logits = saved


class LengthRLTrainer(GRPOTrainer):
    """GRPO with one of the length-compression variants (``args.variant``)."""

    def __init__(self, *args: Any, reward_context: RewardContext | None = None, **kwargs: Any):
        from livethink.length_rl.vllm_calculator import calculator_in_colocated_llm
        from livethink.length_rl.vllm_sync import check_cpu_colocate

        args_in = kwargs.get("args")
        check_cpu_colocate(args_in, kwargs.get("model"))
        with calculator_in_colocated_llm(enabled=bool(getattr(args_in, "calculator", False)
                                                      and getattr(args_in, "use_vllm", False))):
            super().__init__(*args, **kwargs)
        cfg: GRPOVariantConfig = self.args
        self.spec = cfg.spec
        self.reward_context = reward_context or RewardContext()
        self.reward_context.eos_ids = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        self.reward_context.group_size = self.num_generations
        if cfg.l_ref:
            self.reward_context.l_ref = float(cfg.l_ref)
        self.schedule = cfg.siri() if self.spec.length_cap_schedule else None
        self.pass_rates: list[float] = []  # DOT predictive dynamic sampling history
        self._dot_lengths: torch.Tensor | None = None  # local lengths after DOT truncation, set per generation
        self._final_rewards: torch.Tensor | None = None  # global (N, F) rewards of the last generation
        self._extra_rng = torch.Generator().manual_seed(cfg.seed + 7919 * self.accelerator.process_index)
        if cfg.trainable_parameters:
            from livethink.models.freezing import train_only

            logger.info("training only %s", ", ".join(train_only(self.model, cfg.trainable_parameters)))
        if cfg.freeze_router:
            from livethink.models.freezing import freeze_routers

            logger.info("froze %d router parameters", freeze_routers(self.model))
        if cfg.calculator:
            from livethink.calculator.processors import result_char_token_ids, with_calculator
            from livethink.length_rl.vllm_calculator import patch_forced_logprobs

            self._calculator_char_ids = result_char_token_ids(self._tokenizer)
            if self.use_vllm:  # the engine got the processor above, the requests its flag (config)
                patch_forced_logprobs(self.vllm_generation, self._tokenizer, self._calculator_char_ids)
            else:
                with_calculator(self.model, self._tokenizer)
        if self.use_vllm and self.vllm_mode == "colocate" and self.accelerator.device.type == "cpu":
            from livethink.length_rl.vllm_sync import patch_cpu_weight_sync

            patch_cpu_weight_sync(self.vllm_generation)
        self.add_callback(MetricsCallback(self))
        if self.schedule is not None:
            self.add_callback(PhaseSaveCallback(schedules.phase_boundaries(self.schedule)))

    # ----- helpers
    def _column(self, name: str) -> int | None:
        return self.reward_func_names.index(name) if name in self.reward_func_names else None

    def _metric(self, name: str, value: float) -> None:
        self._metrics["train" if self.model.training else "eval"][name].append(float(value))

    def _local_slice(self, n_local: int) -> slice:
        start = self.accelerator.process_index * n_local
        return slice(start, start + n_local)

    def _weighted(self, rewards: torch.Tensor) -> torch.Tensor:
        return (torch.nan_to_num(rewards) * self.reward_weights.to(rewards.device).unsqueeze(0)).sum(dim=1)

    def _set_generation_cap(self, cap: int) -> None:
        if self.use_vllm:
            self.vllm_generation.max_completion_length = cap
        else:
            self.generation_config.max_new_tokens = cap

    # ----- hook: batching (groups stay whole)
    def _prepare_inputs(self, generation_batch):
        if not self.model.training:
            return self._generate_and_score_completions(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            batch = split_pixel_values_by_grid(batch)
            batch = shuffle_groups(batch, self.num_generations)
            self._buffered_inputs = [unsplit_pixel_values_by_grid(b)
                                     for b in split_tensor_dict(batch, self.args.steps_per_generation)]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    # ----- hook: rewards (L_ref, DOT)
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        lengths = torch.tensor([len(ids) for ids in completion_ids_list], device=self.accelerator.device)
        if self.reward_context.l_ref is None:
            self.reward_context.l_ref = float(self.accelerator.gather(lengths.float()).mean())
            logger.info("L_ref measured on the first rollouts: %.1f tokens", self.reward_context.l_ref)
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.spec.outlier_truncation and self.model.training:
            rewards = self._dot_truncate(inputs, prompts, completions, completion_ids_list, lengths, rewards)
        self._final_rewards = rewards
        if (c := self._column(CORRECTNESS)) is not None:
            self._metric("accuracy", torch.nan_to_num(rewards[:, c]).mean())
        if (h := self._column(HELPFULNESS)) is not None:
            self._metric("helpful_rate", torch.nan_to_num(rewards[:, h]).mean())
        if self.reward_context.l_ref is not None:
            self._metric("l_ref", self.reward_context.l_ref)
        return rewards

    def _dot_truncate(self, inputs, prompts, completions, completion_ids_list, lengths, rewards):
        cfg: GRPOVariantConfig = self.args
        g = self.num_generations
        all_lengths = self.accelerator.gather(lengths).cpu()
        correct = torch.nan_to_num(rewards[:, self._column(CORRECTNESS)]).cpu()
        new_lengths = dot.truncated_lengths(all_lengths, correct, g, cfg.dot_alpha, cfg.dot_margin,
                                            cfg.dot_success_threshold)
        cut = new_lengths < all_lengths
        selected = dot.full_correct_groups(correct, g, cfg.dot_success_threshold)
        self._metric("dot/truncated_share", cut.float().mean())
        self._metric("dot/full_correct_group_share", selected.float().mean())
        if selected.any():
            self._metric("dot/mean_threshold", dot.truncation_thresholds(all_lengths, g, cfg.dot_alpha)[selected].float().mean())
        local = self._local_slice(len(completion_ids_list))
        self._dot_lengths = new_lengths[local]
        if not cut.any():
            return rewards
        new_ids = [ids[:n] for ids, n in zip(completion_ids_list, self._dot_lengths.tolist(), strict=True)]
        texts = self.processing_class.batch_decode(new_ids, skip_special_tokens=True)
        local_cut = cut[local].tolist()
        new_completions = [
            ([{"role": "assistant", "content": t}] if isinstance(c, list) else t) if was_cut else c
            for c, t, was_cut in zip(completions, texts, local_cut, strict=True)
        ]
        rescored = super()._calculate_rewards(inputs, prompts, new_completions, new_ids)
        self._metric("dot/rescored_accuracy", torch.nan_to_num(rescored[cut.to(rescored.device), self._column(CORRECTNESS)]).mean())
        return torch.where(cut.to(rewards.device).unsqueeze(1), rescored, rewards)

    # ----- hook: generation + scoring (SIRI cap, DOT masks, dynamic sampling, DRPO labels)
    def _generate_and_score_completions(self, inputs):
        cfg: GRPOVariantConfig = self.args
        training = self.model.training
        if self.schedule is not None:
            cap = schedules.length_cap(cfg.siri_schedule, self.state.global_step, self.schedule) if training \
                else self.schedule.l_max
            self._set_generation_cap(cap)
            if training:
                self._metric("siri/cap", cap)
        n_local = len(inputs)
        dynamic = training and self.spec.outlier_truncation and cfg.dot_dynamic_sampling
        if dynamic:
            inputs = list(inputs) + self._extra_prompts(n_local)
        self._dot_lengths = None
        with router_logits_off(self.model):
            output = super()._generate_and_score_completions(inputs)
        if self._dot_lengths is not None:
            output["completion_mask"] = dot.truncation_mask(output["completion_mask"], self._dot_lengths)
            self._dot_lengths = None
        if cfg.calculator and training:
            self._mask_calculator_tokens(output)
        if dynamic:
            output = self._keep_informative_groups(output, len(inputs), n_local)
        elif self.spec.outlier_truncation or cfg.calculator:
            output["num_items_in_batch"] = self._count_loss_tokens(output)
        if self.spec.loss == "drpo" and not dynamic:  # (dynamic sampling selects the labels with the rows)
            output["drpo_positive"] = self._drpo_labels(len(inputs))
        return output

    def _mask_calculator_tokens(self, output: dict[str, Any]) -> None:
        """Leave the calculator's forced digits out of the loss, as RL does with tool output: the policy did not
        choose them, and their gradient (large where the policy disagreed) would be noise on its own skills."""
        from livethink.calculator.processors import forced_mask

        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        forced = torch.zeros_like(completion_mask)
        for row in range(completion_ids.shape[0]):
            context = output["prompt_ids"][row][output["prompt_mask"][row].bool()].tolist()
            n = int(completion_mask[row].sum())
            forced[row, :n] = torch.tensor(
                forced_mask(self._tokenizer, self._calculator_char_ids, context, completion_ids[row, :n].tolist()),
                dtype=forced.dtype)
        keep = 1 - forced
        output["tool_mask"] = keep if "tool_mask" not in output else output["tool_mask"] * keep
        self._metric("calculator/forced_share", float((forced * completion_mask).sum() / completion_mask.sum().clamp(min=1)))

    def _count_loss_tokens(self, output: dict[str, Any]) -> torch.Tensor:
        mask = output["completion_mask"] if "tool_mask" not in output else output["completion_mask"] * output["tool_mask"]
        return self.accelerator.gather(mask.sum()).sum()

    def _drpo_labels(self, n_local: int) -> torch.Tensor:
        rewards = torch.nan_to_num(self._final_rewards)
        positive = rewards[:, self._column(CORRECTNESS)] > 0.5
        if self.args.drpo_positive == "correct_helpful":
            positive &= rewards[:, self._column(HELPFULNESS)] > 0.5
        return positive[self._local_slice(n_local)].to(self.accelerator.device)

    # ----- DOT predictive dynamic sampling
    def _extra_prompts(self, n_local: int) -> list[dict[str, Any]]:
        """(factor − 1)·n more rows: whole groups of prompts drawn from the train set (same count on every process)."""
        cfg: GRPOVariantConfig = self.args
        factor = dot.oversample_factor(self.pass_rates, cfg.dot_ds_window, cfg.dot_ds_min_factor,
                                       cfg.dot_ds_max_factor, cfg.dot_ds_initial_factor)
        self._metric("dot/oversample_factor", factor)
        n_groups = n_local // self.num_generations
        extra_groups = max(0, round(n_groups * factor) - n_groups)
        picks = torch.randint(len(self.train_dataset), (extra_groups,), generator=self._extra_rng).tolist()
        return [dict(self.train_dataset[i]) for i in picks for _ in range(self.num_generations)]

    def _keep_informative_groups(self, output: dict[str, Any], n_total: int, n_local: int) -> dict[str, Any]:
        """Keep the first n_local/G groups with reward std > 0 (filling with masked-out zero-std groups)."""
        g = self.num_generations
        if self.spec.loss == "drpo":
            output["drpo_positive"] = self._drpo_labels(n_total)
        flat = zero_std_groups(self._weighted(self._final_rewards), g).cpu()
        self.pass_rates.append(float((~flat).float().mean()))
        self._metric("dot/pass_rate", self.pass_rates[-1])
        local_flat = flat[self._local_slice(n_total // g)]
        order = torch.cat([(~local_flat).nonzero().view(-1), local_flat.nonzero().view(-1)])[: n_local // g]
        index = (order.unsqueeze(1) * g + torch.arange(g)).view(-1)
        output = select_rows(output, index, n_total)
        keep = (~local_flat[order]).repeat_interleave(g).to(output["completion_mask"].device)
        output["completion_mask"] = output["completion_mask"] * keep.unsqueeze(1).to(output["completion_mask"].dtype)
        output["num_items_in_batch"] = self._count_loss_tokens(output)
        return output

    # ----- hook: loss (DRPO)
    def _compute_loss(self, model, inputs):
        if self.spec.loss != "drpo":
            return super()._compute_loss(model, inputs)
        cfg: GRPOVariantConfig = self.args
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        per_token_logps, _, aux_loss = self._get_per_token_logps_and_entropies(
            model, torch.cat([prompt_ids, completion_ids], dim=1), torch.cat([prompt_mask, completion_mask], dim=1),
            completion_ids.size(1), compute_aux_loss=self.aux_loss_enabled)
        old = inputs.get("old_per_token_logps")
        old = per_token_logps.detach() if old is None else old
        out = drpo.drpo_loss(per_token_logps, old, mask, inputs["drpo_positive"], self.num_generations,
                             cfg.drpo_length_cap, cfg.drpo_lambda, cfg.drpo_tau, cfg.drpo_beta, cfg.drpo_delta)
        training = self.model.training
        accumulation = self.current_gradient_accumulation_steps if training else 1.0
        loss = out.loss / accumulation
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss / accumulation
        gather = self.accelerator.gather
        self._metric("drpo/objective", gather(out.objective).mean())
        self._metric("kl", gather(out.kl).mean())
        self._metric("drpo/weight_entropy", gather(out.weight_entropy.to(out.kl.device)).mean())
        self._metric("drpo/mixed_group_share", out.mixed_groups / max(1, len(mask) // self.num_generations))
        return loss

    # ----- checkpoints: variant state travels with the trainer state
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
            state = {"l_ref": self.reward_context.l_ref, "pass_rates": self.pass_rates[-self.args.dot_ds_window:]}
            with open(os.path.join(folder, STATE_FILE), "w") as fh:
                json.dump(state, fh)
        if self.schedule is not None:
            boundary = schedules.phase_boundaries(self.schedule).get(self.state.global_step)
            if boundary is not None:
                name, cycle = boundary
                self.save_model(os.path.join(self.args.output_dir, "phases", f"{name}-{cycle}"))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = os.path.join(checkpoint, STATE_FILE) if checkpoint else None
        if path and os.path.exists(path):
            with open(path) as fh:
                state = json.load(fh)
            if state.get("l_ref") is not None and not self.args.l_ref:
                self.reward_context.l_ref = float(state["l_ref"])
            self.pass_rates = list(state.get("pass_rates", []))
