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


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
}
