"""``band`` (alias ``baseline``): LiveThinking's multi-objective reward r = w_c·C + w_h·H + w_l·r_len, GRPO.

r_len is the band reward around L_ref (``length_rewards.band``; arXiv 2510.07685), optionally gated on quality
(``length_gate``, ``length_rewards.gated``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from livethink.length_rl import length_rewards
from livethink.length_rl.length_rewards import LENGTH_GATES
from livethink.length_rl.registry import Variant, register_variant
from livethink.length_rl.rewards import (
    CORRECTNESS,
    HELPFULNESS,
    RewardKit,
    lengths_of,
    register_reward_column,
)

BREVITY = "brevity"


@dataclass
class BandOptions:
    w_length: float = field(default=0.5, metadata={"help": "band, gdpo: weight of the band reward r_len"})
    band_lambda_low: float = field(default=0.2)
    band_lambda_up: float = field(default=0.4)
    band_epsilon: float | None = field(default=None, metadata={"help": "tokens; None = 0.5·L_ref"})
    length_gate: str = field(default="none", metadata={
        "help": "band, gdpo: where r_len counts: none (every reply, LiveThinking as written) | correct | "
                "correct_helpful (only good replies) | solved_group (every reply of a group with a good one)"})


@register_reward_column(BREVITY)
def brevity_column(kit: RewardKit, options: dict[str, Any]):
    band = options.get("band") or {}

    def brevity(completions, completion_ids=None, **columns):
        if kit.ctx.l_ref is None:
            raise RuntimeError("L_ref is not set: the trainer measures it on the first rollouts (or set l_ref)")
        lengths = torch.tensor(lengths_of(completion_ids))
        r_len = length_rewards.band(lengths, kit.ctx.l_ref, band.get("lambda_low", 0.2), band.get("lambda_up", 0.4),
                                    band.get("epsilon"))
        gate = band.get("gate", "none")
        if gate == "none":
            return r_len.tolist()
        vs = kit.verdicts(completions, completion_ids, columns)
        return kit.unless_error(vs, length_rewards.gated(r_len, *kit.quality(vs), gate, kit.ctx.group_size).tolist())

    return brevity


def band_reward_options(cfg: Any) -> dict[str, Any]:
    return {"band": {"lambda_low": cfg.band_lambda_low, "lambda_up": cfg.band_lambda_up, "epsilon": cfg.band_epsilon,
                     "gate": cfg.length_gate}}


def check_length_gate(cfg: Any) -> None:
    if cfg.length_gate not in LENGTH_GATES:
        raise ValueError(f"length_gate must be one of {', '.join(LENGTH_GATES)}, got {cfg.length_gate!r}")


@register_variant("band", aliases=("baseline",))
class Band(Variant):
    summary = "LiveThinking: w_c·C + w_h·H + w_l·r_len (band around L_ref), GRPO"
    rewards = (CORRECTNESS, HELPFULNESS, BREVITY)
    options = BandOptions

    def reward_weights(self) -> list[float]:
        return [self.cfg.w_correct, self.cfg.w_helpful, self.cfg.w_length]

    def reward_options(self) -> dict[str, Any]:
        return band_reward_options(self.cfg)

    def validate(self) -> None:
        check_length_gate(self.cfg)
