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

No clipping, no advantage: the samples are scored under π_θ directly, so there is no π_θ/π_old ratio to clip; the
trust region is the KL penalty, live whenever π_old ≠ π_θ (``num_iterations`` ≥ 2, or more steps per generation
than gradient-accumulation steps). Defaults λ = 0.1, τ = 10, β = 1000, δ = 1e-4.

Two per-completion inputs leave rows out or re-weight them, as verl's ``compute_policy_loss(...,
rollout_is_weights)`` takes its importance weights as an argument:

- ``scored`` (bool): False for a completion the judge failed on (a NaN verdict). It is neither a positive nor a
  negative: the group's ω, its log-sum-exp and its "mixed" flag are those of the group without it (the KL still
  counts its tokens: the judge's failure says nothing about the policy);
- ``is_weights`` ρ_i = π_old(o_i)/μ(o_i), one per completion (TRL's ``importance_sampling_ratio`` in its sequence
  modes, already truncated or masked to 0 by TRL): the completions were sampled from a behaviour policy μ (a vLLM
  engine, one step stale in ``rollout_mode: decoupled``), and DRPO's terms are expectations under π_old. Each term
  is a self-normalised average over the group's positives or negatives, so ρ enters as a self-normalised
  importance weight: ω_i ∝ ρ_i·exp(r_l,i/λ) (log ρ added to the softmax's logits), the negatives' term is
  τ·log(n·Σ_neg ρ_j e^{s_j/τ} / Σ_neg ρ_j) (their log-sum-exp with log ρ̂_j added, ρ̂ = n·ρ/Σ_neg ρ over the n
  negatives with ρ > 0), and the KL is the ρ-weighted token mean Σ_i ρ_i Σ_t m·(log π_old − log π_θ) / Σ_i ρ_i n_i.
  A completion with ρ = 0 (masked by TRL) drops out as an unscored one does, from the KL too. With ρ ≡ 1 every
  number is the unweighted one above.
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


def sequence_is_weights(is_weights: torch.Tensor | None, n: int, device: torch.device | None = None) -> torch.Tensor:
    """(N,) float64 ρ from TRL's sequence-level ratio ((N,) or (N, 1)); ones when None. A token-level ratio (N, T)
    is refused: DRPO scores whole completions."""
    if is_weights is None:
        return torch.ones(n, dtype=torch.float64, device=device)
    if is_weights.dim() == 2 and is_weights.size(1) == 1:
        is_weights = is_weights[:, 0]
    if is_weights.dim() != 1 or is_weights.numel() != n:
        raise ValueError(f"drpo takes one importance weight per completion ((N,) or (N, 1), N = {n}), got "
                         f"{tuple(is_weights.shape)}: use vllm_importance_sampling_mode sequence_mask or sequence_truncate")
    if bool((is_weights < 0).any()) or bool(torch.isnan(is_weights).any()):
        raise ValueError("drpo: importance weights must be >= 0 and not NaN")
    return is_weights.detach().double()


def sample_sets(positive: torch.Tensor, scored: torch.Tensor | None, rho: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(positives, negatives) (N,) bool: scored completions with ρ > 0, split by ``positive``."""
    used = rho > 0 if scored is None else scored.bool().to(rho.device) & (rho > 0)
    pos = positive.bool().to(rho.device)
    return pos & used, ~pos & used


def positive_weights(
    lengths: torch.Tensor, positive: torch.Tensor, group_size: int, max_len: float, lam: float = 0.1,
    rho: torch.Tensor | None = None,
) -> torch.Tensor:
    """(N,) ω: softmax of r_l/λ + log ρ over each group's positives; 0 for the rest (and for groups with no
    positive). ``positive`` must already exclude the left-out rows (``sample_sets``)."""
    logits = linear(lengths, max_len).double() / lam
    if rho is not None:
        logits = logits + torch.log(rho.double().to(logits.device))
    logits = grouped(logits, group_size)
    pos = grouped(positive.bool().to(logits.device), group_size)
    logits = logits.masked_fill(~pos, float("-inf"))
    has_pos = pos.any(dim=1, keepdim=True)
    weights = torch.softmax(torch.where(has_pos, logits, torch.zeros_like(logits)), dim=1)
    return torch.where(pos, weights, torch.zeros_like(weights)).view(-1).float()


def mixed_groups(positive: torch.Tensor, group_size: int, negative: torch.Tensor | None = None) -> torch.Tensor:
    """(N/G,) bool: groups with at least one positive and one negative (``negative``: ~positive when None)."""
    pos = grouped(positive.bool(), group_size)
    neg = ~pos if negative is None else grouped(negative.bool().to(pos.device), group_size)
    return pos.any(dim=1) & neg.any(dim=1)


def weight_entropy(weights: torch.Tensor, positive: torch.Tensor, group_size: int,
                   negative: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over mixed groups of −Σ_pos ω log ω (0 when no group is mixed)."""
    mixed = mixed_groups(positive, group_size, negative)
    if not mixed.any():
        return torch.zeros((), dtype=torch.float32, device=weights.device)
    w = grouped(weights.double(), group_size)[mixed.to(weights.device)]
    ent = -(w * torch.log(w.clamp(min=1e-300))).sum(dim=1)
    return ent.mean().float()


def question_terms(
    scores: torch.Tensor, weights: torch.Tensor, positive: torch.Tensor, group_size: int, tau: float = 10.0,
    negative: torch.Tensor | None = None, rho: torch.Tensor | None = None,
) -> torch.Tensor:
    """(N/G,) J_q = Σ_pos ω·s − τ·log(n·Σ_neg ρ̂ e^{s/τ}) for mixed groups, 0 otherwise (differentiable in s).
    ``negative`` defaults to ~positive and ``rho`` to ones (then J_q = Σ_pos ω·s − τ·logΣ_neg exp(s/τ))."""
    s = grouped(scores, group_size)
    w = grouped(weights.to(scores.dtype), group_size)
    pos = grouped(positive.bool().to(s.device), group_size)
    neg = ~pos if negative is None else grouped(negative.bool().to(s.device), group_size)
    pos_term = (w * s).sum(dim=1)
    neg_logits = s / tau
    if rho is not None:  # log ρ̂_j, ρ̂ = n·ρ/Σ_neg ρ: the self-normalised weights, scaled so ρ ≡ 1 adds nothing
        r = grouped(rho.double().to(s.device), group_size).masked_fill(~neg, 0.0)
        total = r.sum(dim=1, keepdim=True).clamp(min=1e-300)
        scaled = r * neg.sum(dim=1, keepdim=True) / total
        neg_logits = neg_logits + torch.log(scaled.clamp(min=1e-300)).to(s.dtype)
    neg_logits = neg_logits.masked_fill(~neg, float("-inf"))
    mixed = pos.any(dim=1) & neg.any(dim=1)
    safe = torch.where(mixed.unsqueeze(1), neg_logits, torch.zeros_like(neg_logits))
    neg_term = tau * torch.logsumexp(safe, dim=1)
    return torch.where(mixed, pos_term - neg_term, torch.zeros_like(pos_term))


def kl_to_old(per_token_logps: torch.Tensor, old_per_token_logps: torch.Tensor, mask: torch.Tensor,
              rho: torch.Tensor | None = None) -> torch.Tensor:
    """Token mean of log π_old − log π_θ, each completion's tokens weighted by ρ (ones when None)."""
    mask = mask.to(per_token_logps.dtype)
    if rho is not None:
        mask = mask * rho.to(device=mask.device, dtype=mask.dtype).unsqueeze(1)
    return ((old_per_token_logps - per_token_logps) * mask).sum() / mask.sum().clamp(min=1e-12)


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
    is_weights: torch.Tensor | None = None,
    scored: torch.Tensor | None = None,
) -> DRPOOutput:
    """DRPO loss of one batch of whole groups (see module docstring); the positives' L is ``weight_lengths`` when
    given, else the completions' lengths. ``is_weights`` (ρ per completion) and ``scored`` (False: a judge failure)
    default to ones and all-True, which give the unweighted loss."""
    n = per_token_logps.size(0)
    rho = sequence_is_weights(is_weights, n, per_token_logps.device)
    pos, neg = sample_sets(positive, scored, rho)
    lengths = mask.sum(dim=1) if weight_lengths is None else weight_lengths.to(mask.device)
    weights = positive_weights(lengths, pos, group_size, max_len, lam, rho)
    scores = sequence_scores(per_token_logps, mask)
    terms = question_terms(scores, weights, pos, group_size, tau, neg, None if is_weights is None else rho)
    objective = terms.sum() / terms.numel()
    kl = kl_to_old(per_token_logps, old_per_token_logps, mask, None if is_weights is None else rho)
    penalty_coef = (beta * torch.clamp(kl - delta, min=0.0)).detach()
    loss = -objective + penalty_coef * kl
    return DRPOOutput(
        loss=loss,
        objective=objective.detach(),
        kl=kl.detach(),
        weight_entropy=weight_entropy(weights, pos, group_size, neg),
        mixed_groups=int(mixed_groups(pos, group_size, neg).sum()),
    )
