"""The eval forces and caps as the server does: at a thinking cap c the server's vLLM engine (native
``thinking_token_budget``) and the eval's vLLM generator (the greedy completion cut by
``livethink.data.budget_forcing.forced_continuation`` and continued from those token ids) render the same prompt,
cut at the same token, force the same end and write the same reply, token for token (the tiny student, greedy,
float32, no stand-ins), at caps 0 (thinking closed at once: the path a request takes when its thinking deadline has
passed), 16, 32, 64, 128 and 256 (the serving config's most). A think block that closes on its own before the cap
gets the reply the server serves: the eval's ``served_completions`` stops it at the reply reserve where the server's
engine stops it (the tiny test student seldom closes one: ``tests/data/test_budget_forcing.py`` holds that rule on
hand-made tokens). No reply opens a second think block."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from livethink.data.budget_forcing import ForcingTokens, cut_index, served_reply_end
from livethink.data.prompt import build_messages
from tests.support.serve import liveshop_test_tasks, make_config, tiny_student_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.timeout(300),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed"),
]
CAPS = (0, 16, 32, 64, 128)
UNCAPPED = 256  # the most the tiny serving config lets a reply think (budget.max_thinking_tokens)
TASKS = 2
RESERVE = 12  # a short reply reserve, so that a naturally closed reply reaches it


def test_server_and_eval_force_the_same_reply_at_a_cap(monkeypatch):
    from livethink.eval.generation import VLLMGenerator
    from livethink.eval.harness import served_completions, thinking_cap_prompts
    from livethink.serve.budget.plan import TokenBudget
    from livethink.serve.engines.base import GenerationRequest, SamplingOptions
    from livethink.serve.engines.vllm_engine import VLLMEngine, VLLMSettings
    from livethink.serve.request_path.service import Service

    model, tasks = tiny_student_dir(), liveshop_test_tasks()[:TASKS]
    caps = (*CAPS, UNCAPPED)

    # the server: its prompt rendering, then its engine forcing the cap and stopping the reply at its reserve
    config = make_config(model, **{"engine.kind": "vllm", "budget.reply_reserve": RESERVE})
    engine = VLLMEngine(model, {"rft": None}, VLLMSettings(max_model_len=1024, dtype="float32"))
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(engine.start())
        assert engine.forcing == "native"
        service = Service(config, {"rft": engine}, {"rft": "rft"}, {"rft": 1})
        prompts = {t.id: service.tokenize("rft", build_messages(t), True, "product_docs") for t in tasks}

        async def served(task_id: str, cap: int) -> list[int]:
            request = GenerationRequest(f"parity-{task_id}-{cap}", "rft", prompts[task_id], SamplingOptions(temperature=0.0))
            budget = TokenBudget(thinking_cap=cap, reply_reserve=config.budget.reply_reserve)
            return [t async for d in engine.generate(request, budget) for t in d.token_ids]

        outs = {(t.id, cap): loop.run_until_complete(served(t.id, cap)) for t in tasks for cap in caps}
    finally:
        loop.run_until_complete(engine.stop())
        loop.close()

    # the eval: greedy completion; at a cap it is cut in token space and the reply continued from those ids, and a
    # think block that closed on its own is served as the server serves it (its engine in this process: a faster
    # start, the same kernels)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    generator = VLLMGenerator(model, max_model_len=1024, dtype="float32", kv_cache_gib=1, single_process=True)
    expected: dict[tuple[str, int], list[int]] = {}
    try:
        generations = generator.generate(tasks, max_tokens=UNCAPPED + RESERVE + 8)
        tokens = ForcingTokens.of(generator.tokenizer, generator.reasoning_format)
        texts = served_completions(generator, generations, RESERVE)
        for g in generations:
            assert list(g.prompt_ids) == prompts[g.task_id]  # the eval renders the prompt as the server does
            end = served_reply_end(g.prompt_ids, g.token_ids, tokens, RESERVE)
            kept_ids = list(g.token_ids if end is None else g.token_ids[:end])
            assert texts[g.task_id][1] == ("length" if end is not None else g.finish_reason)
            for cap in caps:
                cut, kept = thinking_cap_prompts([g], cap, tokens)
                if kept:  # thinking closed before the cap: the served completion
                    expected[g.task_id, cap] = kept_ids
                    continue
                (reply,) = generator.continue_from([cut[g.task_id]], max_tokens=RESERVE, progress=False)
                expected[g.task_id, cap] = [*cut[g.task_id][len(g.prompt_ids):], *reply.token_ids]
    finally:
        generator.close()

    for (task_id, cap), want in expected.items():
        got = [t for t in outs[task_id, cap] if t != tokens.eos]
        assert got == want, (task_id, cap)  # the same cut, forced end and reply, token for token
        cut_at = cut_index(prompts[task_id], want, cap, tokens)
        reply = want if cut_at is None else want[cut_at + len(tokens.forced_end):]
        assert tokens.start[-1] not in reply, (task_id, cap)  # no second think block
