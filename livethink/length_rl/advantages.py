"""Group-relative advantage estimators (verl ``core_algos`` style), chosen by name from ``ADVANTAGE_ESTIMATORS``.

Rows are laid out group after group: ``rewards[g*G:(g+1)*G]`` are the G completions of prompt g, the order TRL's
``RepeatSampler`` produces. The standard deviation is the sample one (n−1), as TRL's ``nanstd``; the GRPO trainer
computes the same numbers inline (``scale_rewards="group"`` / ``"none"``), which the unit tests pin.

A judge failure (a NaN verdict) is left out of its group's statistics (``docs/rewards.md``): ``leave_out_failures``
makes the whole row NaN when a judge column is NaN, even where a length column still has a value, so TRL treats it
as unscorable (left out of its nanmean / nanstd, advantage 0); the estimators here do the same (NaN-aware).
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


def nanstd(values: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """Sample std (n−1) over the non-NaN entries (NaN with fewer than two), as TRL's ``nanstd``."""
    valid = ~torch.isnan(values)
    count = valid.sum(dim=dim, keepdim=True)
    mean = torch.nansum(values, dim=dim, keepdim=True) / count
    sq = torch.where(valid, (values - mean) ** 2, torch.zeros_like(values)).sum(dim=dim, keepdim=True)
    std = torch.sqrt(sq / (count - 1))
    return std if keepdim else std.squeeze(dim)


def judge_failures(rewards: torch.Tensor, judge_columns: list[int]) -> torch.Tensor:
    """(N,) bool: rows of the (N, F) rewards with a NaN in any judge column (C, H): the judge failed on them."""
    if not judge_columns:
        return torch.zeros(rewards.size(0), dtype=torch.bool, device=rewards.device)
    return torch.isnan(rewards[:, judge_columns]).any(dim=1)


def leave_out_failures(rewards: torch.Tensor, judge_columns: list[int]) -> torch.Tensor:
    """The (N, F) rewards with every column of a judge failure's row NaN (TRL's "unscorable" row)."""
    failed = judge_failures(rewards, judge_columns)
    return torch.where(failed.unsqueeze(1), torch.full_like(rewards, float("nan")), rewards)


def weighted_rewards(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(N,) Σ_k w_k·r_k over the (N, F) rewards' non-NaN columns (TRL's nansum); NaN for a row that is all NaN."""
    total = (rewards * weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
    return torch.where(torch.isnan(rewards).all(dim=1), torch.full_like(total, float("nan")), total)


def group_stats(rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-group mean and sample std over the non-NaN rewards, each (N/G,)."""
    g = grouped(rewards, group_size)
    std = nanstd(g, dim=1) if group_size > 1 else torch.zeros(g.size(0), dtype=g.dtype, device=g.device)
    return torch.nanmean(g, dim=1), std


def grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """GRPO: A_i = (r_i − μ_g)/(σ_g + ε) with μ_g, σ_g over the group of r_i (its NaN rows left out; their A = 0,
    as TRL's)."""
    mean, std = group_stats(rewards, group_size)
    adv = (rewards - mean.repeat_interleave(group_size)) / (std.repeat_interleave(group_size) + eps)
    return torch.nan_to_num(adv, nan=0.0)


def dr_grpo_advantages(rewards: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """Dr. GRPO: A_i = r_i − μ_g (no std scaling; NaN rows left out, A = 0)."""
    mean, _ = group_stats(rewards, group_size)
    return torch.nan_to_num(rewards - mean.repeat_interleave(group_size), nan=0.0)


def zero_std_groups(rewards: torch.Tensor, group_size: int, atol: float = 1e-6) -> torch.Tensor:
    """(N/G,) bool: groups whose non-NaN rewards are all equal, or fewer than two (no GRPO signal)."""
    g = grouped(rewards, group_size)
    valid = ~torch.isnan(g)
    high = g.masked_fill(~valid, float("-inf")).max(dim=1).values
    low = g.masked_fill(~valid, float("inf")).min(dim=1).values
    return (valid.sum(dim=1) < 2) | ((high - low).abs() <= atol)


def batch_std_advantages(rewards: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """Group mean, batch std (DLER's batch-wise normalisation; TRL's ``scale_rewards="batch"``):
    A_i = (r_i − μ_g)/(σ_batch + ε), σ_batch the sample std over the whole batch (NaN rows left out, A = 0)."""
    mean, _ = group_stats(rewards, group_size)
    std = nanstd(rewards) if rewards.numel() > 1 else torch.zeros((), dtype=rewards.dtype)
    return torch.nan_to_num((rewards - mean.repeat_interleave(group_size)) / (std + eps), nan=0.0)


def normalize_then_sum(rewards: torch.Tensor, weights: torch.Tensor, group_size: int, eps: float = EPS) -> torch.Tensor:
    """GDPO (arXiv 2601.05242; TRL's ``multi_objective_aggregation="normalize_then_sum"``): each reward column is
    normalised within its group, (r_k − μ_g,k)/(σ_g,k + ε), the columns are summed with ``weights``, and the sum is
    normalised over the batch: A = (s − mean(s))/(std(s) + ε). ``rewards`` (N, F), ``weights`` (F,). NaN entries are
    left out of the statistics, as TRL's; an all-NaN row gets A = 0."""
    n, f = rewards.shape
    g = rewards.view(-1, group_size, f)
    std = nanstd(g, dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(g[:, :1])
    per_column = ((g - torch.nanmean(g, dim=1, keepdim=True)) / (std + eps)).view(n, f)
    summed = (per_column * weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
    summed = torch.where(torch.isnan(rewards).all(dim=1), torch.full_like(summed, float("nan")), summed)
    return torch.nan_to_num((summed - torch.nanmean(summed)) / (nanstd(summed) + eps), nan=0.0)


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "batch_std": batch_std_advantages,
}
