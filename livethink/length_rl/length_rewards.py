"""Length terms of the variants' rewards (tensors in, tensors out), chosen by name from ``LENGTH_REWARDS``.

- ``band`` (LiveThinking, arXiv 2510.07685): r_len = max(0, 1 − d/ε), d the distance of L outside [λ_low·L_ref, λ_up·L_ref].
  The math is the rewards package's ``band_reward`` (one implementation), applied element-wise.
- ``length_penalty`` (the naive baseline): r = C − α·L/L_max, ungated (a long wrong reply is penalised too).
- ``linear`` (DRPO's r_l): r_l = 1 − L/C with C the maximum generation length.
- ``soft_overlong`` (DAPO, arXiv 2503.14476 Eq. 13): TRL's ``get_soft_overlong_punishment``: 0 up to L_max − L_cache,
  then linear down to −1 at L_max, −1 beyond.
- ``cosine_scaled`` (arXiv 2502.03373 App. C.1): TRL's ``get_cosine_scaled_reward`` formula on our correctness.
- ``hard_limit`` (DLER, arXiv 2510.15110): a completion longer than the limit, or cut before its EOS, scores 0.

``gated`` optionally multiplies a length term by a quality gate (C, or C∧H): as in Arora & Zanette, L1-Max and
DRPO, only a good reply earns its brevity, so a short wrong reply never outscores a long wrong one. A milder gate,
``solved_group``, keeps the term for every reply of a group with at least one good reply and drops it in groups
with none (where it would be the only contrast).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence

import torch
from trl.rewards import get_cosine_scaled_reward, get_soft_overlong_punishment

from livethink.rewards.brevity import LAMBDA_LOW, LAMBDA_UP, band_reward


def band(
    lengths: torch.Tensor,
    l_ref: float,
    lambda_low: float = LAMBDA_LOW,
    lambda_up: float = LAMBDA_UP,
    epsilon: float | None = None,
) -> torch.Tensor:
    """LiveThinking band reward per completion length (float32, on ``lengths``' device)."""
    values = [band_reward(float(n), l_ref, lambda_low, lambda_up, epsilon) for n in lengths.tolist()]
    return torch.tensor(values, dtype=torch.float32, device=lengths.device)


LENGTH_GATES = ("none", "correct", "correct_helpful", "solved_group")


def gated(r_len: torch.Tensor, correct: torch.Tensor, helpful: torch.Tensor, gate: str,
          group_size: int | None = None) -> torch.Tensor:
    """r_len·g with g = 1 (``none``), C (``correct``), C·H (``correct_helpful``), or for ``solved_group`` 1 for every
    reply of a group (``group_size`` consecutive rows) in which at least one reply has C·H = 1, else 0: brevity is
    learnt only on prompts the policy can already solve, where the quality contrast guards the useful lines."""
    if gate == "none":
        return r_len.float()
    if gate == "correct":
        return r_len.float() * correct.float()
    if gate == "correct_helpful":
        return r_len.float() * correct.float() * helpful.float()
    if gate == "solved_group":
        if not group_size or r_len.numel() % group_size:
            raise ValueError(f"solved_group needs whole groups: {r_len.numel()} rows, group size {group_size}")
        good = (correct.float() * helpful.float()).view(-1, group_size).amax(dim=1)
        return r_len.float() * good.repeat_interleave(group_size)
    raise ValueError(f"length gate must be one of {', '.join(LENGTH_GATES)}, got {gate!r}")


def length_penalty(correct: torch.Tensor, lengths: torch.Tensor, l_max: float, alpha: float) -> torch.Tensor:
    """r = C − α·L/L_max."""
    if l_max <= 0:
        raise ValueError(f"l_max must be > 0, got {l_max}")
    return correct.float() - alpha * lengths.float() / l_max


def linear(lengths: torch.Tensor, max_len: float) -> torch.Tensor:
    """DRPO length reward r_l = 1 − L/C."""
    if max_len <= 0:
        raise ValueError(f"max_len must be > 0, got {max_len}")
    return 1.0 - lengths.float() / max_len


def soft_overlong(lengths: Sequence[int], l_max: int, cache: int) -> list[float]:
    """DAPO's soft overlong punishment per completion length: TRL's own function, called on the lengths."""
    if not 0 < cache <= l_max:
        raise ValueError(f"need 0 < cache <= l_max, got cache={cache}, l_max={l_max}")
    return get_soft_overlong_punishment(max_completion_len=l_max, soft_punish_cache=cache)([range(n) for n in lengths])


COSINE_DEFAULTS: dict[str, float] = {
    name: p.default for name, p in inspect.signature(get_cosine_scaled_reward).parameters.items()
    if p.default is not inspect.Parameter.empty
}  # min_value_wrong, max_value_wrong, min_value_correct, max_value_correct: TRL's defaults


def cosine_scaled(correct: Sequence[bool], lengths: Sequence[int], max_len: int,
                  min_value_wrong: float = COSINE_DEFAULTS["min_value_wrong"],
                  max_value_wrong: float = COSINE_DEFAULTS["max_value_wrong"],
                  min_value_correct: float = COSINE_DEFAULTS["min_value_correct"],
                  max_value_correct: float = COSINE_DEFAULTS["max_value_correct"]) -> list[float]:
    """TRL's cosine length-scaled correctness reward, r = v_min + ½(v_max − v_min)(1 + cos(π·min(L/L_max, 1))),
    (v_min, v_max) = (min_value_correct, max_value_correct) for a correct reply and (max_value_wrong,
    min_value_wrong) for a wrong one. TRL's callable decides correctness itself with ``math_verify`` (LaTeX answers);
    here C comes from our judge, so the formula is applied to it (the tests pin it to TRL's callable)."""
    if max_len <= 0:
        raise ValueError(f"max_len must be > 0, got {max_len}")
    out = []
    for ok, n in zip(correct, lengths, strict=True):
        lo, hi = (min_value_correct, max_value_correct) if ok else (max_value_wrong, min_value_wrong)
        out.append(float(lo + 0.5 * (hi - lo) * (1.0 + math.cos(min(n / max_len, 1.0) * math.pi))))
    return out


def hard_limit(rewards: torch.Tensor, lengths: torch.Tensor, ended: torch.Tensor, limit: int) -> torch.Tensor:
    """DLER's truncation penalty: every reward of a completion longer than ``limit`` or without its EOS is 0.

    ``rewards`` (N,) or (N, F); ``ended`` (N,) bool: the completion ends with an EOS token."""
    keep = ended.bool() & (lengths <= limit)
    shape = (-1,) + (1,) * (rewards.dim() - 1)
    return torch.where(keep.to(rewards.device).view(shape), rewards, torch.zeros_like(rewards))


LENGTH_REWARDS: dict[str, Callable[..., torch.Tensor]] = {
    "band": band,
    "length_penalty": length_penalty,
    "linear": linear,
    "soft_overlong": soft_overlong,
    "cosine_scaled": cosine_scaled,
    "hard_limit": hard_limit,
}
