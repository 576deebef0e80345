"""``cosine``: the cosine length-scaled correctness reward (arXiv 2502.03373, App. C.1; TRL's
``get_cosine_scaled_reward``, ``length_rewards.cosine_scaled``) in place of C, plus w_h·H: a correct reply earns
1.0 (short) down to 0.5 (at L_max), a wrong one −0.5 (long) down to −1.0 (short). Defaults are TRL's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from livethink.length_rl import length_rewards
from livethink.length_rl.length_rewards import COSINE_DEFAULTS
from livethink.length_rl.registry import Variant, register_variant
from livethink.length_rl.rewards import (
    CORRECTNESS,
    HELPFULNESS,
    RewardKit,
    lengths_of,
    register_reward_column,
)

COSINE = "cosine"


@dataclass
class CosineOptions:
    cosine_max_len: int = field(default=0, metadata={"help": "L_max of the cosine (tokens); 0 = max_completion_length"})
    cosine_min_value_wrong: float = field(default=COSINE_DEFAULTS["min_value_wrong"])
    cosine_max_value_wrong: float = field(default=COSINE_DEFAULTS["max_value_wrong"])
    cosine_min_value_correct: float = field(default=COSINE_DEFAULTS["min_value_correct"])
    cosine_max_value_correct: float = field(default=COSINE_DEFAULTS["max_value_correct"])


@register_reward_column(COSINE)
def cosine_column(kit: RewardKit, options: dict[str, Any]):
    opts = options["cosine"]

    def cosine(completions, completion_ids=None, **columns):
        vs = kit.verdicts(completions, completion_ids, columns)
        correct = [bool(c) for c in kit.quality(vs)[0].tolist()]  # a cut reply is wrong
        return kit.unless_error(vs, length_rewards.cosine_scaled(correct, lengths_of(completion_ids), **opts))

    return cosine


@register_variant("cosine")
class Cosine(Variant):
    summary = "cosine length-scaled correctness (TRL) + w_h·H, GRPO"
    rewards = (CORRECTNESS, HELPFULNESS, COSINE)
    options = CosineOptions

    def reward_weights(self) -> list[float]:
        return [0.0, self.cfg.w_helpful, 1.0]  # C is inside the cosine column; correctness is only logged

    def reward_options(self) -> dict[str, Any]:
        cfg = self.cfg
        return {"cosine": {"max_len": cfg.cosine_max_len or cfg.max_completion_length,
                           "min_value_wrong": cfg.cosine_min_value_wrong, "max_value_wrong": cfg.cosine_max_value_wrong,
                           "min_value_correct": cfg.cosine_min_value_correct,
                           "max_value_correct": cfg.cosine_max_value_correct}}

    def validate(self) -> None:
        cfg = self.cfg
        if not cfg.cosine_min_value_correct <= cfg.cosine_max_value_correct:
            raise ValueError("cosine_min_value_correct must be <= cosine_max_value_correct")
        if not cfg.cosine_min_value_wrong <= cfg.cosine_max_value_wrong:
            raise ValueError("cosine_min_value_wrong must be <= cosine_max_value_wrong")
