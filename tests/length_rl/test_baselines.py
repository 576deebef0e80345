"""The baselines' pure functions on hand-computed cases, each pinned to TRL's own function or formula."""

from __future__ import annotations

import math

import pytest
import torch
from trl.rewards import get_cosine_scaled_reward, get_soft_overlong_punishment

from livethink.length_rl import advantages, length_rewards


def test_soft_overlong_is_trls_dapo_punishment():
    # L_max = 100, L_cache = 20: 0 up to 80, then (80 − L)/20, −1 beyond 100
    assert length_rewards.soft_overlong([50, 80, 90, 100, 120], 100, 20) == [0.0, 0.0, -0.5, -1.0, -1.0]
    trl = get_soft_overlong_punishment(max_completion_len=100, soft_punish_cache=20)
    assert length_rewards.soft_overlong([85, 99], 100, 20) == trl([[0] * 85, [0] * 99]) == [-0.25, -0.95]
    with pytest.raises(ValueError, match="cache"):
        length_rewards.soft_overlong([1], 100, 0)


def test_cosine_scaled_hand_computed():
    # correct: 0.5 + 0.25·(1 + cos(π·L/100)); wrong: −0.5 − 0.25·(1 + cos(π·L/100))
    correct = length_rewards.cosine_scaled([True] * 4, [0, 50, 100, 200], 100)
    wrong = length_rewards.cosine_scaled([False] * 3, [0, 50, 100], 100)
    assert correct == pytest.approx([1.0, 0.75, 0.5, 0.5])  # clamped past L_max
    assert wrong == pytest.approx([-1.0, -0.75, -0.5])
    assert length_rewards.COSINE_DEFAULTS == {"min_value_wrong": -1.0, "max_value_wrong": -0.5,
                                              "min_value_correct": 0.5, "max_value_correct": 1.0}


def test_cosine_scaled_matches_trls_callable(monkeypatch):
    """TRL's callable with its math-verify correctness replaced by given verdicts gives the same numbers."""
    import trl.rewards.accuracy_rewards as acc

    verdicts = [True, False, True, False, True]
    lengths = [3, 17, 40, 64, 90]
    monkeypatch.setattr(acc, "accuracy_reward", lambda completions, solution, **kw: [float(v) for v in verdicts])
    trl = get_cosine_scaled_reward(max_len=64, min_value_wrong=-2.0, max_value_wrong=-0.2)
    expected = trl([[{"content": ""}]] * 5, [""] * 5, [[0] * n for n in lengths])
    ours = length_rewards.cosine_scaled(verdicts, lengths, 64, min_value_wrong=-2.0, max_value_wrong=-0.2)
    assert ours == pytest.approx(expected)


def test_hard_limit_zeroes_truncated_and_overlong():
    rewards = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    lengths = torch.tensor([10, 20, 5, 15])
    ended = torch.tensor([True, True, False, True])
    out = length_rewards.hard_limit(rewards, lengths, ended, limit=15)
    assert out.tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]  # 20 > 15; no EOS; 15 is allowed
    assert length_rewards.hard_limit(torch.tensor([2.0, 3.0]), torch.tensor([1, 9]), torch.tensor([True, True]), 8).tolist() == [2.0, 0.0]


def test_batch_std_advantages_hand_computed_and_trl_formula():
    from trl.trainer.utils import nanstd

    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    # group means .5 and 1; batch mean .75, sample variance (6·.25² + 2·.75²)/7 = 1.5/7
    std = math.sqrt(1.5 / 7)
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]) / (std + 1e-4)
    assert torch.allclose(advantages.batch_std_advantages(r, 4), expected, atol=1e-6)
    trl = (r - r.view(-1, 4).mean(1).repeat_interleave(4)) / (nanstd(r).expand_as(r) + 1e-4)  # scale_rewards="batch"
    assert torch.allclose(advantages.ADVANTAGE_ESTIMATORS["batch_std"](r, 4), trl, atol=1e-6)


def test_normalize_then_sum_hand_computed_and_trl_formula():
    from trl.trainer.utils import nanstd

    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    weights = torch.tensor([1.0, 0.5])
    # per column and group of 2: [1, 0] -> ±.5/(√.5 + ε); constant columns -> 0
    z = 0.5 / (math.sqrt(0.5) + 1e-4)
    summed = torch.tensor([z, -z, 0.5 * z, -0.5 * z])
    expected = (summed - summed.mean()) / (summed.std(unbiased=True) + 1e-4)
    out = advantages.normalize_then_sum(rewards, weights, 2)
    assert torch.allclose(out, expected, atol=1e-6)
    assert out[0] > out[2] > 0 > out[3] > out[1]  # correctness outweighs helpfulness at weight .5
    grouped = rewards.view(-1, 2, 2)  # TRL's multi_objective_aggregation="normalize_then_sum"
    reward_k = ((grouped - grouped.nanmean(1, keepdim=True)) / (nanstd(grouped, dim=1, keepdim=True) + 1e-4)).view(-1, 2)
    s = (reward_k * weights).nansum(1)
    assert torch.allclose(out, (s - s.nanmean()) / (nanstd(s) + 1e-4), atol=1e-6)
