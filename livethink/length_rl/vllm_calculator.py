"""Calculator-assisted rollouts in TRL's colocated vLLM engine (thin plumbing, no fork of TRL).

Three pieces:

- the trainer builds TRL's engine with livethink's vLLM logits processor (``VLLMCalculatorLogitsProcessor``,
  through ``trl_compat.patch_llm_constructor``). It only acts on requests that ask for it.
- ``calculator_generation_kwargs``: each rollout request asks for it (``SamplingParams.extra_args``, passed through
  TRL's ``generation_kwargs``).
- ``patch_forced_logprobs``: the digits the calculator forced come back with NaN sampling log-probs. TRL treats
  NaN as "vLLM could not score this token": importance ratio 1 and no part in its divergence metrics. Left as
  vLLM reports them (log-prob 0: the processor left one token possible), they would enter TRL's default
  sequence-level importance ratio and scale the whole rollout's loss by the probability the policy gave the
  digits, often close to zero. The trainer already leaves the forced digits out of the loss (``tool_mask``).
"""

from __future__ import annotations

import math
from typing import Any

from livethink.calculator.processors import REQUEST_FLAG, forced_mask


def calculator_generation_kwargs(generation_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """``generation_kwargs`` (TRL's extra ``SamplingParams``) with the calculator turned on for every request."""
    merged = dict(generation_kwargs or {})
    merged["extra_args"] = {**(merged.get("extra_args") or {}), REQUEST_FLAG: True}
    return merged


def nan_forced_logprobs(logprobs: list[list[list[float]]], forced: list[list[bool]]) -> list[list[list[float]]]:
    """Per completion and token, the top-k sampling log-probs, NaN where the calculator forced the token."""
    return [[[math.nan] * len(top) if is_forced else top for top, is_forced in zip(seq, mask, strict=True)]
            for seq, mask in zip(logprobs, forced, strict=True)]


def patch_forced_logprobs(generation: Any, tokenizer: Any, char_ids: dict[str, int]) -> None:
    """Wrap ``generation.generate`` (a TRL ``VLLMGeneration``) so forced digits report NaN sampling log-probs.

    ``char_ids``: ``result_char_token_ids(tokenizer)``. Colocate mode returns one prompt per completion."""
    # imported here, so that checking a config (calculator_generation_kwargs) imports no trainer and no vLLM
    from livethink.length_rl.trl_compat import wrap_vllm_generate

    def after(result: tuple) -> tuple:
        prompt_ids, completion_ids, logprobs, logprob_token_ids = result
        if logprobs is not None:
            forced = [forced_mask(tokenizer, char_ids, prompt, completion)
                      for prompt, completion in zip(prompt_ids, completion_ids, strict=True)]
            logprobs = nan_forced_logprobs(logprobs, forced)
        return prompt_ids, completion_ids, logprobs, logprob_token_ids

    wrap_vllm_generate(generation, after)
