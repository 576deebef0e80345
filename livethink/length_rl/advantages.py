"""Group-relative advantage estimators (verl ``core_algos`` style), chosen by name from ``ADVANTAGE_ESTIMATORS``.

Rows are laid out group after group: ``rewards[g*G:(g+1)*G]`` are the G completions of prompt g, the order TRL's
``RepeatSampler`` produces. The standard deviation is the sample one (n−1), as TRL's ``nanstd``; the GRPO trainer
computes the same numbers inline (``scale_rewards="group"`` / ``"none"``), which the unit tests pin.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

EPS = 1e-4  # TRL's ε in (r − μ)/(σ + ε)


def grouped(values: torch.Tensor, group_size: int) -> torch.Tensor:
    """(N,) -> (N/G, G); fails loudly when N is not a multiple of G."""
    if values.dim() != 1 or values.numel() % group_size:
        raise ValueError(f"expected a flat tensor whose length is a multiple of {group_size}, got {tuple(values.shape)}")
    return values.view(-1, group_size)


def group_stats(rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group mean and sample std, each (N/G,)."""
    g = grouped(rewards, group_size)
    std = g.std(dim=1, unbiased=True) if group_size > 1 else torch.zeros(g.size(0), dtype=g.dtype, device=g.device)
    return g.mean(dim=1), std


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """GRPO: A_i = (r_i − μ_g)/(σ_g + ε) with μ_g, σ_g over the group of r_i."""
    mean, std = group_stats(rewards, group_size)
    return (rewards - mean.repeat_interleave(group_size)) / (std.repeat_interleave(group_size) + eps)


def dr_grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """Dr. GRPO: A_i = r_i − μ_g (no std scaling)."""
    mean, _ = group_stats(rewards, group_size)
    return rewards - mean.repeat_interleave(group_size)


def zero_std_groups(rewards: torch.Tensor, group_size: int, atol: float = 1e-6) -> torch.Tensor:
    """(N/G,) bool: groups whose rewards are all equal (no GRPO signal)."""
    g = grouped(rewards, group_size)
    return (g.max(dim=1).values - g.min(dim=1).values).abs() <= atol


def batch_std_advantages(rewards: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """Group mean, batch std (DLER's batch-wise normalisation; TRL's ``scale_rewards="batch"``):
    A_i = (r_i − μ_g)/(σ_batch + ε), σ_batch the sample std over the whole batch."""
    mean, _ = group_stats(rewards, group_size)
    std = rewards.std(unbiased=True) if rewards.numel() > 1 else torch.zeros((), dtype=rewards.dtype)
    return (rewards - mean.repeat_interleave(group_size)) / (std + eps)


def normalize_then_sum(rewards: torch.Tensor, weights: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """GDPO (arXiv 2601.05242; TRL's ``multi_objective_aggregation="normalize_then_sum"``): each reward column is
    normalised within its group, (r_k − μ_g,k)/(σ_g,k + ε), the columns are summed with ``weights``, and the sum is
    normalised over the batch: A = (s − mean(s))/(std(s) + ε). ``rewards`` (N, F), ``weights`` (F,)."""
    n, f = rewards.shape
    g = rewards.view(-1, group_size, f)
    std = g.std(dim=1, unbiased=True, keepdim=True) if group_size > 1 else torch.zeros_like(g[:, :1])
    per_column = ((g - g.mean(dim=1, keepdim=True)) / (std + eps)).view(n, f)
    summed = (per_column * weights.unsqueeze(0)).sum(dim=1)
    return (summed - summed.mean()) / (summed.std(unbiased=True) + eps)


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "batch_std": batch_std_advantages,
}
