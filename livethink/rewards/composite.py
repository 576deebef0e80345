"""LiveThinking's multi-objective reward r = w_c·C + w_h·H + w_l·r_len (arXiv 2510.07685).

As written in the paper the length term is additive and *not* gated on correctness; ``gate_length_on_correct``
makes it count only for correct replies (as Arora & Zanette, L1-Max, DRPO do). The paper gives no weights: the
defaults (1, 1, 0.5) keep a correct-and-helpful reply above any wrong one of ideal length.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CompositeWeights:
    w_c: float = 1.0
    w_h: float = 1.0
    w_l: float = 0.5
    gate_length_on_correct: bool = False


def composite(c: float, h: float, r_len: float, weights: CompositeWeights | None = None) -> float:
    """w_c·C + w_h·H + w_l·r_len (length term zeroed for C = 0 when gated)."""
    w = weights or CompositeWeights()
    length_term = 0.0 if (w.gate_length_on_correct and not c) else w.w_l * r_len
    return w.w_c * c + w.w_h * h + length_term
