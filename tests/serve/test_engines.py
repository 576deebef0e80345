"""Engines: budget forcing, cancellation and deadlines on the transformers engine (real tiny student), the vLLM
engine's forcing logic against a scripted stand-in for ``AsyncLLM`` (native and two-phase), and the server on
the transformers engine driven by the official OpenAI client."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import httpx
import openai
import pytest

from livethink.data.prompt import THINK_CLOSE, THINK_OPEN
from livethink.rewards.parse import parse_completion
from livethink.serve.api.app import create_app
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.engines.base import FORCED_THINK_END, GenerationRequest, SamplingOptions
from livethink.serve.engines.transformers_engine import TransformersEngine
from tests.support.serve import ServerThread, load_tokenizer, make_config, tiny_student_dir

pytestmark = [pytest.mark.timing, pytest.mark.timeout(180)]
GREEDY_LONG = SamplingOptions(temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(tiny_student_dir())


def _prompt(tokenizer, thinking: bool = True) -> list[int]:
    messages = [
        {"role": "system", "content": "You sell hoodies."},
        {"role": "user", "content": "How much is it?"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text + (f"{THINK_OPEN}\n" if thinking else ""), add_special_tokens=False)


async def _collect(agen, stop_after: int | None = None):
    deltas = []
    async for d in agen:
        deltas.append(d)
        if stop_after is not None and len(deltas) >= stop_after:
            break
    return deltas


# -- transformers engine ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hf_engine():
    engine = TransformersEngine("rft", tiny_student_dir())
    loop = asyncio.new_event_loop()
    loop.run_until_complete(engine.start())
    yield engine, loop
    loop.run_until_complete(engine.stop())
    loop.close()


def test_transformers_engine_runs_where_the_config_says(tokenizer):
    """engine.transformers_device / transformers_dtype reach the engine: the weights load there, and decoding
    (inputs built on that device, tokens sampled on the host) works in that precision."""
    import torch

    from livethink.serve.engines import build_engines

    config = make_config(tiny_student_dir(), **{"engine.transformers_device": "cpu",
                                                "engine.transformers_dtype": "bfloat16"})
    engine = build_engines(config).engines["rft"]
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(engine.start())
        param = next(engine.model.parameters())
        assert engine.device == "cpu" and param.device == torch.device("cpu") and param.dtype == torch.bfloat16
        req = GenerationRequest("dev-1", "rft", _prompt(tokenizer), GREEDY_LONG)
        deltas = loop.run_until_complete(_collect(engine.generate(req, TokenBudget(thinking_cap=4, reply_reserve=4))))
        assert sum(d.tokens for d in deltas) > 4 and deltas[-1].finish_reason == "length"
    finally:
        loop.run_until_complete(engine.stop())
        loop.close()


def test_transformers_budget_forcing_closes_the_think_block_then_replies(hf_engine, tokenizer):
    engine, loop = hf_engine
    req = GenerationRequest("bf-1", "rft", _prompt(tokenizer), GREEDY_LONG)
    deltas = loop.run_until_complete(
        _collect(engine.generate(req, TokenBudget(thinking_cap=5, reply_reserve=6)))
    )
    text = "".join(d.text for d in deltas)
    assert text.count(THINK_CLOSE) == 1
    assert sum(d.forced_end_of_thinking for d in deltas) == 1
    # the pre-filled newline counts towards the cap (livethink.data.budget_forcing): 4 generated thinking tokens
    assert deltas[-1].finish_reason == "length" and deltas[-1].thinking_tokens == 5
    parsed = parse_completion(f"{THINK_OPEN}\n{text}")
    assert parsed.closed and parsed.reasoning and parsed.reply
    assert text.index(FORCED_THINK_END) > 0  # reasoning first, then the forced end, then the reply
    assert (
        sum(d.tokens for d in deltas)
        == 4 + len(tokenizer.encode(FORCED_THINK_END, add_special_tokens=False)) + 6
    )
    ids = [t for d in deltas for t in d.token_ids]  # each delta's token ids: thinking, the forced end, the reply
    end_ids = tokenizer.encode(FORCED_THINK_END, add_special_tokens=False)
    assert len(ids) == sum(d.tokens for d in deltas) and ids[4 : 4 + len(end_ids)] == end_ids


def test_transformers_thinking_deadline_and_zero_cap_force_at_once(hf_engine, tokenizer):
    engine, loop = hf_engine
    for i, budget in enumerate(
        [TokenBudget(50, 4, thinking_deadline=time.monotonic() - 1), TokenBudget(0, 4)]
    ):
        req = GenerationRequest(f"bf-now-{i}", "rft", _prompt(tokenizer), GREEDY_LONG)
        deltas = loop.run_until_complete(_collect(engine.generate(req, budget)))
        assert deltas[0].forced_end_of_thinking and deltas[0].text == FORCED_THINK_END
        assert deltas[-1].thinking_tokens == 1  # the pre-filled newline


def test_transformers_engine_never_opens_a_second_think_block(hf_engine, tokenizer):
    """Forced after a token or two, small students open a new think block at once; the server cannot speak a
    reply inside one, so the reasoning start is banned once the prompt opened thinking (fault injection: the
    model's logits pushed towards ``<think>``)."""
    import torch

    engine, loop = hf_engine
    start = tokenizer.convert_tokens_to_ids(THINK_OPEN)
    boost = torch.zeros(engine.model.config.vocab_size)
    boost[start] = 1e4
    hook = engine.model.lm_head.register_forward_hook(lambda module, args, out: out + boost.to(out.dtype))
    try:
        req = GenerationRequest("reopen", "rft", _prompt(tokenizer), GREEDY_LONG)
        deltas = loop.run_until_complete(_collect(engine.generate(req, TokenBudget(thinking_cap=3, reply_reserve=6))))
    finally:
        hook.remove()
    ids = [t for d in deltas for t in d.token_ids]
    assert start not in ids and sum(d.forced_end_of_thinking for d in deltas) == 1
    assert parse_completion(f"{THINK_OPEN}\n" + "".join(d.text for d in deltas)).reply


def test_transformers_abort_and_cancel_free_the_engine(hf_engine, tokenizer):
    engine, loop = hf_engine

    async def abort_midway():
        req = GenerationRequest("ab-1", "rft", _prompt(tokenizer), GREEDY_LONG)
        deltas = []
        async for d in engine.generate(req, TokenBudget(500, 400)):
            deltas.append(d)
            if len(deltas) == 3:
                await engine.abort("ab-1")
        return deltas

    deltas = loop.run_until_complete(abort_midway())
    assert deltas[-1].finish_reason == "abort" and len(deltas) < 20
    # closing the iterator (what a deadline or a disconnect does) stops the decode loop too
    req = GenerationRequest("cancel-1", "rft", _prompt(tokenizer), GREEDY_LONG)
    agen = engine.generate(req, TokenBudget(500, 400))
    loop.run_until_complete(_collect(agen, stop_after=3))
    loop.run_until_complete(agen.aclose())
    end = time.monotonic() + 5
    while engine.stats().engine_unfinished and time.monotonic() < end:
        time.sleep(0.02)
    assert engine.stats().engine_unfinished == 0 and engine.stats().running == 0


# -- vLLM engine logic against a scripted AsyncLLM --------------------------------------------------------
class ScriptedLLM:
    """Stands in for ``AsyncLLM``: one token per output, honouring max_tokens, stop_token_ids and (native)
    ``thinking_token_budget`` like vLLM does (forced end once pre-filled + generated reasoning hits the cap)."""

    def __init__(self, tokenizer, close_at: int | None = None, token_s: float = 0.0):
        self.tok = tokenizer
        self.close_id = tokenizer.convert_tokens_to_ids(THINK_CLOSE)
        self.open_id = tokenizer.convert_tokens_to_ids(THINK_OPEN)
        self.end_ids = tokenizer.encode(FORCED_THINK_END, add_special_tokens=False)
        self.word = tokenizer.encode(" price", add_special_tokens=False)[0]
        self.close_at, self.token_s = close_at, token_s
        self.calls: list[tuple[list[int], object, str]] = []
        self.aborted: list[str] = []
        self.output_processor = SimpleNamespace(get_num_unfinished_requests=lambda: 0)

    async def generate(self, prompt, params, request_id, lora_request=None):
        ids = prompt["prompt_token_ids"]
        self.calls.append((ids, params, request_id))
        budget = getattr(params, "thinking_token_budget", None)
        in_think = self.open_id in ids and (self.close_id not in ids[ids.index(self.open_id) :])
        think = len(ids) - 1 - max(i for i, t in enumerate(ids) if t == self.open_id) if in_think else 0
        forcing: list[int] = []
        out: list[int] = []
        try:
            while len(out) < params.max_tokens:
                await asyncio.sleep(self.token_s)
                if forcing:
                    tid = forcing.pop(0)
                elif in_think and budget is not None and think >= budget:
                    forcing = list(self.end_ids)
                    tid = forcing.pop(0)
                elif in_think and self.close_at is not None and len(out) == self.close_at:
                    tid = self.close_id
                else:
                    tid = self.word
                out.append(tid)
                if tid == self.close_id:
                    in_think = False
                elif in_think:
                    think += 1
                stop = tid in (params.stop_token_ids or [])
                done = stop or len(out) >= params.max_tokens
                text = "" if stop else self.tok.decode([tid])
                comp = SimpleNamespace(
                    text=text, token_ids=[tid], finish_reason=("stop" if stop else "length") if done else None
                )
                yield SimpleNamespace(outputs=[comp], finished=done)
                if done:
                    return
        except (asyncio.CancelledError, GeneratorExit):  # what vLLM's generate() turns into an abort
            self.aborted.append(request_id)
            raise

    async def abort(self, ids):
        self.aborted.extend(i for i in ids if i not in self.aborted)


def _vllm_engine(tokenizer, llm, forcing):
    from livethink.serve.engines.vllm_engine import VLLMEngine, VLLMSettings

    engine = VLLMEngine("unused", {"rft": None}, VLLMSettings())
    engine._llm, engine._tokenizer, engine.forcing = llm, tokenizer, forcing
    engine._close_id, engine._open_id, engine._end_ids = llm.close_id, llm.open_id, llm.end_ids
    return engine


def _run(engine, tokenizer, budget, rid="r"):
    req = GenerationRequest(rid, "rft", _prompt(tokenizer), SamplingOptions())
    return asyncio.run(_collect(engine.generate(req, budget)))


def test_vllm_native_forcing_is_detected(tokenizer):
    llm = ScriptedLLM(tokenizer)
    deltas = _run(_vllm_engine(tokenizer, llm, "native"), tokenizer, TokenBudget(5, 6))
    assert len(llm.calls) == 1 and llm.calls[0][1].thinking_token_budget == 5
    assert sum(d.forced_end_of_thinking for d in deltas) == 1
    text = "".join(d.text for d in deltas)
    assert text.count(THINK_CLOSE) == 1 and parse_completion(f"{THINK_OPEN}\n{text}").reply
    assert deltas[-1].thinking_tokens == 5  # the pre-filled newline + 4 generated: the cap (the forced end is not thinking)


def test_vllm_native_natural_close_is_not_forced_and_reply_is_capped(tokenizer):
    llm = ScriptedLLM(tokenizer, close_at=2)
    deltas = _run(_vllm_engine(tokenizer, llm, "native"), tokenizer, TokenBudget(50, 6))
    assert not any(d.forced_end_of_thinking for d in deltas)
    assert sum(d.tokens for d in deltas) == 2 + 1 + 6  # the reply stops at its reserve, not at max_tokens
    assert llm.aborted  # the engine request was stopped early


def test_vllm_two_phase_continuation(tokenizer):
    llm = ScriptedLLM(tokenizer)
    deltas = _run(_vllm_engine(tokenizer, llm, "two_phase"), tokenizer, TokenBudget(5, 6))
    (p1, params1, _), (p2, params2, _) = llm.calls
    # the pre-filled newline counts towards the cap (livethink.data.budget_forcing): 4 generated thinking tokens
    assert params1.max_tokens == 4 and params1.stop_token_ids == [llm.close_id]
    assert params1.bad_words == params2.bad_words == [THINK_OPEN]  # no second think block, in either phase
    assert p2 == p1 + [llm.word] * 4 + llm.end_ids and params2.max_tokens == 6
    assert sum(d.forced_end_of_thinking for d in deltas) == 1
    assert [t for d in deltas for t in d.token_ids][: len(p2) - len(p1)] == p2[len(p1):]  # ids as continued from
    assert parse_completion(f"{THINK_OPEN}\n" + "".join(d.text for d in deltas)).reply


def test_vllm_two_phase_natural_close(tokenizer):
    llm = ScriptedLLM(tokenizer, close_at=3)
    deltas = _run(_vllm_engine(tokenizer, llm, "two_phase"), tokenizer, TokenBudget(20, 6))
    (p1, _, _), (p2, _, _) = llm.calls
    assert p2 == p1 + [llm.word] * 3 + llm.end_ids
    assert not any(d.forced_end_of_thinking for d in deltas)
    assert "".join(d.text for d in deltas).count(THINK_CLOSE) == 1


@pytest.mark.parametrize("forcing", ["native", "two_phase"])
def test_vllm_thinking_deadline_aborts_and_continues(tokenizer, forcing):
    llm = ScriptedLLM(tokenizer, token_s=0.02)
    budget = TokenBudget(500, 4, thinking_deadline=time.monotonic() + 0.15)
    deltas = _run(_vllm_engine(tokenizer, llm, forcing), tokenizer, budget, rid="slow")
    assert len(llm.calls) == 2 and "slow-0" in llm.aborted
    assert sum(d.forced_end_of_thinking for d in deltas) == 1
    assert 2 <= deltas[-1].thinking_tokens < 20


def test_vllm_zero_cap_goes_straight_to_the_reply(tokenizer):
    llm = ScriptedLLM(tokenizer)
    deltas = _run(_vllm_engine(tokenizer, llm, "native"), tokenizer, TokenBudget(0, 4))
    assert len(llm.calls) == 1 and llm.calls[0][0][-len(llm.end_ids) :] == llm.end_ids
    assert deltas[0].forced_end_of_thinking and deltas[-1].thinking_tokens == 1  # the pre-filled newline


# -- the server on the transformers engine ----------------------------------------------------------------
@pytest.fixture(scope="module")
def hf_server():
    server = ServerThread(create_app(make_config(tiny_student_dir(), **{"engine.warmup": True})))
    yield server
    server.close()


def test_openai_client_on_the_transformers_engine(hf_server):
    client = openai.OpenAI(base_url=f"{hf_server.url}/v1", api_key="unused", max_retries=0, timeout=30)
    resp = client.chat.completions.create(
        model="rft",
        messages=[{"role": "user", "content": "Is it in stock?"}],
        max_tokens=24,
        extra_body={"thinking_token_budget": 8},
    )
    assert resp.usage.completion_tokens <= 24 + 4
    assert resp.usage.completion_tokens_details.reasoning_tokens <= 8
    assert resp.model_extra["livethink"]["budget"]["thinking_cap"] <= 8
    chunks = list(
        client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Hi"}], max_tokens=12, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_deadline_holds_on_the_transformers_engine(hf_server):
    with httpx.Client(timeout=10) as http:
        body = {
            "model": "rft",
            "messages": [{"role": "user", "content": "Tell me everything."}],
            "deadline_ms": 500,
            "ignore_eos": True,
            "max_tokens": 500,
        }
        for _ in range(3):
            t0 = time.monotonic()
            r = http.post(f"{hf_server.url}/v1/chat/completions", json=body)
            elapsed = (time.monotonic() - t0) * 1000
            assert r.status_code in (200, 429), r.text
            if r.status_code == 200:
                lt = r.json()["livethink"]
                assert lt["deadline_met"] and lt["timings"]["e2e_ms"] <= 500
                assert elapsed <= 500 + 100
        end = time.monotonic() + 3  # the decode thread stops at its next token after the cut
        while (engine := http.get(f"{hf_server.url}/v1/admin/status").json()["engines"]["rft"])[
            "engine_unfinished"
        ]:
            assert time.monotonic() < end, engine
            time.sleep(0.02)


def test_vllm_settings_take_the_engine_config_fields_by_name():
    from livethink.serve.config import EngineConfig
    from livethink.serve.engines.vllm_settings import FROM_ENGINE_CONFIG, VLLMSettings

    e = EngineConfig(dtype="float16", max_model_len=2048, kv_cache_gib=2, max_num_seqs=8, budget_forcing="two_phase",
                     calculator=True)
    s = VLLMSettings.from_engine_config(e, reasoning="think")
    assert all(getattr(s, name) == getattr(e, name) for name in FROM_ENGINE_CONFIG)
    assert (s.dtype, s.max_model_len, s.max_num_seqs, s.calculator, s.reasoning, s.seed) == ("float16", 2048, 8, True,
                                                                                              "think", 0)
