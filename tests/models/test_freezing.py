"""``trainable_parameters``: regexes and the ``@head`` / ``@all`` keywords, on untied, tied and MoE models."""

from __future__ import annotations

import logging

import pytest
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

from livethink.models.freezing import (
    decoder_layers,
    head_parameter_names,
    is_tied,
    resolve_patterns,
    top_block_names,
    train_only,
)


def llama(tied: bool, layers: int = 3) -> LlamaForCausalLM:
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
                                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied))


def trainable(model) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


def test_head_of_an_untied_model_is_its_lm_head():
    model = llama(tied=False)
    assert not is_tied(model)
    assert head_parameter_names(model) == ["lm_head.weight"]
    assert train_only(model, ["@head"]) == ["lm_head.weight"] == trainable(model)


def test_head_of_a_tied_model_is_the_top_layer_and_final_norm_and_says_so(caplog):
    model = llama(tied=True)
    assert is_tied(model)
    assert decoder_layers(model)[0] == "model.layers"
    expected = [n for n, _ in model.named_parameters() if n.startswith("model.layers.2.")] + ["model.norm.weight"]
    assert len(expected) == 10  # 7 projections + 2 layer norms + the final norm
    assert top_block_names(model) == expected
    with caplog.at_level(logging.WARNING, logger="livethink.models.freezing"):
        assert train_only(model, ["@head"]) == expected == trainable(model)
    assert "tied to its input embeddings (model.embed_tokens.weight)" in caplog.text
    assert not model.get_input_embeddings().weight.requires_grad


def test_a_regex_that_matches_nothing_stays_an_error_and_names_the_output_layer():
    with pytest.raises(ValueError, match=r"\['lm_head'\] match no parameter.*model\.embed_tokens\.weight "
                                         r"\(tied to the input embeddings\), which @head resolves"):
        train_only(llama(tied=True), ["lm_head"])
    with pytest.raises(ValueError, match="unknown keyword '@output'"):
        train_only(llama(tied=False), ["@output"])
    with pytest.raises(ValueError, match="not a valid regex"):
        resolve_patterns(llama(tied=False), ["layers.(1"])


def test_all_and_mixed_patterns():
    model = llama(tied=False)
    assert train_only(model, ["@all"]) == [n for n, _ in model.named_parameters()]
    picked = train_only(model, ["@head", r"layers\.0\.self_attn\.q_proj"])
    assert picked == ["model.layers.0.self_attn.q_proj.weight", "lm_head.weight"] == trainable(model)


def test_head_of_a_moe_student_is_its_lm_head_and_the_stack_is_found():
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                               moe_intermediate_size=8, num_hidden_layers=2, num_attention_heads=2,
                                               num_key_value_heads=1, head_dim=8, num_experts=4,
                                               num_experts_per_tok=2))
    assert decoder_layers(model)[0] == "model.layers"
    assert head_parameter_names(model) == ["lm_head.weight"]
