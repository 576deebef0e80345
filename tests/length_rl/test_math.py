"""Pure variant math on hand-computed tensors: GRPO advantages, length rewards, SIRI, DOT, DRPO."""

from __future__ import annotations

import math

import pytest
import torch

from livethink.length_rl import advantages, dot, drpo, length_rewards, schedules
from livethink.length_rl.variants import VARIANTS, get_variant

# ---------------------------------------------------------------- GRPO advantages


def test_grpo_advantages_hand_computed():
    # group 1: [1, 0, 0, 1] -> mean .5, sample std sqrt(1/3); group 2 constant -> 0
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    a = advantages.grpo_advantages(r, 4)
    s = math.sqrt(1 / 3) + 1e-4
    expected = torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0, 0, 0, 0])
    assert torch.allclose(a, expected, atol=1e-6)
    assert torch.allclose(advantages.dr_grpo_advantages(r, 4), torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]))


def test_grpo_advantages_match_trl_formula():
    from trl.trainer.utils import nanstd

    r = torch.tensor([0.3, 1.7, 0.2, 0.9, 1.0, 1.5])
    g = r.view(-1, 3)
    trl = (r - g.mean(1).repeat_interleave(3)) / (nanstd(g, dim=1).repeat_interleave(3) + 1e-4)
    assert torch.allclose(advantages.ADVANTAGE_ESTIMATORS["grpo"](r, 3), trl, atol=1e-6)


def test_zero_std_groups_and_shape_check():
    assert advantages.zero_std_groups(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2).tolist() == [True, False]
    with pytest.raises(ValueError):
        advantages.grpo_advantages(torch.ones(5), 2)


# ---------------------------------------------------------------- length rewards


def test_band_reward_values():
    # L_ref = 100: band [20, 40], eps = 50 -> 10 tokens: d = 10 -> .8; 30: 1; 65: d = 25 -> .5; 200: 0
    out = length_rewards.band(torch.tensor([10, 30, 65, 200]), 100.0)
    assert torch.allclose(out, torch.tensor([0.8, 1.0, 0.5, 0.0]))
    out = length_rewards.band(torch.tensor([50]), 100.0, lambda_low=0.2, lambda_up=0.4, epsilon=20.0)
    assert torch.allclose(out, torch.tensor([0.5]))


def test_length_penalty_and_linear():
    r = length_rewards.length_penalty(torch.tensor([1, 0, 1]), torch.tensor([100, 100, 400]), l_max=400, alpha=0.5)
    assert torch.allclose(r, torch.tensor([0.875, -0.125, 0.5]))
    assert torch.allclose(length_rewards.linear(torch.tensor([0, 100, 512]), 512), torch.tensor([1.0, 0.8046875, 0.0]))
    with pytest.raises(ValueError):
        length_rewards.length_penalty(torch.tensor([1]), torch.tensor([1]), 0, 1.0)


def test_length_gate():
    r_len, c, h = torch.tensor([0.8, 0.8, 0.5, 1.0]), torch.tensor([1, 1, 0, 0]), torch.tensor([1, 0, 1, 0])
    assert torch.allclose(length_rewards.gated(r_len, c, h, "none"), r_len)
    assert torch.allclose(length_rewards.gated(r_len, c, h, "correct"), torch.tensor([0.8, 0.8, 0.0, 0.0]))
    assert torch.allclose(length_rewards.gated(r_len, c, h, "correct_helpful"), torch.tensor([0.8, 0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="length gate"):
        length_rewards.gated(r_len, c, h, "helpful")
    # groups of 2: the first has a good reply (row 0), so both its rows keep r_len; the second has none
    assert torch.allclose(length_rewards.gated(r_len, c, h, "solved_group", 2), torch.tensor([0.8, 0.8, 0.0, 0.0]))
    # groups of 4: one group, solved by row 0
    assert torch.allclose(length_rewards.gated(r_len, c, h, "solved_group", 4), r_len)
    with pytest.raises(ValueError, match="whole groups"):
        length_rewards.gated(r_len, c, h, "solved_group", 3)


# ---------------------------------------------------------------- SIRI schedules


def test_siri_cosine_paper_values():
    s = schedules.Schedule(16384, 8192, 640, cycles=3)
    assert schedules.cosine(0, s) == 16384
    assert schedules.cosine(160, s) == 12288  # quarter: the midpoint
    assert schedules.cosine(320, s) == 8192
    assert schedules.cosine(480, s) == 12288
    assert schedules.cosine(640, s) == 16384
    assert schedules.cosine(107, s) == round(12288 + 4096 * math.cos(2 * math.pi * 107 / 640))
    assert s.total_steps == 1920


def test_siri_stair():
    s = schedules.Schedule(400, 100, 8)
    assert [schedules.stair(t, s) for t in range(9)] == [100, 100, 100, 100, 400, 400, 400, 400, 100]
    s3 = schedules.Schedule(400, 100, 12, stair_steps=3)
    assert [schedules.stair(t, s3) for t in range(12)] == [300, 300, 200, 200, 100, 100] + [400] * 6


def test_siri_stair_cosine():
    s = schedules.Schedule(400, 200, 16)
    caps = [schedules.stair_cosine(t, s) for t in range(16)]
    # φ = 2πt/16: flat max (t=0,1), descent (t=2..5: 400, 371, 300, 229), flat min (6..9), ascent (10..13), max (14, 15)
    assert caps[:2] == [400, 400]
    assert caps[2:6] == [400, round(300 + 100 * math.cos(math.pi / 4)), 300, round(300 - 100 * math.cos(math.pi / 4))]
    assert caps[6:10] == [200] * 4
    assert caps[10:14] == [200, round(300 - 100 * math.cos(math.pi / 4)), 300, round(300 + 100 * math.cos(math.pi / 4))]
    assert caps[14:] == [400, 400]


def test_siri_phases_and_boundaries():
    s = schedules.Schedule(512, 128, 10, cycles=2)
    assert [schedules.phase(t, s) for t in (0, 4, 5, 9, 10)] == ["compression"] * 2 + ["expansion"] * 2 + ["compression"]
    assert schedules.phase_boundaries(s) == {5: ("compression", 1), 10: ("expansion", 1),
                                             15: ("compression", 2), 20: ("expansion", 2)}
    assert schedules.length_cap("cosine", 5, s) == 128
    with pytest.raises(ValueError):
        schedules.length_cap("linear", 0, s)
    with pytest.raises(ValueError):
        schedules.Schedule(100, 200, 10)
    with pytest.raises(ValueError):
        schedules.Schedule(200, 100, 9)


# ---------------------------------------------------------------- DOT


def test_dot_thresholds_and_truncation():
    # group A (all correct): L = [100, 100, 100, 300]; mean 150, sample std 100 -> T = floor(150 + 1.0·100) = 250
    #   300 − 250 = 50 ≥ 32 -> truncated to 250
    # group B (one wrong): same lengths -> untouched
    lengths = torch.tensor([100, 100, 100, 300, 100, 100, 100, 300])
    correct = torch.tensor([1, 1, 1, 1, 1, 0, 1, 1])
    assert dot.full_correct_groups(correct, 4).tolist() == [True, False]
    assert dot.truncation_thresholds(lengths, 4, alpha=1.0).tolist() == [250, 250]
    new = dot.truncated_lengths(lengths, correct, 4, alpha=1.0, margin=32)
    assert new.tolist() == [100, 100, 100, 250, 100, 100, 100, 300]
    # margin 64: 300 − 250 = 50 < 64 -> no truncation
    assert dot.truncated_lengths(lengths, correct, 4, alpha=1.0, margin=64).tolist() == lengths.tolist()


def test_dot_alpha3_floor_and_fraction_margin():
    # L = [10, 20, 30, 40, 200]: mean 60, sample std = sqrt(((50²+40²+30²+20²)+140²)/4) = sqrt(6250) = 79.0569
    # T = floor(60 + 3·79.0569) = floor(297.17) = 297 -> nothing exceeds T
    lengths = torch.tensor([10, 20, 30, 40, 200])
    assert dot.truncation_thresholds(lengths, 5).tolist() == [297]
    assert dot.truncated_lengths(lengths, torch.ones(5), 5).tolist() == lengths.tolist()
    # fraction margin: m = max(int(0.1·L), 16): L=100 -> 16, L=1000 -> 100
    assert dot.effective_margin(torch.tensor([100, 1000]), 0.1).tolist() == [16, 100]
    # α = 0: T = floor(mean) = floor(60) -> 200 − 60 = 140 ≥ max(20, 16) -> cut; 40 < 60 untouched
    assert dot.truncated_lengths(lengths, torch.ones(5), 5, alpha=0.0, margin=0.1).tolist() == [10, 20, 30, 40, 60]


def test_dot_mask():
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 5] = 0
    out = dot.truncation_mask(mask, torch.tensor([3, 6]))
    assert out.tolist() == [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]]


def test_dot_oversample_factor():
    assert dot.oversample_factor([]) == 1.5
    assert dot.oversample_factor([0.0, 0.0]) == 5.0
    # mean .5, population std .1 -> 2·1.1 = 2.2
    assert dot.oversample_factor([0.4, 0.6]) == pytest.approx(2.2)
    assert dot.oversample_factor([1.0]) == 1.2  # clipped from 1.0
    assert dot.oversample_factor([0.1]) == 5.0  # clipped from 10
    # only the last 20 count: 30 × 0.1 then 20 × 0.5 -> 2.0
    assert dot.oversample_factor([0.1] * 30 + [0.5] * 20) == pytest.approx(2.0)


# ---------------------------------------------------------------- DRPO


def test_drpo_positive_weights_hand_computed():
    # C = 100, λ = 0.1: positives at L = 10, 20 -> r_l = .9, .8 -> logits 9, 8 -> ω = softmax = [e/(e+1), 1/(e+1)]
    lengths = torch.tensor([10, 20, 50, 60])
    positive = torch.tensor([1, 1, 0, 0])
    w = drpo.positive_weights(lengths, positive, 4, max_len=100, lam=0.1)
    e = math.e
    assert torch.allclose(w, torch.tensor([e / (e + 1), 1 / (e + 1), 0, 0]), atol=1e-6)
    # λ → ∞: uniform over positives (DisCO)
    assert torch.allclose(drpo.positive_weights(lengths, positive, 4, 100, lam=1e9), torch.tensor([0.5, 0.5, 0, 0]))
    # no positive: all zero
    assert drpo.positive_weights(lengths, torch.zeros(4), 4, 100).tolist() == [0, 0, 0, 0]


def test_drpo_weight_entropy():
    w = torch.tensor([0.5, 0.5, 0.0, 0.0, 1.0, 0.0])
    pos = torch.tensor([1, 1, 0, 0, 1, 1])  # group 2 (size 3) is all-correct... sizes: use G = 3
    # G = 3: group 1 = [.5, .5, 0] with pos [1,1,0] (mixed): H = ln 2; group 2 = [0, 1, 0], pos [0,1,1] (mixed): H = 0
    ent = drpo.weight_entropy(w, pos, 3)
    assert ent.item() == pytest.approx(math.log(2) / 2)
    assert drpo.weight_entropy(torch.tensor([1.0, 0.0]), torch.tensor([1, 1]), 2).item() == 0.0


def test_drpo_question_terms_and_loss():
    # two groups of G = 3; group 1 mixed: s = [-1, -2, -3], pos = [1, 1, 0], ω = [.75, .25]
    #   J = .75·(−1) + .25·(−2) − τ·log(exp(−3/τ)) = −1.25 + 3 = 1.75   (one negative: τ·log exp(s/τ) = s)
    # group 2 all-correct: 0, but counts: objective = 1.75 / 2
    scores = torch.tensor([-1.0, -2.0, -3.0, -0.5, -0.5, -0.5], requires_grad=True)
    weights = torch.tensor([0.75, 0.25, 0.0, 1 / 3, 1 / 3, 1 / 3])
    positive = torch.tensor([1, 1, 0, 1, 1, 1])
    terms = drpo.question_terms(scores, weights, positive, 3, tau=10.0)
    assert torch.allclose(terms, torch.tensor([1.75, 0.0]), atol=1e-6)
    terms.sum().backward()
    assert torch.allclose(scores.grad, torch.tensor([0.75, 0.25, -1.0, 0.0, 0.0, 0.0]), atol=1e-6)


def test_drpo_two_negatives_logsumexp():
    # negatives s = [-1, -3], τ = 2: τ·log(e^{-.5} + e^{-1.5}); gradient on negatives = −softmax(s/τ)
    scores = torch.tensor([0.0, -1.0, -3.0], requires_grad=True)
    terms = drpo.question_terms(scores, torch.tensor([1.0, 0, 0]), torch.tensor([1, 0, 0]), 3, tau=2.0)
    expected = 0.0 - 2.0 * math.log(math.exp(-0.5) + math.exp(-1.5))
    assert terms.item() == pytest.approx(expected, abs=1e-6)
    terms.sum().backward()
    p = math.exp(-0.5) / (math.exp(-0.5) + math.exp(-1.5))
    assert torch.allclose(scores.grad, torch.tensor([1.0, -p, -(1 - p)]), atol=1e-6)


def test_drpo_loss_kl_penalty_gradient_form():
    # one group of 2 (pos, neg), 1-token completions: s = logp. old = new − [.1, .3] -> kl = mean(old − new) = −.2
    # make kl positive: old = new + [.1, .3] -> kl = .2; β = 10, δ = .05 -> coef = 10·.15 = 1.5 (stop-grad)
    logps = torch.tensor([[-1.0], [-2.0]], requires_grad=True)
    old = logps.detach() + torch.tensor([[0.1], [0.3]])
    mask = torch.ones(2, 1)
    out = drpo.drpo_loss(logps, old, mask, torch.tensor([1, 0]), 2, max_len=10, lam=0.1, tau=1.0, beta=10.0, delta=0.05)
    # objective = (1·(−1) − 1·log e^{−2}) / 1 = 1; loss = −1 + 1.5·0.2 = −0.7
    assert out.objective.item() == pytest.approx(1.0)
    assert out.kl.item() == pytest.approx(0.2)
    assert out.loss.item() == pytest.approx(-0.7)
    out.loss.backward()
    # d/dlogp: −(ω, −1) + 1.5·(−1/2 per token of the KL mean) = [−1 − .75, 1 − .75]
    assert torch.allclose(logps.grad, torch.tensor([[-1.75], [0.25]]), atol=1e-6)
    # KL under δ: no penalty
    out = drpo.drpo_loss(logps.detach(), logps.detach(), mask, torch.tensor([1, 0]), 2, 10)
    assert out.kl.item() == 0.0 and out.loss.item() == pytest.approx(-1.0)


def test_drpo_uniform_groups_count_in_denominator():
    logps = torch.tensor([[-1.0], [-2.0], [-1.0], [-2.0]])
    mask = torch.ones(4, 1)
    out = drpo.drpo_loss(logps, logps, mask, torch.tensor([1, 0, 1, 1]), 2, max_len=10, tau=1.0)
    assert out.objective.item() == pytest.approx(1.0 / 2)  # mixed group J = 1, all-correct group 0, Q = 2
    assert out.mixed_groups == 1


def test_drpo_loss_weights_the_positives_by_the_lengths_given():
    # one group of 3, 1-token completions, s = [−1, −2, −3], positives 0 and 1. By length (both 1) ω = [.5, .5]:
    # J = .5·(−1) + .5·(−2) + 3 = 1.5. By weight_lengths [20, 10] with C = 100, λ = .1: logits 8, 9 ->
    # ω = [1/(e+1), e/(e+1)]: J = −1/(e+1) − 2e/(e+1) + 3
    logps = torch.tensor([[-1.0], [-2.0], [-3.0]])
    mask, positive = torch.ones(3, 1), torch.tensor([1, 1, 0])
    assert drpo.drpo_loss(logps, logps, mask, positive, 3, max_len=100, tau=1.0).objective.item() == pytest.approx(1.5)
    e = math.e
    out = drpo.drpo_loss(logps, logps, mask, positive, 3, max_len=100, tau=1.0, weight_lengths=torch.tensor([20, 10, 0]))
    assert out.objective.item() == pytest.approx(-1 / (e + 1) - 2 * e / (e + 1) + 3)


def test_sequence_scores_masked_mean():
    logps = torch.tensor([[-1.0, -3.0, -9.0], [-2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert drpo.sequence_scores(logps, mask).tolist() == [-2.0, -2.0]


# ---------------------------------------------------------------- registry


def test_registry():
    from types import SimpleNamespace

    assert {"band", "siri", "dot", "drpo", "length_penalty"} <= set(VARIANTS)
    cfg = SimpleNamespace(w_correct=1.0, w_helpful=0.7, w_length=0.5)
    assert get_variant("baseline", cfg).name == "band"  # the alias
    assert get_variant("band", cfg).reward_weights() == [1.0, 0.7, 0.5]
    assert get_variant("length_penalty", cfg).reward_weights() == [0.0, 0.7, 1.0]
    assert get_variant("drpo").loss == "drpo"
    with pytest.raises(ValueError, match="unknown variant 'ppo'.*band.*baseline \\(= band\\)"):
        get_variant("ppo")


def test_every_variant_module_registers_itself_and_the_trainer_names_none():
    import ast
    import pkgutil
    from pathlib import Path

    from livethink.length_rl import trainer, variants

    modules = {m.name for m in pkgutil.iter_modules(variants.__path__)}
    assert modules == {cls.__module__.rsplit(".", 1)[1] for cls in VARIANTS.values()}  # discovered by import alone
    tree = ast.parse(Path(trainer.__file__).read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names = set(VARIANTS) | {"baseline"}
    assert not names & strings
    assert not [a for a in attributes for v in names if a == v or a.startswith(f"{v}_")]  # no variant options either


def test_budget_caps_drawn_per_group_or_per_completion():
    from livethink.length_rl.budget_rollouts import CapDistribution, deadline_thinking_cap

    # (1000 − 50 − 50) / 4 = 225 tokens; less the 48-token reply and a 4-token forced end
    assert deadline_thinking_cap(1000, 4.0, 50, 50, 48, 4) == 173
    assert deadline_thinking_cap(100, 4.0, 50, 50, 48, 4) == 0
    dist = CapDistribution.parse("choice:8,16,32", auto_high=0)
    grouped = dist.draw(12, torch.Generator().manual_seed(0), group_size=4)
    assert all(len(set(grouped[i:i + 4])) == 1 for i in range(0, 12, 4)) and set(grouped) <= {8, 16, 32}
    each = dist.draw(400, torch.Generator().manual_seed(0))
    assert set(each) == {8, 16, 32}
    free = CapDistribution.parse("uniform:0:3", auto_high=0, uncapped_share=0.5).draw(400, torch.Generator().manual_seed(1))
    assert 150 < sum(c is None for c in free) < 250 and set(free) - {None} == {0, 1, 2, 3}
    assert CapDistribution.parse("auto", auto_high=5).caps == (0, 1, 2, 3, 4, 5)
    for bad in ("uniform:5", "choice:", "normal:3", "choice:-1"):
        with pytest.raises(ValueError, match="budget_caps"):
            CapDistribution.parse(bad, auto_high=5)
    with pytest.raises(ValueError, match="groups of 4"):
        dist.draw(6, torch.Generator(), group_size=4)


def test_an_uncut_training_row_is_served_with_the_reply_reserve_and_no_second_think_block():
    from livethink.data.budget_forcing import ForcingTokens
    from livethink.length_rl.budget_rollouts import NO_CUT, CapDistribution, CapSampler

    tokens = ForcingTokens(start=(1,), close=(2,), forced_end=(9, 2, 9, 9), eos=0)
    sampler = CapSampler(CapDistribution.parse("choice:8", auto_high=0, uncapped_share=0.99), tokens, 2,
                         torch.Generator().manual_seed(0))
    assert sampler.draw(2) == [None, None]  # inactive (evaluation rollouts): left alone
    sampler.active = True
    assert sampler.draw(2) == [NO_CUT, NO_CUT] and sampler.last == [None, None]
    sampler.active = False  # the masks are read after the rollouts: the draw's state counts
    prompt = [50, 1, 9]
    # thinking closed on its own, then 2 reply tokens and the EOS the reserve forced; a completion that ended
    # earlier by itself has nothing forced
    assert sampler.masks([prompt, prompt], [[7, 2, 5, 6, 0], [7, 2, 5, 0]]) == [[False] * 4 + [True], [False] * 4]


def test_a_forcing_step_forces_the_cut_and_bans_a_second_think_block():
    from livethink.data.budget_forcing import ForcingTokens
    from livethink.length_rl.budget_rollouts import forcing_step

    tokens = ForcingTokens(start=(1,), close=(2,), forced_end=(9, 2, 9, 9), eos=0)
    prompt = [50, 1, 9]  # "<think>\n" pre-filled: one thinking token

    def step(output: list[int], cap: int = 3) -> int:
        logits = torch.zeros(60)
        logits[1] = 5.0  # the model would open thinking again
        logits[7] = 1.0
        return int(forcing_step(prompt, output, cap, tokens, 2, logits).argmax())

    assert step([7, 7]) == 9  # the cut: the forced end's first token
    assert step([7, 7, 9, 2, 9, 9]) == 7  # the forced reply: <think> banned, the next best token
    assert step([7]) == 7  # thinking, before the cap: banned too (the block is open)
    assert step([7, 7, 9, 2, 9, 9, 5, 6]) == 0  # the reply used its reserve: EOS


def test_budget_forcing_refuses_a_format_that_does_not_think_and_names_the_field():
    from livethink.data.reasoning_format import THINK, ReasoningFormat
    from livethink.length_rl.budget_rollouts import not_thinking_problem

    assert not_thinking_problem(THINK, "the chat template", "m") is None
    problem = not_thinking_problem(ReasoningFormat("", ""), "no delimiters in the tokenizer", "runs/x")
    assert problem.startswith("budget_forcing: runs/x does not think (reasoning format none")
    assert "no delimiters in the tokenizer" in problem and "budget_forcing: false" in problem
