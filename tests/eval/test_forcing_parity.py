"""The eval's thinking-cap curve forces as the server does: at a cap c the server's vLLM engine (native
``thinking_token_budget``) and the eval's vLLM generator (the greedy completion cut by
``livethink.data.budget_forcing.forced_continuation`` and continued from those token ids) render the same prompt,
cut at the same token, force the same end and write the same reply, token for token (the tiny student, greedy,
float32, no stand-ins). At cap 16 the server forces inside vLLM (native); at cap 0 it closes thinking at once and
continues (the path a request takes when its thinking deadline has passed). Neither reply opens a second think
block."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from livethink.data.budget_forcing import REPLY_RESERVE, ForcingTokens, cut_index
from livethink.data.prompt import build_messages
from tests.support.serve import liveshop_test_tasks, make_config, tiny_student_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.timeout(300),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed"),
]
CAPS = (16, 0)


def test_server_and_eval_force_the_same_reply_at_a_cap(monkeypatch):
    from livethink.eval.generation import VLLMGenerator
    from livethink.eval.harness import thinking_cap_prompts
    from livethink.serve.budget.plan import TokenBudget
    from livethink.serve.engines.base import GenerationRequest, SamplingOptions
    from livethink.serve.engines.vllm_engine import VLLMEngine, VLLMSettings
    from livethink.serve.request_path.service import Service

    model, task = tiny_student_dir(), liveshop_test_tasks()[0]

    # the server: its prompt rendering, then its engine forcing the cap
    config = make_config(model, **{"engine.kind": "vllm"})
    engine = VLLMEngine(model, {"rft": None}, VLLMSettings(max_model_len=1024, dtype="float32"))
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(engine.start())
        assert engine.forcing == "native"
        service = Service(config, {"rft": engine}, {"rft": "rft"}, {"rft": 1})
        prompt = service.tokenize("rft", build_messages(task), True, "product_docs")

        async def served(cap: int) -> list[int]:
            request = GenerationRequest(f"parity-{cap}", "rft", prompt, SamplingOptions(temperature=0.0))
            budget = TokenBudget(thinking_cap=cap, reply_reserve=config.budget.reply_reserve)
            return [t async for d in engine.generate(request, budget) for t in d.token_ids]

        outs = {cap: loop.run_until_complete(served(cap)) for cap in CAPS}
    finally:
        loop.run_until_complete(engine.stop())
        loop.close()

    # the eval: greedy completion, cut at the cap in token space, the reply continued from those ids (its engine
    # in this process: a faster start, the same kernels)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    generator = VLLMGenerator(model, max_model_len=1024, dtype="float32", kv_cache_gib=1, single_process=True)
    try:
        (g,) = generator.generate([task], max_tokens=max(CAPS) + 8)
        tokens = ForcingTokens.of(generator.tokenizer, generator.reasoning_format)
        replies = {}
        for cap in CAPS:
            cut_at = cut_index(g.prompt_ids, g.token_ids, cap, tokens)
            assert cut_at is not None and cut_at <= len(g.token_ids), "the completion must be cut at the cap"
            cut, kept = thinking_cap_prompts([g], cap, tokens)
            assert kept == []
            (reply,) = generator.continue_from([cut[task.id]], max_tokens=REPLY_RESERVE, progress=False)
            replies[cap] = (cut[task.id][len(g.prompt_ids):], list(reply.token_ids))  # thinking kept + forced end
    finally:
        generator.close()

    assert prompt == list(g.prompt_ids)  # the eval renders the prompt as the server does
    assert config.budget.reply_reserve == REPLY_RESERVE
    for cap, (forced, reply) in replies.items():
        out = outs[cap]
        assert out[: len(forced)] == forced, cap  # the same cut, the same forced end
        server_reply = [t for t in out[len(forced):] if t != tokens.eos]
        assert server_reply == reply, cap  # the same reply, token for token, with the same reserve
        assert tokens.start[-1] not in reply, cap  # no second think block
