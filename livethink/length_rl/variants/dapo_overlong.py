"""``dapo_overlong``: correctness and helpfulness plus DAPO's soft overlong punishment (arXiv 2503.14476, Eq. 13),
TRL's ``get_soft_overlong_punishment`` (``length_rewards.soft_overlong``): 0 up to L_max − L_cache, linear down to
−1 at L_max, −1 beyond. It never rewards brevity below L_max − L_cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from livethink.length_rl import length_rewards
from livethink.length_rl.registry import Variant, register_variant
from livethink.length_rl.rewards import (
    CORRECTNESS,
    HELPFULNESS,
    RewardKit,
    lengths_of,
    register_reward_column,
)

OVERLONG = "overlong"


@dataclass
class DapoOverlongOptions:
    dapo_overlong_l_max: int = field(default=0, metadata={"help": "L_max of the punishment (tokens); 0 = max_completion_length"})
    dapo_overlong_cache: int = field(default=0, metadata={"help": "L_cache (tokens): the punished zone below L_max; 0 = 0.2·L_max (DAPO's 4096 of 20480)"})
    dapo_overlong_weight: float = field(default=1.0)

    @property
    def overlong_l_max(self) -> int:
        return self.dapo_overlong_l_max or self.max_completion_length

    @property
    def overlong_cache(self) -> int:
        return self.dapo_overlong_cache or max(1, round(0.2 * self.overlong_l_max))


@register_reward_column(OVERLONG)
def overlong_column(kit: RewardKit, options: dict[str, Any]):
    opts = options["overlong"]

    def overlong(completions, completion_ids=None, **columns):
        return length_rewards.soft_overlong(lengths_of(completion_ids), opts["l_max"], opts["cache"])

    return overlong


@register_variant("dapo_overlong")
class DapoOverlong(Variant):
    summary = "DAPO soft overlong punishment (TRL) + C + H, GRPO"
    rewards = (CORRECTNESS, HELPFULNESS, OVERLONG)
    options = DapoOverlongOptions

    def reward_weights(self) -> list[float]:
        return [self.cfg.w_correct, self.cfg.w_helpful, self.cfg.dapo_overlong_weight]

    def reward_options(self) -> dict[str, Any]:
        return {"overlong": {"l_max": self.cfg.overlong_l_max, "cache": self.cfg.overlong_cache}}

    def validate(self) -> None:
        cfg = self.cfg
        if not 0 < cfg.overlong_cache <= cfg.overlong_l_max:
            raise ValueError(f"dapo_overlong_cache ({cfg.overlong_cache}) must be in (0, L_max = {cfg.overlong_l_max}]")
        if cfg.overlong_l_max > cfg.max_completion_length:
            raise ValueError(f"dapo_overlong_l_max ({cfg.overlong_l_max}) exceeds max_completion_length "
                             f"({cfg.max_completion_length})")
