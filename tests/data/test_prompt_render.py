"""The one prompt renderer (``livethink.data.prompt.render_prompt``): the chat template, the reasoning prefill
when thinking (once, also under a template that opens the block itself), ``enable_thinking=False`` otherwise."""

from __future__ import annotations

import copy

import pytest

from livethink.data.prompt import completion_prefix, render_prompt, render_prompt_ids
from livethink.data.reasoning_format import NONE, THINK, ReasoningFormat

MESSAGES = [{"role": "system", "content": "You sell hoodies."}, {"role": "user", "content": "How much is it?"}]
GENERATION_PROMPT = "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def tokenizer(liveshop_small):
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    return train_tokenizer(corpus_from_tasks(liveshop_small.tasks["train"][:50]), vocab_size=400)


def test_thinking_prompt_ends_inside_the_reasoning(tokenizer):
    text = render_prompt(tokenizer, MESSAGES, THINK, thinking=True)
    assert text.endswith(GENERATION_PROMPT + "<think>\n")
    assert text.startswith("<|im_start|>system\nYou sell hoodies.<|im_end|>\n")
    assert render_prompt_ids(tokenizer, MESSAGES, THINK, True) == tokenizer.encode(text, add_special_tokens=False)
    assert completion_prefix(THINK, True) == "<think>\n" and completion_prefix(THINK, False) == ""


def test_not_thinking_asks_the_template_to_close_the_block(tokenizer):
    text = render_prompt(tokenizer, MESSAGES, THINK, thinking=False)
    assert text.endswith(GENERATION_PROMPT + "<think>\n\n</think>\n\n")  # the student's template, enable_thinking=False
    # an explicit template argument wins
    assert render_prompt(tokenizer, MESSAGES, THINK, False, enable_thinking=True).endswith(GENERATION_PROMPT)


def test_a_model_that_does_not_think_gets_the_plain_template(tokenizer):
    plain = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert render_prompt(tokenizer, MESSAGES, NONE, thinking=True) == plain
    assert render_prompt(tokenizer, MESSAGES, NONE, thinking=False) == plain
    assert completion_prefix(NONE, True) == ""


def test_prefill_of_another_format_and_a_template_that_opens_the_block(tokenizer):
    seed = ReasoningFormat("<seed:think>", "</seed:think>")
    assert render_prompt(tokenizer, MESSAGES, seed, thinking=True).endswith(GENERATION_PROMPT + "<seed:think>\n")
    opening = copy.deepcopy(tokenizer)  # a DeepSeek-R1-like template: the generation prompt opens <think> itself
    opening.chat_template = tokenizer.chat_template.replace(
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}",
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}")
    assert opening.chat_template != tokenizer.chat_template
    text = render_prompt(opening, MESSAGES, THINK, thinking=True)
    assert text.endswith(GENERATION_PROMPT + "<think>\n") and text.count("<think>") == 1
