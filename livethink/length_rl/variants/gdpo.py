"""``gdpo``: our multi-objective reward (C, H, the band reward r_len) with GDPO's per-reward normalisation
(arXiv 2601.05242): TRL's ``multi_objective_aggregation="normalize_then_sum"`` normalises each column within its
group before the weighted sum, so no column drowns the others (``advantages.normalize_then_sum``). Uses the band
variant's options (``w_length``, ``band_*``, ``length_gate``)."""

from __future__ import annotations

from typing import Any

from livethink.length_rl.registry import Variant, register_variant
from livethink.length_rl.rewards import CORRECTNESS, HELPFULNESS
from livethink.length_rl.variants.band import BREVITY, band_reward_options, check_length_gate


@register_variant("gdpo")
class Gdpo(Variant):
    summary = "GDPO: C, H and the band reward normalised per column within the group, then summed (TRL normalize_then_sum)"
    rewards = (CORRECTNESS, HELPFULNESS, BREVITY)
    trl_settings = {"multi_objective_aggregation": "normalize_then_sum"}

    def reward_weights(self) -> list[float]:
        return [self.cfg.w_correct, self.cfg.w_helpful, self.cfg.w_length]

    def reward_options(self) -> dict[str, Any]:
        return band_reward_options(self.cfg)

    def validate(self) -> None:
        check_length_gate(self.cfg)
