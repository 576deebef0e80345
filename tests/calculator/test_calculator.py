"""Calculator-assisted decoding: the sums on hand-computed cases, then the digits forced in real generation
(transformers ``generate``, the wrapper TRL's rollouts go through, the serving engine, and vLLM)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from livethink.calculator.arithmetic import evaluate, next_result_char
from livethink.calculator.processors import (
    CalculatorLogitsProcessor,
    forced_mask,
    forced_token,
    result_char_token_ids,
    with_calculator,
)
from tests.support.serve import load_tokenizer, tiny_student_dir

SUM = "Subtotal: 12.50 × 3 = "  # 37.50


@pytest.mark.parametrize(("left", "op", "right", "result"), [
    ("74.70", "×", "2", "149.40"),
    ("198.90", "−", "15.00", "183.90"),
    ("120.90", "×", "0.75", "90.68"),  # 90.675: half up, as the till rounds (banker's rounding gives 90.68 too)
    ("41.25", "×", "0.5", "20.63"),  # 20.625: half up (banker's rounding would give 20.62)
    ("272.04", "−", "10%", "244.84"),  # 272.04 - 27.204 = 244.836
    ("1,299.00", "×", "0.85", "1,104.15"),  # thousands separators in and out
    ("99.99", "+", "0.01", "100.00"),
])
def test_sums_on_hand_computed_cases(left, op, right, result):
    assert evaluate(left, op, right) == result


def test_a_negative_result_is_not_a_price():
    assert evaluate("5.00", "−", "10.00") is None


def test_a_sampled_run_of_digits_is_not_a_price_and_does_not_raise():
    huge = "9" * 30
    assert evaluate(huge, "×", huge) is None  # cents() cannot quantize this: it raised and stopped GRPO's rollouts
    assert next_result_char(f"Total: {huge} × {huge} = ") is None
    assert evaluate("999,999,999,999.99", "+", "0.01") is None  # 10**12: over MAX_RESULT (10**12)
    assert evaluate("999,999,999,999.98", "+", "0.01") == "999,999,999,999.99"


@pytest.mark.parametrize(("text", "char"), [
    ("Subtotal: 67.20 × 3 = ", "2"),  # 201.60
    ("Subtotal: 67.20 × 3 = 201", "."),
    ("Subtotal: 67.20 × 3 = 201.6", "0"),
    ("Subtotal: 67.20 × 3 = 201.60", None),  # done: the model goes on
    ("Subtotal: 67.20 × 3 = 19", None),  # not a prefix of the result: never force a sum it did not start
    ("Bundle: 3 ≥ 2, 272.04 − 10% = 24", "4"),
    ("Coupon: 1,104.15 − 15.00 = 1,0", "8"),  # 1,089.15
    ("Answer: $63.00.", None),
    ("so x = ", None),
])
def test_next_result_char(text, char):
    assert next_result_char(text) == char


@pytest.fixture(scope="module")
def student():
    from transformers import AutoModelForCausalLM

    path = tiny_student_dir()
    model = AutoModelForCausalLM.from_pretrained(str(path), output_router_logits=False).eval()
    return model, load_tokenizer(path)


def _greedy(model, tokenizer, text: str, n: int, **kwargs) -> str:
    enc = tokenizer([text], return_tensors="pt", add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=n, do_sample=False, pad_token_id=tokenizer.pad_token_id, **kwargs)
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def test_transformers_generate_writes_the_result_then_lets_the_model_go_on(student):
    from transformers import LogitsProcessorList

    model, tokenizer = student
    plain = _greedy(model, tokenizer, SUM, 5)
    assert not plain.startswith("37.50")  # the untrained model does not know it
    assisted = _greedy(model, tokenizer, SUM, 8, logits_processor=LogitsProcessorList([CalculatorLogitsProcessor(tokenizer)]))
    assert assisted.startswith("37.50") and len(tokenizer.encode(assisted, add_special_tokens=False)) == 8


def test_forced_token_needs_a_pending_sum(student):
    _, tokenizer = student
    ids = result_char_token_ids(tokenizer)
    assert forced_token(tokenizer, ids, tokenizer.encode(SUM, add_special_tokens=False)) == ids["3"]
    assert forced_token(tokenizer, ids, tokenizer.encode("How much is it?", add_special_tokens=False)) is None
    assert forced_token(tokenizer, ids, []) is None


def test_forced_token_skips_decoding_only_where_no_result_can_be_pending(student):
    import random

    _, tokenizer = student
    ids = result_char_token_ids(tokenizer)
    texts = [SUM + "37.50", "Coupon: 153.60 ≥ 150.00, 153.60 − 10.00 = 143.60. Total: 1,299.00 × 0.85 = 1,104.15",
             "272.04 − 10% = 244.8 and 3 x 2 = 6, then 12 * 4 = 4 8 and 5 + 5 = 10.", "no sums here = . 1, 2"]
    rng = random.Random(0)
    vocab = len(tokenizer)
    sequences = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    sequences += [[rng.randrange(vocab) for _ in range(80)] for _ in range(30)]
    sequences += [s[:-1] + [tokenizer.eos_token_id] for s in sequences[:2]]  # a special token ends the tail
    checked = forced = 0
    for seq in sequences:
        for end in range(1, len(seq) + 1):
            tail = seq[:end][-48:]
            char = next_result_char(tokenizer.decode(tail, skip_special_tokens=True))
            assert forced_token(tokenizer, ids, seq[:end]) == (None if char is None else ids[char]), tail
            checked, forced = checked + 1, forced + (char is not None)
    assert forced >= 20 and checked > 2000


def test_forced_mask_marks_exactly_the_result_digits(student):
    _, tokenizer = student
    ids = result_char_token_ids(tokenizer)
    context = tokenizer.encode(SUM, add_special_tokens=False)
    completion = [ids[c] for c in "37.50"] + tokenizer.encode(". Then 2 × 2 = ", add_special_tokens=False) + [ids["4"]]
    assert forced_mask(tokenizer, ids, context, completion) == [True] * 5 + [False] * (len(completion) - 6) + [True]
    assert forced_mask(tokenizer, ids, [], tokenizer.encode("no sums here", add_special_tokens=False)) == [False] * len(
        tokenizer.encode("no sums here", add_special_tokens=False))


def test_with_calculator_wraps_generate_for_callers_like_trl(student):
    from transformers import AutoModelForCausalLM

    _, tokenizer = student
    model = AutoModelForCausalLM.from_pretrained(str(tiny_student_dir()), output_router_logits=False).eval()
    assert with_calculator(model, tokenizer) is model
    assert _greedy(model, tokenizer, "Coupon: 153.60 ≥ 150.00, 153.60 − 10.00 = ", 6).startswith("143.60")


def test_serving_engine_uses_the_calculator(student):
    from livethink.serve.budget.plan import TokenBudget
    from livethink.serve.engines.base import GenerationRequest, SamplingOptions
    from livethink.serve.engines.transformers_engine import TransformersEngine

    _, tokenizer = student

    async def reply(calculator: bool) -> str:
        engine = TransformersEngine("rft", tiny_student_dir(), calculator=calculator)
        await engine.start()
        try:
            req = GenerationRequest(f"calc-{calculator}", "rft", tokenizer.encode(SUM, add_special_tokens=False),
                                    SamplingOptions(temperature=0.0, ignore_eos=True))
            return "".join([d.text async for d in engine.generate(req, TokenBudget(8, 8))])
        finally:
            await engine.stop()

    assert asyncio.run(reply(True)).startswith("37.50")
    assert not asyncio.run(reply(False)).startswith("37.50")


VLLM_SCRIPT = textwrap.dedent("""
    import json, sys
    from vllm import LLM, SamplingParams
    from livethink.calculator.processors import REQUEST_FLAG
    from livethink.calculator.vllm_processor import VLLMCalculatorLogitsProcessor

    if __name__ == "__main__":
        llm = LLM(model=sys.argv[1], dtype="bfloat16", max_model_len=256, enforce_eager=True,
                  logits_processors=[VLLMCalculatorLogitsProcessor])
        prompt = "Subtotal: 12.50 × 3 = "
        on = SamplingParams(max_tokens=6, temperature=0.0, extra_args={REQUEST_FLAG: True})
        off = SamplingParams(max_tokens=6, temperature=0.0)
        outs = llm.generate([prompt, prompt], [on, off], use_tqdm=False)
        print("RESULT " + json.dumps([o.outputs[0].text for o in outs]))
""")


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed")
def test_vllm_logits_processor_forces_the_result_per_request(tmp_path):
    script = tmp_path / "calc_vllm.py"
    script.write_text(VLLM_SCRIPT)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    proc = subprocess.run([sys.executable, str(script), str(tiny_student_dir())], env=env, capture_output=True,
                          text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-4000:]
    on, off = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert on.startswith("37.50")  # only the request that asked for the calculator
    assert not off.startswith("37.50")
