"""LiveThinking band reward and the composite, on hand-computed values."""

from __future__ import annotations

import pytest

from livethink.rewards import CompositeWeights, band_reward, completion_length, composite, count_tokens
from livethink.rewards.brevity import band_bounds, band_distance


# L_ref = 100, band [20, 40] (λ_low 0.2, λ_up 0.4), ε = 50 (default 0.5·L_ref)
@pytest.mark.parametrize(
    ("length", "expected"),
    [(30, 1.0), (20, 1.0), (40, 1.0), (50, 0.8), (65, 0.5), (90, 0.0), (400, 0.0), (10, 0.8), (0, 0.6)],
)
def test_band_reward_default_band(length, expected):
    assert band_reward(length, 100) == pytest.approx(expected)


def test_band_reward_explicit_parameters():
    # band [0.5·200, 1.0·200] = [100, 200]; ε = 40
    assert band_bounds(200, 0.5, 1.0) == (100, 200)
    assert band_distance(230, 200, 0.5, 1.0) == 30
    assert band_reward(230, 200, 0.5, 1.0, epsilon=40) == pytest.approx(0.25)
    assert band_reward(90, 200, 0.5, 1.0, epsilon=40) == pytest.approx(0.75)
    assert band_reward(150, 200, 0.5, 1.0, epsilon=40) == 1.0


@pytest.mark.parametrize("bad", [dict(l_ref=0), dict(l_ref=100, lambda_low=0.5, lambda_up=0.4), dict(l_ref=100, epsilon=0)])
def test_band_reward_rejects_bad_parameters(bad):
    with pytest.raises(ValueError):
        band_reward(10, **bad)


class FakeTokenizer:
    """Stands in for a HF tokenizer: one token per character."""

    def encode(self, text, add_special_tokens=True):
        return list(text) + ([0] if add_special_tokens else [])


def test_token_counting():
    assert count_tokens("one two  three\nfour") == 4
    assert count_tokens("abc", FakeTokenizer()) == 3  # no special tokens
    assert count_tokens("abc", lambda s: [1, 2]) == 2
    assert count_tokens("abc", len) == 3
    completion = "<think>\na b c d\n</think>\n\nYes."
    assert completion_length(completion) == 4  # reasoning only
    assert completion_length(completion, scope="completion") == 7  # <think> a b c d </think> Yes.
    assert completion_length("<think>\na b c d", scope="reasoning") == 4  # cut-off trace still counts
    with pytest.raises(ValueError):
        completion_length(completion, scope="reply")


def test_composite_hand_computed():
    assert composite(1, 1, 1.0) == pytest.approx(2.5)  # defaults (1, 1, 0.5)
    assert composite(1, 0, 0.8) == pytest.approx(1.4)
    assert composite(0, 0, 0.8) == pytest.approx(0.4)  # ungated, as in the paper
    gated = CompositeWeights(gate_length_on_correct=True)
    assert composite(0, 0, 0.8, gated) == 0.0
    assert composite(1, 1, 0.5, CompositeWeights(w_c=2.0, w_h=0.5, w_l=1.0)) == pytest.approx(3.0)
