"""The stage-2 variants, chosen by name: which reward columns each trains on and which mechanism shortens replies.

Every variant keeps the quality signals C (correctness) and H (helpfulness) of the rubric/LLM judge; they differ
in where the length pressure comes from:

| variant          | reward columns (weights)                                  | length mechanism                      |
|------------------|-----------------------------------------------------------|---------------------------------------|
| baseline         | correctness (w_c), helpfulness (w_h), brevity (w_l)       | LiveThinking band around L_ref        |
| siri             | correctness (w_c), helpfulness (w_h)                      | cap L(t) on generation (cut = 0)      |
| dot              | correctness (w_c), helpfulness (w_h)                      | outlier truncation in all-correct groups |
| drpo             | correctness, helpfulness (labels of the DRPO loss)        | length-weighted positives in the loss |
| length_penalty   | correctness (0, logged), helpfulness (w_h), length_penalty (1) | C − α·L/L_max                     |
"""

from __future__ import annotations

from dataclasses import dataclass

CORRECTNESS = "correctness"
HELPFULNESS = "helpfulness"
BREVITY = "brevity"
LENGTH_PENALTY = "length_penalty"


@dataclass(frozen=True)
class VariantSpec:
    name: str
    rewards: tuple[str, ...]
    loss: str = "grpo"  # "grpo" (TRL's clipped surrogate) or "drpo"
    length_cap_schedule: bool = False  # SIRI
    outlier_truncation: bool = False  # DOT
    summary: str = ""

    def reward_weights(self, w_correct: float, w_helpful: float, w_length: float) -> list[float]:
        """TRL ``reward_weights`` for this variant's columns."""
        table = {CORRECTNESS: w_correct, HELPFULNESS: w_helpful, BREVITY: w_length, LENGTH_PENALTY: 1.0}
        if LENGTH_PENALTY in self.rewards:  # C is inside the length_penalty column; correctness is only logged
            table[CORRECTNESS] = 0.0
        return [table[name] for name in self.rewards]


VARIANTS: dict[str, VariantSpec] = {
    "baseline": VariantSpec("baseline", (CORRECTNESS, HELPFULNESS, BREVITY),
                            summary="LiveThinking: w_c·C + w_h·H + w_l·r_len (band around L_ref), GRPO"),
    "siri": VariantSpec("siri", (CORRECTNESS, HELPFULNESS), length_cap_schedule=True,
                        summary="SIRI: interleaved compression/expansion of the generation cap; cut replies score 0"),
    "dot": VariantSpec("dot", (CORRECTNESS, HELPFULNESS), outlier_truncation=True,
                       summary="DOT: truncate length outliers of all-correct groups, mask and re-score"),
    "drpo": VariantSpec("drpo", (CORRECTNESS, HELPFULNESS), loss="drpo",
                        summary="DRPO: length-weighted positives vs log-sum-exp negatives, KL-to-old penalty"),
    "length_penalty": VariantSpec("length_penalty", (CORRECTNESS, HELPFULNESS, LENGTH_PENALTY),
                                  summary="naive baseline: C − α·L/L_max (+ w_h·H), GRPO"),
}


def get_variant(name: str) -> VariantSpec:
    if name not in VARIANTS:
        raise ValueError(f"unknown variant {name!r}: choose one of {', '.join(VARIANTS)}")
    return VARIANTS[name]
