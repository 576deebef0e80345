"""``dot``: Dynamic Outlier Truncation (arXiv 2601.03969; the math in ``length_rl/dot.py``).

In all-correct groups, completions longer than T = floor(mean + α·std) by at least m tokens are truncated to T,
re-scored (a cut reply scores 0) before the advantages are computed, and masked after T. Optional predictive
dynamic sampling oversamples prompts and keeps the informative groups. A judge failure (NaN C) is left out of its
group's success rate and T, and is not truncated (``dot.truncated_lengths``'s ``scored``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from livethink.length_rl import dot
from livethink.length_rl.registry import Variant, register_variant
from livethink.length_rl.rewards import CORRECTNESS, HELPFULNESS, Scored


@dataclass
class DotOptions:
    dot_alpha: float = field(default=3.0)
    dot_margin: float = field(default=32.0, metadata={"help": "tokens, or a fraction of L when in (0, 1)"})
    dot_success_threshold: float = field(default=1.0)
    dot_dynamic_sampling: bool = field(default=False, metadata={"help": "predictive dynamic sampling (oversample + zero-std filter)"})
    dot_ds_window: int = field(default=20)
    dot_ds_min_factor: float = field(default=1.2)
    dot_ds_max_factor: float = field(default=5.0)
    dot_ds_initial_factor: float = field(default=1.5)


@register_variant("dot")
class Dot(Variant):
    summary = "DOT: truncate length outliers of all-correct groups, mask and re-score"
    rewards = (CORRECTNESS, HELPFULNESS)
    options = DotOptions
    masks_tokens = True

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.new_lengths: torch.Tensor | None = None  # local lengths after truncation, set per generation

    def reward_weights(self) -> list[float]:
        return [self.cfg.w_correct, self.cfg.w_helpful]

    def validate(self) -> None:
        if self.cfg.dot_ds_min_factor > self.cfg.dot_ds_max_factor:
            raise ValueError("dot_ds_min_factor must be <= dot_ds_max_factor")

    def oversample_factor(self, trainer: Any) -> float | None:
        cfg = self.cfg
        if not cfg.dot_dynamic_sampling:
            return None
        return dot.oversample_factor(trainer.pass_rates, cfg.dot_ds_window, cfg.dot_ds_min_factor,
                                     cfg.dot_ds_max_factor, cfg.dot_ds_initial_factor)

    def postprocess_rewards(self, trainer: Any, scored: Scored) -> torch.Tensor:
        if not trainer.model.training:
            return scored.rewards
        cfg, g, rewards = self.cfg, trainer.num_generations, scored.rewards
        all_lengths = scored.lengths
        judged = rewards[:, [trainer.column(CORRECTNESS), trainer.column(HELPFULNESS)]].cpu()
        judged_ok = ~torch.isnan(judged).any(dim=1)  # a judge failure: out of its group's statistics
        correct = torch.nan_to_num(judged[:, 0])
        new_lengths = dot.truncated_lengths(all_lengths, correct, g, cfg.dot_alpha, cfg.dot_margin,
                                            cfg.dot_success_threshold, judged_ok)
        cut = new_lengths < all_lengths
        selected = dot.full_correct_groups(correct, g, cfg.dot_success_threshold, judged_ok)
        trainer.log_metric("dot/truncated_share", cut.float().mean())
        trainer.log_metric("dot/full_correct_group_share", selected.float().mean())
        if selected.any():
            trainer.log_metric("dot/mean_threshold",
                               dot.truncation_thresholds(all_lengths, g, cfg.dot_alpha, judged_ok)[selected].float().mean())
        local = trainer.local_slice(len(scored.completion_ids))
        self.new_lengths = new_lengths[local]
        if not cut.any():
            return rewards
        new_ids = [ids[:n] for ids, n in zip(scored.completion_ids, self.new_lengths.tolist(), strict=True)]
        texts = trainer.processing_class.batch_decode(new_ids, skip_special_tokens=True)
        new_completions = [
            ([{"role": "assistant", "content": t}] if isinstance(c, list) else t) if was_cut else c
            for c, t, was_cut in zip(scored.completions, texts, cut[local].tolist(), strict=True)
        ]
        rescored = trainer.score(scored.inputs, scored.prompts, new_completions, new_ids)
        trainer.log_metric("dot/rescored_accuracy",
                           torch.nanmean(rescored[cut.to(rescored.device), trainer.column(CORRECTNESS)]))
        return torch.where(cut.to(rewards.device).unsqueeze(1), rescored, rewards)

    def postprocess_batch(self, trainer: Any, output: dict[str, Any], n_rows: int) -> dict[str, Any]:
        if self.new_lengths is not None:
            output["completion_mask"] = dot.truncation_mask(output["completion_mask"], self.new_lengths)
            self.new_lengths = None
        return output
