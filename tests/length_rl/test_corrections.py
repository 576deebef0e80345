"""Update corrections on hand-computed tensors: DRPO's loss on stale (importance-weighted) rollouts, judge failures
(NaN verdicts) left out of every variant's group statistics, and the IS mode DRPO refuses at config time."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from livethink.length_rl import advantages, dot, drpo, length_rewards
from livethink.length_rl.variants import get_variant

NAN = float("nan")

# ---------------------------------------------------------------- DRPO on stale rollouts


def stale_batch() -> dict:
    """Two groups of G = 4, 2 tokens per completion, each completion's token log-probs equal to its score s.

    group 1: a, b positive with ρ = 1, 2; c, d negative with ρ = .5, 1.5 (s = −1, −2, −3, −4);
    group 2: e positive but ρ = 0 (TRL masked it: ratio over its cap), f negative, g positive (ρ = 1), h a judge
    failure (not scored, ρ = 1). log π_old − log π_θ = d per token, e's 5.0 weighed by its ρ = 0."""
    s = torch.tensor([-1.0, -2.0, -3.0, -4.0, -0.5, -2.5, -1.5, -0.1])
    d = torch.tensor([0.1, 0.2, 0.3, 0.4, 5.0, 0.1, 0.2, 0.3])
    logps = s.unsqueeze(1).repeat(1, 2).requires_grad_(True)
    return dict(logps=logps, old=logps.detach() + d.unsqueeze(1), mask=torch.ones(8, 2),
                positive=torch.tensor([1, 1, 0, 0, 1, 0, 1, 0]), rho=torch.tensor([[1.0], [2.0], [0.5], [1.5], [0.0],
                                                                                  [1.0], [1.0], [1.0]]),
                scored=torch.tensor([1, 1, 1, 1, 1, 1, 1, 0]).bool())


def test_drpo_stale_rollouts_match_the_hand_is_weighted_reference():
    b = stale_batch()
    out = drpo.drpo_loss(b["logps"], b["old"], b["mask"], b["positive"], 4, max_len=10, lam=0.1, tau=1.0, beta=10.0,
                         delta=0.05, is_weights=b["rho"], scored=b["scored"])
    # group 1: equal lengths, so ω ∝ ρ over the positives: ω = [1/3, 2/3] -> Σ ω·s = −1/3 − 4/3 = −5/3;
    #   negatives' ρ̂ = n·ρ/Σρ = 2·[.25, .75] = [.5, 1.5] -> τ·log(.5·e^{−3} + 1.5·e^{−4})
    neg = 0.5 * math.exp(-3) + 1.5 * math.exp(-4)
    j1 = -5 / 3 - math.log(neg)
    # group 2: e (ρ = 0) and h (unscored) drop out: J = s_g − s_f = −1.5 + 2.5 = 1
    j2 = 1.0
    assert out.objective.item() == pytest.approx((j1 + j2) / 2, abs=1e-6)
    # KL: Σ_i ρ_i·2·d_i / Σ_i ρ_i·2 = (.1 + .4 + .15 + .6 + 0 + .1 + .2 + .3) / 8 = 1.85 / 8
    kl = 1.85 / 8
    assert out.kl.item() == pytest.approx(kl, abs=1e-6)
    coef = 10.0 * (kl - 0.05)
    assert out.loss.item() == pytest.approx(-(j1 + j2) / 2 + coef * kl, abs=1e-6)
    assert out.mixed_groups == 2
    assert out.weight_entropy.item() == pytest.approx(-(1 / 3 * math.log(1 / 3) + 2 / 3 * math.log(2 / 3)) / 2, abs=1e-6)
    out.loss.backward()
    # per token: −(1/Q)·∂J/∂s·(1/n_i) + coef·(−ρ_i / Σ_j ρ_j n_j), Q = 2, n_i = 2, Σ ρ n = 16
    p_c = 0.5 * math.exp(-3) / neg
    kl_grad = [-coef * r / 16 for r in (1.0, 2.0, 0.5, 1.5, 0.0, 1.0, 1.0, 1.0)]
    ds = [1 / 3, 2 / 3, -p_c, -(1 - p_c), 0.0, -1.0, 1.0, 0.0]  # ∂(J1 + J2)/∂s_i
    expected = torch.tensor([-0.25 * g + k for g, k in zip(ds, kl_grad, strict=True)])
    assert torch.allclose(b["logps"].grad, expected.unsqueeze(1).expand(8, 2), atol=1e-6)


def test_drpo_unit_is_weights_give_todays_loss_and_the_trust_region_is_live():
    b = stale_batch()
    kwargs = dict(max_len=10, lam=0.1, tau=1.0, beta=10.0, delta=0.05)
    plain = drpo.drpo_loss(b["logps"], b["old"], b["mask"], b["positive"], 4, **kwargs)
    ones = drpo.drpo_loss(b["logps"], b["old"], b["mask"], b["positive"], 4, is_weights=torch.ones(8, 1), **kwargs)
    assert ones.loss.item() == pytest.approx(plain.loss.item(), abs=1e-6)
    (g_plain,) = torch.autograd.grad(plain.loss, b["logps"])
    (g_ones,) = torch.autograd.grad(ones.loss, b["logps"])
    assert torch.allclose(g_plain, g_ones, atol=1e-6)
    assert plain.kl.item() == pytest.approx(float((b["old"] - b["logps"].detach()).mean()), abs=1e-6)
    assert plain.kl.item() > 0.05  # π_old ≠ π_θ: the penalty β·[kl − δ]₊ is live


def test_drpo_is_weights_from_a_per_token_mode_are_refused():
    b = stale_batch()
    with pytest.raises(ValueError, match="sequence_mask or sequence_truncate"):
        drpo.drpo_loss(b["logps"], b["old"], b["mask"], b["positive"], 4, max_len=10, is_weights=torch.ones(8, 2))


def test_drpo_refuses_a_token_level_is_mode_at_config_time_in_one_line(tmp_path):
    from livethink.length_rl.config import GRPOVariantConfig

    base = dict(variant="drpo", output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                use_cpu=True, bf16=False, report_to="none", max_completion_length=12, use_vllm=True, vllm_mode="server")
    for mode in ("token_truncate", "token_mask"):
        with pytest.raises(ValueError) as refused:
            GRPOVariantConfig(**base, vllm_importance_sampling_mode=mode)
        message = str(refused.value)
        assert "\n" not in message and message.startswith("vllm_importance_sampling_mode: drpo")
        assert all(name in message for name in ("sequence_mask", "sequence_truncate",
                                                "vllm_importance_sampling_correction: false"))
    cfg = GRPOVariantConfig(**base)  # TRL's default, sequence_mask with C_max = 3, is taken as it is
    assert (cfg.vllm_importance_sampling_mode, cfg.vllm_importance_sampling_clip_max) == ("sequence_mask", 3.0)
    GRPOVariantConfig(**base, vllm_importance_sampling_mode="token_mask", vllm_importance_sampling_correction=False)
    # the trust region made live: a generation batch trained on twice (π_old ≠ π_θ on the second pass)
    assert GRPOVariantConfig(**{**base, "use_vllm": False}, num_iterations=2).num_iterations == 2


class FakeTrainer(SimpleNamespace):
    """What the DRPO variant reads from the trainer (one process)."""

    def column(self, name: str) -> int:
        return ["correctness", "helpfulness"].index(name)

    def local_slice(self, n: int) -> slice:
        return slice(0, n)

    def log_metric(self, name: str, value: float) -> None:
        self.logged[name] = float(value)


def test_drpo_variant_hands_trls_ratio_and_the_judge_failures_to_the_loss():
    b = stale_batch()
    cfg = SimpleNamespace(drpo_positive="correct_helpful", drpo_length_cap=10, drpo_lambda=0.1,
                          drpo_tau=1.0, drpo_beta=10.0, drpo_delta=0.05)
    variant = get_variant("drpo", cfg)
    variant.answer_tokens = None
    c = b["positive"].float()
    trainer = FakeTrainer(final_rewards=torch.stack([c, c], dim=1), accelerator=SimpleNamespace(device="cpu", gather=lambda x: x),
                          num_generations=4, current_gradient_accumulation_steps=1, model=SimpleNamespace(training=True),
                          aux_loss_enabled=False, logged={})
    trainer.final_rewards[7] = NAN  # h: the judge failed
    trainer.per_token_logps = lambda model, ids, attention, keep: (b["logps"], None)
    inputs = variant.postprocess_batch(trainer, {}, 8)
    assert inputs["drpo_scored"].tolist() == b["scored"].tolist()
    assert inputs["drpo_positive"].tolist() == b["positive"].bool().tolist()
    inputs.update(prompt_ids=torch.zeros(8, 1, dtype=torch.long), prompt_mask=torch.ones(8, 1),
                  completion_ids=torch.zeros(8, 2, dtype=torch.long), completion_mask=b["mask"],
                  old_per_token_logps=b["old"], importance_sampling_ratio=b["rho"])
    loss = variant.compute_loss(trainer, None, inputs)
    reference = drpo.drpo_loss(b["logps"], b["old"], b["mask"], b["positive"], 4, 10, 0.1, 1.0, 10.0, 0.05,
                               is_weights=b["rho"], scored=b["scored"])
    assert loss.item() == pytest.approx(reference.loss.item(), abs=1e-6)
    assert trainer.logged["drpo/is_masked_share"] == pytest.approx(1 / 8)


def test_drpo_nan_verdict_leaves_its_group_unchanged():
    # the group [pos, pos, neg, failed] scores as the group [pos, pos, neg] (ω, log-sum-exp, mixed flag)
    s = torch.tensor([-1.0, -2.0, -3.0, -0.2])
    lengths, positive = torch.tensor([3, 5, 4, 2]), torch.tensor([1, 1, 0, 0])
    rho = torch.ones(4, dtype=torch.float64)
    pos, neg = drpo.sample_sets(positive, torch.tensor([1, 1, 1, 0]), rho)
    w = drpo.positive_weights(lengths, pos, 4, max_len=10, lam=0.5, rho=rho)
    with_failure = drpo.question_terms(s, w, pos, 4, tau=2.0, negative=neg, rho=rho)
    w3 = drpo.positive_weights(lengths[:3], positive[:3], 3, max_len=10, lam=0.5)
    without = drpo.question_terms(s[:3], w3, positive[:3], 3, tau=2.0)
    assert torch.allclose(w[:3], w3) and w[3] == 0
    assert with_failure.item() == pytest.approx(without.item(), abs=1e-6)
    # the old reading (a failure counted wrong) would have added it to the negatives
    assert drpo.question_terms(s, w, positive, 4, tau=2.0).item() != pytest.approx(without.item(), abs=1e-3)


# ---------------------------------------------------------------- judge failures in the other variants


def test_a_judge_failure_row_is_left_out_of_the_grpo_group_statistics():
    # band: columns (C, H, r_len); the judge failed on row 3, whose r_len (.8) alone would still have a value
    rewards = torch.tensor([[1.0, 1.0, 0.5], [0.0, 1.0, 1.0], [1.0, 0.0, 0.2], [NAN, NAN, 0.8]])
    out = advantages.leave_out_failures(rewards, [0, 1])
    assert torch.isnan(out[3]).all() and torch.equal(out[:3], rewards[:3])
    weights = torch.tensor([1.0, 1.0, 0.5])
    r = advantages.weighted_rewards(out, weights)  # [2.25, 1.5, 1.1, NaN]
    assert torch.allclose(r[:3], torch.tensor([2.25, 1.5, 1.1])) and math.isnan(r[3])
    a = advantages.grpo_advantages(r, 4)
    assert torch.allclose(a[:3], advantages.grpo_advantages(r[:3], 3), atol=1e-6) and a[3] == 0
    assert torch.allclose(advantages.dr_grpo_advantages(r, 4)[:3], advantages.dr_grpo_advantages(r[:3], 3))
    # TRL's own formula on the marked row (nanmean / nanstd, unscorable -> 0) gives the same numbers
    from trl.trainer.utils import nanstd

    g = r.view(-1, 4)
    trl = (r - g.nanmean(1).repeat_interleave(4)) / (nanstd(g, dim=1).repeat_interleave(4) + 1e-4)
    assert torch.allclose(a, torch.nan_to_num(trl), atol=1e-6)


def test_batch_std_and_gdpo_leave_a_failed_row_out():
    r = torch.tensor([1.0, 0.0, 2.0, NAN, 1.0, 3.0, 0.5, 2.5])
    a = advantages.batch_std_advantages(r, 4)
    kept = torch.tensor([1.0, 0.0, 2.0, 1.0, 3.0, 0.5, 2.5])
    mean = torch.tensor([1.0] * 3 + [1.75] * 4)
    assert a[3] == 0 and torch.allclose(a[torch.arange(8) != 3], (kept - mean) / (kept.std() + 1e-4), atol=1e-6)
    cols = torch.tensor([[1.0, 0.2], [0.0, 0.4], [1.0, 0.9], [NAN, NAN], [0.0, 0.1], [1.0, 0.3]])
    with_failure = advantages.normalize_then_sum(cols, torch.tensor([1.0, 0.5]), 3)
    # row 3's group is then [row 4, row 5]; the same numbers as a batch of groups [0,1,2] and [4,5] alone
    assert with_failure[3] == 0
    g1 = cols[:3]
    g2 = cols[4:]
    per = torch.cat([(g1 - g1.mean(0)) / (g1.std(0) + 1e-4), (g2 - g2.mean(0)) / (g2.std(0) + 1e-4)])
    s = per @ torch.tensor([1.0, 0.5])
    assert torch.allclose(with_failure[torch.arange(6) != 3], (s - s.mean()) / (s.std() + 1e-4), atol=1e-5)


def test_dynamic_sampling_zero_std_filter_ignores_a_failed_row():
    # [1, 1, NaN] has no signal once the failure is left out (it used to read [1, 1, 0]); [1, NaN, NaN] neither
    r = torch.tensor([1.0, 1.0, NAN, 1.0, 0.0, NAN, 1.0, NAN, NAN])
    assert advantages.zero_std_groups(r, 3).tolist() == [True, False, True]


def test_dot_nan_verdict_leaves_the_group_statistics_unchanged():
    # scored lengths [10, 10, 10, 40], all correct: mean 17.5, sample std 15; α = 1 -> T = floor(32.5) = 32, and
    # 40 − 32 = 8 ≥ m = 8 cuts the last one. The failed row (500 tokens, NaN C) changes none of it and is not cut.
    lengths = torch.tensor([10, 10, 10, 40, 500])
    correct = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])  # nan_to_num of [1, 1, 1, 1, NaN]
    scored = torch.tensor([1, 1, 1, 1, 0]).bool()
    assert dot.full_correct_groups(correct, 5, 1.0, scored).tolist() == [True]
    assert dot.truncation_thresholds(lengths, 5, 1.0, scored).tolist() == [32]
    assert dot.truncation_thresholds(lengths[:4], 4, 1.0).tolist() == [32]
    out = dot.truncated_lengths(lengths, correct, 5, alpha=1.0, margin=8, scored=scored)
    assert out.tolist() == [10, 10, 10, 32, 500]
    assert out[:4].tolist() == dot.truncated_lengths(lengths[:4], correct[:4], 4, alpha=1.0, margin=8).tolist()
    # read as "wrong" (today's nan_to_num alone) the group would not be all-correct and nothing would be cut
    assert dot.truncated_lengths(lengths, correct, 5, alpha=1.0, margin=8).tolist() == lengths.tolist()


def test_dler_hard_limit_keeps_a_failed_row_unscored_unless_it_was_cut():
    # an uncut failure stays NaN (left out later); a cut one scores 0 whatever the judge said (DLER's penalty)
    rewards = torch.tensor([[NAN, NAN], [NAN, NAN], [1.0, 1.0]])
    out = length_rewards.hard_limit(rewards, torch.tensor([5, 5, 5]), torch.tensor([True, False, True]), limit=10)
    assert torch.isnan(out[0]).all() and out[1].tolist() == [0.0, 0.0] and out[2].tolist() == [1.0, 1.0]
