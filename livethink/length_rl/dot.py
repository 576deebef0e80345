"""DOT: Dynamic Outlier Truncation and Predictive Dynamic Sampling (arXiv 2601.03969, https://arxiv.org/abs/2601.03969).

Per rollout group (rows laid out group after group, G per prompt), following ``U-rara/DOT``
``projects/dot/length_truncation.py``:

1. only groups whose success rate ≥ ``success_threshold`` (1.0: every completion correct) are touched;
2. T(q) = floor(mean(L) + α·std(L)) over all G lengths, sample std (n−1), α = 3;
3. completion i is truncated to T(q) iff L_i − T(q) ≥ m (m = 32 tokens; 0 < m < 1 means the fraction m·L_i,
   at least 16 tokens);
4. tokens at positions ≥ T(q) leave the loss (mask), and the truncated text is re-scored by the reward.

A completion the judge failed on (``scored`` False: a NaN verdict) is left out of its group's statistics: the
success rate and T(q) are those of the group's scored completions, and it is never truncated itself.

Predictive dynamic sampling (``DynamicSamplingStats`` in the same repo): with the pass rates (share of groups
whose reward std > 0) of the last 20 steps, the next step samples
factor = clip((1/mean)·(1 + std), 1.2, 5.0) times the prompts (population std; no history: 1.5; mean 0: max).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from livethink.length_rl.advantages import grouped

MIN_FRACTION_MARGIN = 16


def scored_or_all(values: torch.Tensor, scored: torch.Tensor | None) -> torch.Tensor:
    """(N,) bool: ``scored``, or all True when None."""
    return torch.ones_like(values, dtype=torch.bool) if scored is None else scored.bool().to(values.device)


def full_correct_groups(correct: torch.Tensor, group_size: int, success_threshold: float = 1.0,
                        scored: torch.Tensor | None = None) -> torch.Tensor:
    """(N/G,) bool: groups whose share of correct completions among the scored ones is ≥ ``success_threshold``
    (False for a group with none scored)."""
    keep = grouped(scored_or_all(correct, scored), group_size)
    hits = (grouped(correct.float(), group_size) * keep).sum(dim=1)
    count = keep.sum(dim=1)
    return (count > 0) & (hits >= (success_threshold - 1e-9) * count)


def truncation_thresholds(lengths: torch.Tensor, group_size: int, alpha: float = 3.0,
                          scored: torch.Tensor | None = None) -> torch.Tensor:
    """(N/G,) long: T(q) = floor(mean(L) + α·std(L)) over the group's scored lengths, sample std (0 with fewer
    than two)."""
    keep = grouped(scored_or_all(lengths, scored), group_size)
    g = grouped(lengths.double(), group_size)
    count = keep.sum(dim=1).clamp(min=1).double()
    mean = (g * keep).sum(dim=1) / count
    var = (((g - mean.unsqueeze(1)) ** 2) * keep).sum(dim=1) / (count - 1).clamp(min=1)
    std = torch.where(keep.sum(dim=1) > 1, var.sqrt(), torch.zeros_like(var))
    return torch.floor(mean + alpha * std).long()


def effective_margin(lengths: torch.Tensor, margin: float) -> torch.Tensor:
    """m per completion: ``margin`` tokens, or max(int(margin·L), 16) when 0 < margin < 1."""
    if 0 < margin < 1:
        return torch.clamp((lengths.double() * margin).long(), min=MIN_FRACTION_MARGIN)
    return torch.full_like(lengths, int(margin), dtype=torch.long)


def truncated_lengths(
    lengths: torch.Tensor,
    correct: torch.Tensor,
    group_size: int,
    alpha: float = 3.0,
    margin: float = 32,
    success_threshold: float = 1.0,
    scored: torch.Tensor | None = None,
) -> torch.Tensor:
    """(N,) long: each completion's length after DOT (unchanged unless truncated to its group's T; an unscored one
    is never truncated)."""
    lengths = lengths.long()
    selected = full_correct_groups(correct, group_size, success_threshold, scored).repeat_interleave(group_size)
    threshold = truncation_thresholds(lengths, group_size, alpha, scored).repeat_interleave(group_size)
    cut = selected & (lengths - threshold >= effective_margin(lengths, margin)) & (threshold < lengths)
    cut &= scored_or_all(lengths, scored)
    return torch.where(cut, threshold, lengths)


def truncation_mask(completion_mask: torch.Tensor, new_lengths: torch.Tensor) -> torch.Tensor:
    """``completion_mask`` with positions ≥ the new length zeroed (B, T)."""
    positions = torch.arange(completion_mask.size(1), device=completion_mask.device).unsqueeze(0)
    return completion_mask * (positions < new_lengths.to(completion_mask.device).unsqueeze(1)).to(completion_mask.dtype)


def oversample_factor(
    pass_rates: Sequence[float],
    window: int = 20,
    min_factor: float = 1.2,
    max_factor: float = 5.0,
    initial: float = 1.5,
) -> float:
    """clip((1/mean pass rate)·(1 + std pass rate), min, max) over the last ``window`` steps."""
    recent = list(pass_rates)[-window:]
    if not recent:
        return initial
    mean = sum(recent) / len(recent)
    if mean <= 0:
        return max_factor
    std = math.sqrt(sum((p - mean) ** 2 for p in recent) / len(recent))
    return max(min_factor, min((1.0 / mean) * (1.0 + std), max_factor))
