"""``length_penalty``: the naive baseline r = C − α·L/L_max (+ w_h·H), GRPO (``length_rewards.length_penalty``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from livethink.length_rl import length_rewards
from livethink.length_rl.registry import Variant, register_variant
from livethink.length_rl.rewards import (
    CORRECTNESS,
    HELPFULNESS,
    RewardKit,
    lengths_of,
    register_reward_column,
)

LENGTH_PENALTY = "length_penalty"


@dataclass
class LengthPenaltyOptions:
    length_penalty_alpha: float = field(default=0.5)
    length_penalty_l_max: int = field(default=0, metadata={"help": "tokens; 0 = max_completion_length"})

    @property
    def penalty_l_max(self) -> int:
        return self.length_penalty_l_max or self.max_completion_length


@register_reward_column(LENGTH_PENALTY)
def length_penalty_column(kit: RewardKit, options: dict[str, Any]):
    penalty = options.get("penalty") or {}

    def length_penalty(completions, completion_ids=None, **columns):
        vs = kit.verdicts(completions, completion_ids, columns)
        correct, _ = kit.quality(vs)
        lengths = torch.tensor(lengths_of(completion_ids))
        return kit.unless_error(vs, length_rewards.length_penalty(correct, lengths, penalty["l_max"],
                                                                  penalty["alpha"]).tolist())

    return length_penalty


@register_variant("length_penalty")
class LengthPenalty(Variant):
    summary = "naive baseline: C − α·L/L_max (+ w_h·H), GRPO"
    rewards = (CORRECTNESS, HELPFULNESS, LENGTH_PENALTY)
    options = LengthPenaltyOptions

    def reward_weights(self) -> list[float]:
        return [0.0, self.cfg.w_helpful, 1.0]  # C is inside the length_penalty column; correctness is only logged

    def reward_options(self) -> dict[str, Any]:
        return {"penalty": {"alpha": self.cfg.length_penalty_alpha, "l_max": self.cfg.penalty_l_max}}
