"""DRPO: Decoupled Reward Policy Optimization (arXiv 2510.04474, https://arxiv.org/abs/2510.04474).

Following ``Optimization-AI/DRPO`` ``compute_policy_loss_drpo``; rows come group after group (G per prompt):

- score s_i = mean token log-prob of completion i under the current policy;
- positives (reward 1) weighted ω_i = exp(r_l,i/λ) / Σ_pos exp(r_l/λ), r_l = 1 − L_i/C (a softmax over the
  group's positives; shorter correct completions weigh more; λ → ∞ gives DisCO's uniform weights). L_i is the
  completion's length, or any other per-completion count the caller weights by (``weight_lengths``: the thinking
  tokens before the answer is first stated, for the server's cut);
- per-question term J_q = Σ_pos ω_i·s_i − τ·log Σ_neg exp(s_j/τ) for mixed groups; all-correct and all-wrong
  groups contribute 0 but count in the number of questions Q;
- KL to the old policy: kl = masked mean over all tokens of (log π_old − log π_θ);
- loss = −(Σ_q J_q)/Q + stopgrad(β·[kl − δ]₊)·kl, whose KL gradient is that of (β/2)·[kl − δ]₊².

No clipping, no advantage. Defaults λ = 0.1, τ = 10, β = 1000, δ = 1e-4.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from livethink.length_rl.advantages import grouped
from livethink.length_rl.length_rewards import linear


@dataclass(frozen=True)
class DRPOOutput:
    loss: torch.Tensor
    objective: torch.Tensor  # (Σ_q J_q)/Q, detached
    kl: torch.Tensor  # detached
    weight_entropy: torch.Tensor  # mean entropy of ω over mixed groups (0 when there are none), detached
    mixed_groups: int


def sequence_scores(per_token_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """s_i = Σ_t m·logp / Σ_t m (B,)."""
    mask = mask.to(per_token_logps.dtype)
    return (per_token_logps * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


def positive_weights(
    lengths: torch.Tensor, positive: torch.Tensor, group_size: int, max_len: float, lam: float = 0.1
) -> torch.Tensor:
    """(N,) ω: softmax of r_l/λ over each group's positives; 0 for negatives (and for groups with no positive)."""
    logits = grouped(linear(lengths, max_len).double() / lam, group_size)
    pos = grouped(positive.bool(), group_size)
    logits = logits.masked_fill(~pos, float("-inf"))
    has_pos = pos.any(dim=1, keepdim=True)
    weights = torch.softmax(torch.where(has_pos, logits, torch.zeros_like(logits)), dim=1)
    return torch.where(pos, weights, torch.zeros_like(weights)).view(-1).float()


def mixed_groups(positive: torch.Tensor, group_size: int) -> torch.Tensor:
    """(N/G,) bool: groups with at least one positive and one negative."""
    pos = grouped(positive.bool(), group_size)
    return pos.any(dim=1) & (~pos).any(dim=1)


def weight_entropy(weights: torch.Tensor, positive: torch.Tensor, group_size: int) -> torch.Tensor:
    """Mean over mixed groups of −Σ_pos ω log ω (0 when no group is mixed)."""
    mixed = mixed_groups(positive, group_size)
    if not mixed.any():
        return torch.zeros((), dtype=torch.float32, device=weights.device)
    w = grouped(weights.double(), group_size)[mixed]
    ent = -(w * torch.log(w.clamp(min=1e-300))).sum(dim=1)
    return ent.mean().float()


def question_terms(
    scores: torch.Tensor, weights: torch.Tensor, positive: torch.Tensor, group_size: int, tau: float = 10.0
) -> torch.Tensor:
    """(N/G,) J_q = Σ_pos ω·s − τ·logΣ_neg exp(s/τ) for mixed groups, 0 otherwise (differentiable in s)."""
    s = grouped(scores, group_size)
    w = grouped(weights.to(scores.dtype), group_size)
    pos = grouped(positive.bool(), group_size)
    pos_term = (w * s).sum(dim=1)
    neg_logits = (s / tau).masked_fill(pos, float("-inf"))
    mixed = mixed_groups(positive, group_size)
    safe = torch.where(mixed.unsqueeze(1), neg_logits, torch.zeros_like(neg_logits))
    neg_term = tau * torch.logsumexp(safe, dim=1)
    return torch.where(mixed, pos_term - neg_term, torch.zeros_like(pos_term))


def kl_to_old(per_token_logps: torch.Tensor, old_per_token_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean over all tokens of log π_old − log π_θ."""
    mask = mask.to(per_token_logps.dtype)
    return ((old_per_token_logps - per_token_logps) * mask).sum() / mask.sum().clamp(min=1.0)


def drpo_loss(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    mask: torch.Tensor,
    positive: torch.Tensor,
    group_size: int,
    max_len: float,
    lam: float = 0.1,
    tau: float = 10.0,
    beta: float = 1000.0,
    delta: float = 1e-4,
    weight_lengths: torch.Tensor | None = None,
) -> DRPOOutput:
    """DRPO loss of one batch of whole groups (see module docstring); the positives' L is ``weight_lengths`` when
    given, else the completions' lengths."""
    lengths = mask.sum(dim=1) if weight_lengths is None else weight_lengths.to(mask.device)
    weights = positive_weights(lengths, positive, group_size, max_len, lam)
    scores = sequence_scores(per_token_logps, mask)
    terms = question_terms(scores, weights, positive, group_size, tau)
    objective = terms.sum() / terms.numel()
    kl = kl_to_old(per_token_logps, old_per_token_logps, mask)
    penalty_coef = (beta * torch.clamp(kl - delta, min=0.0)).detach()
    loss = -objective + penalty_coef * kl
    return DRPOOutput(
        loss=loss,
        objective=objective.detach(),
        kl=kl.detach(),
        weight_entropy=weight_entropy(weights, positive, group_size),
        mixed_groups=int(mixed_groups(positive, group_size).sum()),
    )
