"""``drpo``: Decoupled Reward Policy Optimization (arXiv 2510.04474; the math in ``length_rl/drpo.py``).

Correct (and helpful) completions are positives weighted by softmax((1 − L/C)/λ) in their group, against a
log-sum-exp of the negatives, with a KL-to-old penalty. The loss replaces TRL's clipped surrogate, so TRL's loss
options (``ignored_trl_options``) must stay at their defaults.

``drpo_weight_by`` chooses L: the completion's length (DRPO's own), or ``answer_point``, the thinking tokens before
the reference answer is first stated (``livethink.rewards.answer_point``). The second prefers, among a group's
positives, the one whose answer a cut at a small cap would keep; the server cuts thinking at the deadline's cap, so
it rewards what AnytimeReasoner's forced replies at several cuts reward (arXiv 2505.13438) without generating them.

Rollouts from a behaviour policy (vLLM; one step stale in ``rollout_mode: decoupled``): TRL's sequence-level
importance ratio (``inputs["importance_sampling_ratio"]``, present whenever ``use_vllm`` and
``vllm_importance_sampling_correction``) is handed to the loss as its importance weights (``drpo.drpo_loss``'s
``is_weights``). TRL's token-level modes give one ratio per token, which DRPO's per-completion score cannot take:
that combination is refused at config time. A judge failure (NaN verdict) is left out of its group (``scored``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from livethink.length_rl import drpo
from livethink.length_rl.registry import Variant, register_variant
from livethink.length_rl.rewards import CORRECTNESS, HELPFULNESS, Scored
from livethink.rewards.adapters import tasks_from_columns
from livethink.rewards.answer_point import answer_tokens
from livethink.rewards.brevity import count_tokens
from livethink.rewards.parse import split_completion

POSITIVES = ("correct", "correct_helpful")
WEIGHT_BY = ("length", "answer_point")
SEQUENCE_IS_MODES = ("sequence_mask", "sequence_truncate")  # TRL's IS modes with one ratio per completion


@dataclass
class DrpoOptions:
    drpo_lambda: float = field(default=0.1)
    drpo_tau: float = field(default=10.0)
    drpo_beta: float = field(default=1000.0)
    drpo_delta: float = field(default=1e-4)
    drpo_max_len: int = field(default=0, metadata={"help": "C of r_l = 1 − L/C; 0 = max_completion_length"})
    drpo_positive: str = field(default="correct_helpful", metadata={"help": "correct | correct_helpful"})
    drpo_weight_by: str = field(default="length", metadata={
        "help": "L of r_l: length (the completion's tokens) | answer_point (its thinking's tokens before the "
                "reference answer's first mention)"})

    @property
    def drpo_length_cap(self) -> int:
        return self.drpo_max_len or self.max_completion_length


@register_variant("drpo")
class Drpo(Variant):
    summary = "DRPO: length-weighted positives vs log-sum-exp negatives, KL-to-old penalty"
    rewards = (CORRECTNESS, HELPFULNESS)
    loss = "drpo"
    options = DrpoOptions
    ignored_trl_options = ("loss_type", "epsilon", "beta", "importance_sampling_level", "top_entropy_quantile",
                           "entropy_coef", "off_policy_mask_threshold", "delta")

    def reward_weights(self) -> list[float]:
        return [self.cfg.w_correct, self.cfg.w_helpful]

    def validate(self) -> None:
        cfg = self.cfg
        if cfg.drpo_positive not in POSITIVES:
            raise ValueError(f"drpo_positive must be 'correct' or 'correct_helpful', got {cfg.drpo_positive!r}")
        if cfg.drpo_weight_by not in WEIGHT_BY:
            raise ValueError(f"drpo_weight_by must be 'length' or 'answer_point', got {cfg.drpo_weight_by!r}")
        if cfg.per_device_train_batch_size % cfg.num_generations:
            raise ValueError(f"drpo needs whole groups in each micro-batch: per_device_train_batch_size "
                             f"({cfg.per_device_train_batch_size}) must be a multiple of num_generations ({cfg.num_generations})")
        mode = getattr(cfg, "vllm_importance_sampling_mode", "sequence_mask")
        corrected = getattr(cfg, "use_vllm", False) and getattr(cfg, "vllm_importance_sampling_correction", False)
        if corrected and mode not in SEQUENCE_IS_MODES:
            raise ValueError(f"vllm_importance_sampling_mode: drpo scores whole completions and takes one importance "
                             f"weight per completion, got {mode!r}: use {' or '.join(SEQUENCE_IS_MODES)} (TRL's "
                             f"default is sequence_mask), or vllm_importance_sampling_correction: false without "
                             f"rollout_mode: decoupled")

    def describe(self) -> tuple[dict[str, Any], list[str]]:
        cfg = self.cfg
        weighted_by = ("completion tokens" if cfg.drpo_weight_by == "length"
                       else "thinking tokens before the reference answer's first mention")
        return {"positive_weights": f"softmax((1 - L/{cfg.drpo_length_cap})/{cfg.drpo_lambda}), L = {weighted_by}"}, []

    def setup(self, trainer: Any) -> None:
        self.fmt = None
        if self.cfg.drpo_weight_by == "answer_point":
            from livethink.data.reasoning_format import resolve

            self.fmt, why = resolve("auto", trainer.text_tokenizer, self.cfg.model_name_or_path)
            if not self.fmt.thinks:
                raise ValueError(f"drpo_weight_by: answer_point counts thinking tokens, and "
                                 f"{self.cfg.model_name_or_path} does not think (reasoning format "
                                 f"{self.fmt.describe()}: {why}); use drpo_weight_by: length")
            self.count_tokens = partial(count_tokens, tokenizer=trainer.text_tokenizer)
        self.answer_tokens: torch.Tensor | None = None

    def postprocess_rewards(self, trainer: Any, scored: Scored) -> torch.Tensor:
        if self.fmt is not None:  # this process's rows, which postprocess_batch hands to the loss
            columns = {key: [row[key] for row in scored.inputs] for key in scored.inputs[0]}
            tasks = tasks_from_columns(len(scored.completions), columns)
            self.answer_tokens = torch.tensor([
                answer_tokens(task, split_completion(completion, self.fmt)[0], self.count_tokens)
                for task, completion in zip(tasks, scored.completions, strict=True)], dtype=torch.float32)
            trainer.log_metric("drpo/answer_tokens", float(self.answer_tokens.mean()))
        return scored.rewards

    def postprocess_batch(self, trainer: Any, output: dict[str, Any], n_rows: int) -> dict[str, Any]:
        rewards = trainer.final_rewards
        columns = [trainer.column(CORRECTNESS)] + ([trainer.column(HELPFULNESS)]
                                                   if self.cfg.drpo_positive == "correct_helpful" else [])
        judged = rewards[:, columns]
        scored = ~torch.isnan(judged).any(dim=1)  # a judge failure is neither positive nor negative
        positive = (torch.nan_to_num(judged) > 0.5).all(dim=1) & scored
        device = trainer.accelerator.device
        local = trainer.local_slice(n_rows)
        output["drpo_positive"], output["drpo_scored"] = positive[local].to(device), scored[local].to(device)
        if self.answer_tokens is not None:
            if len(self.answer_tokens) != n_rows:
                raise RuntimeError(f"drpo: {len(self.answer_tokens)} answer points for {n_rows} rows")
            output["drpo_weight_lengths"] = self.answer_tokens.to(device)
        return output

    def compute_loss(self, trainer: Any, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        cfg = self.cfg
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        per_token_logps, aux_loss = trainer.per_token_logps(
            model, torch.cat([prompt_ids, completion_ids], dim=1), torch.cat([prompt_mask, completion_mask], dim=1),
            completion_ids.size(1))
        old = inputs.get("old_per_token_logps")
        old = per_token_logps.detach() if old is None else old
        is_weights = inputs.get("importance_sampling_ratio")  # TRL's ρ = π_old/μ per completion (vLLM rollouts)
        out = drpo.drpo_loss(per_token_logps, old, mask, inputs["drpo_positive"], trainer.num_generations,
                             cfg.drpo_length_cap, cfg.drpo_lambda, cfg.drpo_tau, cfg.drpo_beta, cfg.drpo_delta,
                             inputs.get("drpo_weight_lengths"), is_weights, inputs.get("drpo_scored"))
        accumulation = trainer.current_gradient_accumulation_steps if trainer.model.training else 1.0
        loss = out.loss / accumulation
        if trainer.aux_loss_enabled:
            loss = loss + trainer.router_aux_loss_coef * aux_loss / accumulation
        gather = trainer.accelerator.gather
        trainer.log_metric("drpo/objective", gather(out.objective).mean())
        trainer.log_metric("kl", gather(out.kl).mean())
        trainer.log_metric("drpo/weight_entropy", gather(out.weight_entropy.to(out.kl.device)).mean())
        trainer.log_metric("drpo/mixed_group_share", out.mixed_groups / max(1, len(mask) // trainer.num_generations))
        trainer.log_metric("drpo/kl_over_delta", float(out.kl > cfg.drpo_delta))  # the trust region pressing
        if is_weights is not None:
            trainer.log_metric("drpo/is_masked_share", gather((is_weights == 0).float().mean()).mean())
        return loss
