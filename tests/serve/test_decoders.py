"""The transformers engine's decoders on the real tiny student (CPU): the static-cache step that a GPU captures as a
CUDA graph decodes the same greedy tokens as the eager loop, and the engine says which decoder it uses and why.
The capture itself needs CUDA: ``tests/models/test_cuda.py``."""

from __future__ import annotations

import asyncio

import pytest
import torch

from livethink.engines import load_generation_model
from livethink.serve.budget.plan import TokenBudget
from livethink.serve.engines.base import GenerationRequest, SamplingOptions
from livethink.serve.engines.decoders import DynamicDecoder, GraphDecoder
from livethink.serve.engines.transformers_engine import TransformersEngine
from tests.support.serve import tiny_student_dir

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def student():
    model, tokenizer, device = load_generation_model(tiny_student_dir(), device="cpu")
    return model, tokenizer


def _greedy(decoder, prompt: list[int], steps: int, forced: list[int]) -> list[int]:
    """Greedy tokens; after the 5th, ``forced`` is fed in one call (as the engine feeds a forced end of thinking)."""
    out: list[int] = []
    pending = prompt
    with torch.inference_mode():
        for i in range(steps):
            token = int(decoder.feed(pending).argmax())
            out.append(token)
            pending = [token] + (forced if i == 4 else [])
            out += forced if i == 4 else []
    return out


def test_static_cache_step_decodes_the_eager_loops_tokens(student):
    model, tokenizer = student
    prompt = tokenizer.encode("How much is the red hoodie in size M?", add_special_tokens=False)
    forced = tokenizer.encode("\n</think>\n\n", add_special_tokens=False)
    eager = _greedy(DynamicDecoder(model, "cpu"), prompt, 24, forced)
    static = GraphDecoder(model, 128, capture=False)
    assert not static.captured
    assert _greedy(static.begin(), prompt, 24, forced) == eager
    assert static.length == len(prompt) + 24 + len(forced) - 1  # the last sampled token is not fed
    # a second sequence on the same decoder starts from an empty cache
    assert _greedy(static.begin(), prompt, 24, forced) == eager


def test_static_cache_refuses_what_does_not_fit(student):
    model, _ = student
    decoder = GraphDecoder(model, 8, capture=False)
    with pytest.raises(ValueError, match="needs 1..8"):
        decoder.begin().feed(list(range(9)))
    with torch.inference_mode():
        decoder.begin().feed(list(range(8)))
        with pytest.raises(ValueError, match="8 positions are full"):
            decoder.step(1)


def _collect(engine, loop, budget, rid):
    prompt = engine.tokenizer.encode("How much is it?", add_special_tokens=False)
    request = GenerationRequest(rid, "rft", prompt, SamplingOptions(temperature=0.0, ignore_eos=True))

    async def run():
        return [d async for d in engine.generate(request, budget)]

    return loop.run_until_complete(run())


def test_engine_decodes_with_the_static_step_when_the_request_fits():
    """The engine's loop on a static-cache decoder (what a GPU replays) gives the eager loop's deltas, budget
    forcing included; a request longer than the cache decodes eagerly and is counted."""
    engine = TransformersEngine("rft", tiny_student_dir(), cuda_graph=True, device="cpu")
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(engine.start())
        stats = engine.stats().extra
        assert stats["decode"] == "eager (CUDA graphs need a CUDA device; this engine is on cpu)"
        budget = TokenBudget(thinking_cap=6, reply_reserve=8)
        eager = _collect(engine, loop, budget, "eager")
        engine._graph = GraphDecoder(engine.model, 64, capture=False)  # the path a captured graph takes
        static = _collect(engine, loop, budget, "static")
        assert [(d.text, d.token_ids, d.forced_end_of_thinking) for d in static] == \
               [(d.text, d.token_ids, d.forced_end_of_thinking) for d in eager]
        assert sum(d.forced_end_of_thinking for d in static) == 1 and engine.stats().extra["eager_too_long"] == 0
        long = _collect(engine, loop, TokenBudget(thinking_cap=60, reply_reserve=8), "long")
        assert long[-1].finish_reason == "length" and engine.stats().extra["eager_too_long"] == 1
    finally:
        loop.run_until_complete(engine.stop())
        loop.close()
