"""Grounded-token loss weights and the weighted NLL, on hand-computed cases."""

from __future__ import annotations

import math

import pytest
import torch

from livethink.data.prompt import SYSTEM_PROMPT
from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer
from livethink.rft_distill.token_weights import grounded_token_weights, instruction_token_ids, weighted_nll

X = -100


def test_copied_tokens_get_the_weight_instruction_and_new_tokens_do_not():
    # prompt: [1 instruction] 7 8 | completion: 7 (copied) 9 (new) 1 (instruction token, also in the prompt) 8 (copied)
    ids = torch.tensor([[1, 7, 8, 7, 9, 1, 8]])
    labels = torch.tensor([[X, X, X, 7, 9, 1, 8]])
    w = grounded_token_weights(ids, labels, torch.ones_like(ids), instruction_ids=[1], weight=4.0)
    assert w.tolist() == [[1.0, 1.0, 1.0, 4.0, 1.0, 1.0, 4.0]]


def test_rows_are_independent_and_padding_is_not_prompt():
    ids = torch.tensor([[5, 6, 6, 0], [6, 5, 0, 5]])
    labels = torch.tensor([[X, X, 6, X], [X, 5, X, 5]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 1]])  # row 1 position 2 is padding: its token 0 is not prompt
    w = grounded_token_weights(ids, labels, mask, instruction_ids=[], weight=3.0)
    # row 0: 6 occurs in the prompt -> 3; row 1: prompt is just [6], so the trained 5s are not copied
    assert w.tolist() == [[1.0, 1.0, 3.0, 1.0], [1.0, 1.0, 1.0, 1.0]]


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="differ in shape"):
        grounded_token_weights(torch.zeros(1, 3, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long), None, [], 2.0)


def test_weighted_nll_hand_computed():
    # vocab 2, uniform logits: every trained position costs ln 2
    logits = torch.zeros(1, 4, 2)
    labels = torch.tensor([[X, 1, 0, X]])  # positions 1 and 2 are trained (predicted from positions 0 and 1)
    weights = torch.tensor([[1.0, 3.0, 1.0, 5.0]])  # the weight on untrained position 3 must not count
    total, weight_sum = weighted_nll(logits, labels, weights)
    assert weight_sum.item() == pytest.approx(4.0)
    assert total.item() == pytest.approx(4.0 * math.log(2))


def test_instruction_ids_cover_the_fixed_prompt_text(liveshop_small):
    tok = train_tokenizer(corpus_from_tasks(liveshop_small.tasks["train"]), vocab_size=600)
    fixed = set(instruction_token_ids(tok))
    assert set(tok(SYSTEM_PROMPT, add_special_tokens=False).input_ids) <= fixed
    assert set(tok.all_special_ids) <= fixed
    assert not set(tok(" Zephyr", add_special_tokens=False).input_ids) <= fixed  # a product name is a fact
