"""ReasoningFormat: one place for a model's reasoning delimiters, used by parsing, serving and training."""

from __future__ import annotations

import json

import pytest

from livethink.data.reasoning_format import (
    FORMAT_FILE,
    NONE,
    THINK,
    ReasoningFormat,
    detect,
    parse_setting,
    resolve,
)
from livethink.rewards.parse import parse_completion
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.engines.base import ThinkingGuard
from livethink.serve.engines.vllm_engine import kv_cache_env
from livethink.serve.request_path.reasoning import ThinkSplitter

SEED = ReasoningFormat("<seed:think>", "</seed:think>")


class _Tok:
    def __init__(self, vocab: dict[str, int], template: str | None = None):
        self._vocab, self.chat_template = vocab, template

    def get_vocab(self) -> dict[str, int]:
        return self._vocab


def test_layout_of_each_format():
    assert THINK.format_completion(" a ", " b ") == "<think>\na\n</think>\n\nb"
    assert SEED.format_completion("a", "b") == "<seed:think>\na\n</seed:think>\n\nb"
    assert NONE.format_completion("ignored", " b ") == "b"
    assert THINK.forced_end == "\n</think>\n\n" and NONE.forced_end == ""
    assert THINK.prefill == "<think>\n" and NONE.prefill == ""


@pytest.mark.parametrize("start,end", [("<a>", ""), ("", "</a>"), ("x", "x")])
def test_inconsistent_delimiters_are_refused(start, end):
    with pytest.raises(ValueError, match="reasoning"):
        ReasoningFormat(start, end)


def test_settings_name_the_field():
    assert parse_setting("auto") is None and parse_setting(None) is None
    assert parse_setting("none") == NONE and parse_setting("think") == THINK
    assert parse_setting({"start": "<r>", "end": "</r>"}) == ReasoningFormat("<r>", "</r>")
    with pytest.raises(ValueError, match=r"models\.rft\.reasoning: 'thinking' is not one of"):
        parse_setting("thinking", field="models.rft.reasoning")
    with pytest.raises(ValueError, match="unknown key"):
        parse_setting({"start": "<r>", "stop": "</r>"})
    with pytest.raises(ValueError, match="set both start and end"):
        parse_setting({"start": "<r>"})


def test_detection_from_the_tokenizer():
    assert detect(_Tok({"</think>": 5}))[0] == THINK  # Qwen3: the token
    assert detect(_Tok({}, "{{ '<|Assistant|><think>\\n' }}"))[0] == THINK  # DeepSeek-R1 distills: the template
    fmt, why = detect(_Tok({"hello": 1}, "{{ messages }}"))  # SmolLM2, Llama, Mistral: no delimiters
    assert fmt == NONE and "no reasoning delimiters" in why
    assert detect(None)[0] == NONE


def test_resolution_order(tmp_path):
    tok = _Tok({"</think>": 5})
    assert resolve("none", tok, tmp_path) == (NONE, "set in the config")
    SEED.save(tmp_path)
    assert json.loads((tmp_path / FORMAT_FILE).read_text()) == {"start": "<seed:think>", "end": "</seed:think>"}
    assert resolve("auto", tok, tmp_path)[0] == SEED  # the checkpoint's own file beats the tokenizer
    assert resolve("auto", tok, tmp_path / "missing")[0] == THINK
    assert resolve("auto", None, None, tmp_path / "missing")[0] == NONE


def test_an_adapter_carries_the_format_its_base_lacks(tmp_path):
    adapter, base = tmp_path / "adapter", tmp_path / "base"
    adapter.mkdir(), base.mkdir()
    THINK.save(adapter)
    fmt, source = resolve("auto", _Tok({"hello": 1}), adapter, base)
    assert fmt == THINK and str(adapter) in source
    assert resolve("auto", _Tok({"hello": 1}), base)[0] == NONE


def test_parse_with_multi_token_and_no_delimiters():
    text = SEED.format_completion("price is 39", "It costs $39.")
    parsed = parse_completion(text, SEED)
    assert (parsed.reasoning, parsed.reply, parsed.closed) == ("price is 39", "It costs $39.", True)
    cut = parse_completion("<seed:think>\nstill thinking", SEED)
    assert (cut.reply, cut.closed) == ("", False)
    plain = parse_completion("<think>not a delimiter here</think> It costs $39.", NONE)
    assert plain.reply == "<think>not a delimiter here</think> It costs $39." and plain.reasoning == ""


def test_splitter_with_a_delimiter_split_across_deltas():
    splitter = ThinkSplitter(fmt=SEED)
    pieces = []
    for delta in ["check the ", "price</seed:", "thi", "nk>\n\nIt costs ", "$39."]:
        pieces += splitter.feed(delta)
    pieces += splitter.flush()
    assert splitter.reasoning == "check the price" and splitter.reply == "It costs $39."
    assert all("seed" not in text for _, text in pieces)


def test_splitter_of_a_model_that_does_not_think():
    splitter = ThinkSplitter(phase="reasoning", fmt=NONE)
    splitter.feed("</think> It costs $39.")
    assert splitter.reasoning == "" and splitter.reply == "</think> It costs $39."


def test_guard_on_a_multi_token_end_string():
    budget = TokenBudget(thinking_cap=100, reply_reserve=3)
    guard = ThinkingGuard(None, budget, close_text="</seed:think>")
    guard.observe([1, 2], "look </se")
    assert guard.thinking and guard.count == 2
    guard.observe([3], "ed:think>")
    assert not guard.thinking and guard.count == 3  # the delta that completes the end counts as reasoning
    guard.observe([4, 5, 6], "It costs")
    assert guard.reply_count == 3 and guard.reply_done


def test_guard_forces_at_the_cap_whatever_the_delimiter():
    guard = ThinkingGuard(None, TokenBudget(thinking_cap=2, reply_reserve=1), close_text="</r>")
    guard.observe([1, 2], "ab")
    assert guard.must_force()


def test_kv_cache_reaches_vllm_as_a_whole_number():
    assert kv_cache_env(1, {}) == "1"
    assert kv_cache_env(None, {}) is None
    assert kv_cache_env(4, {"VLLM_CPU_KVCACHE_SPACE": "2"}) == "2"  # the operator's variable wins
    with pytest.raises(ValueError, match=r"VLLM_CPU_KVCACHE_SPACE='1\.0'"):
        kv_cache_env(1, {"VLLM_CPU_KVCACHE_SPACE": "1.0"})


def test_the_first_engine_output_gives_a_piece_even_when_the_splitter_holds_it_back():
    """A stream's first chunk leaves with the first engine output: a think tag the splitter holds back still
    gives one (empty) piece, and only the first output does."""
    from livethink.serve.engines.base import Delta
    from livethink.serve.request_path.generation import Piece, Progress

    progress = Progress(ThinkSplitter(phase="reasoning"))
    assert progress.take(Delta("<think>", 1), 1.0) == [Piece("reasoning", "")]
    assert progress.t_first == 1.0 and progress.first_tokens == 1
    assert progress.take(Delta("<", 1), 1.1) == []  # held back again, and not the first output
    assert progress.take(Delta("/think>Hi.", 2), 1.2) == [Piece("reply", "Hi.")]
