"""``dler``: DLER-style length penalty ("DLER: Doing Length pEnalty Right", arXiv 2510.15110).

- a hard length limit: the generation cap is ``dler_length_limit`` while training, and a completion longer than it
  or cut before its EOS scores 0 on every column (truncation penalty, ``length_rewards.hard_limit``);
- batch-wise reward normalisation: TRL's ``scale_rewards="batch"``, A = (r − μ_group)/σ_batch
  (``advantages.batch_std_advantages``);
- dynamic sampling: ``dler_oversample`` times the prompts are rolled out and the groups whose rewards are not all
  equal are kept (the rest fill up, masked out of the loss). It generates that many more rollouts per step than the
  other variants; the optimiser sees the same batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from livethink.length_rl import length_rewards
from livethink.length_rl.registry import Variant, register_variant
from livethink.length_rl.rewards import CORRECTNESS, HELPFULNESS, Scored


@dataclass
class DlerOptions:
    dler_length_limit: int = field(default=0, metadata={"help": "hard length limit while training (tokens); 0 = max_completion_length"})
    dler_oversample: float = field(default=1.5, metadata={"help": "dynamic sampling: prompts rolled out per prompt trained on (1 = off)"})


@register_variant("dler")
class Dler(Variant):
    summary = "DLER: hard length limit (truncated = 0), batch-wise reward normalisation, dynamic sampling"
    rewards = (CORRECTNESS, HELPFULNESS)
    options = DlerOptions
    trl_settings = {"scale_rewards": "batch"}

    @property
    def limit(self) -> int:
        return self.cfg.dler_length_limit or self.cfg.max_completion_length

    def reward_weights(self) -> list[float]:
        return [self.cfg.w_correct, self.cfg.w_helpful]

    def validate(self) -> None:
        cfg = self.cfg
        if not 0 < self.limit <= cfg.max_completion_length:
            raise ValueError(f"dler_length_limit ({cfg.dler_length_limit}) must be in (0, max_completion_length = "
                             f"{cfg.max_completion_length}]")
        if cfg.dler_oversample < 1:
            raise ValueError(f"dler_oversample must be >= 1, got {cfg.dler_oversample}")

    def generation_cap(self, trainer: Any, step: int, training: bool) -> int:
        return self.limit if training else self.cfg.max_completion_length

    def oversample_factor(self, trainer: Any) -> float | None:
        return self.cfg.dler_oversample if self.cfg.dler_oversample > 1 else None

    def postprocess_rewards(self, trainer: Any, scored: Scored) -> torch.Tensor:
        eos = trainer.reward_context.eos_ids
        ended = torch.tensor([bool(ids) and int(ids[-1]) in eos for ids in scored.completion_ids],
                             device=trainer.accelerator.device)
        ended = trainer.accelerator.gather(ended).cpu()
        limited = length_rewards.hard_limit(scored.rewards, scored.lengths.to(scored.rewards.device), ended, self.limit)
        trainer.log_metric("dler/truncated_share", float((~ended | (scored.lengths > self.limit)).float().mean()))
        return limited
