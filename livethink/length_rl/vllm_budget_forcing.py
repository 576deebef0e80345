"""Budget-forced rollouts in TRL's colocated vLLM engine (thin plumbing over ``budget_rollouts``).

- ``VLLMBudgetForcingLogitsProcessor``: loaded into the engine TRL builds; it acts only on requests whose
  ``SamplingParams.extra_args`` carry a cap (``budget_rollouts.REQUEST_KEY``).
- ``patch_budget_requests``: TRL sends one ``SamplingParams`` for every prompt; each prompt gets its own copy with the
  cap the ``CapSampler`` drew for it, and the forced tokens come back with NaN sampling log-probs (TRL then leaves
  them out of its importance ratio, as it does for the calculator's digits).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from livethink.length_rl.budget_rollouts import REQUEST_KEY, CapSampler, request_step
from livethink.length_rl.trl_compat import wrap_colocated_llm_generate, wrap_vllm_generate
from livethink.length_rl.vllm_calculator import nan_forced_logprobs


class VLLMBudgetForcingLogitsProcessor(AdapterLogitsProcessor):
    """Cuts thinking at the request's cap: the forced end, then EOS once the reply used its reserve; no second
    think block."""

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params):
        args = (params.extra_args or {}).get(REQUEST_KEY)
        if not args:
            return None
        return request_step(args)


def patch_budget_requests(generation: Any, sampler: CapSampler) -> None:
    """Per-prompt caps on ``generation`` (a TRL ``VLLMGeneration`` in colocate mode), forced log-probs NaN."""

    def per_prompt(prompts: list[Any], sampling_params: Any) -> Any:
        if isinstance(sampling_params, list):
            raise RuntimeError("budget forcing: expected one SamplingParams for all prompts (TRL colocate mode)")
        caps = sampler.draw(len(prompts))
        out = []
        for cap in caps:
            params = sampling_params.clone()
            if cap is not None:
                params.extra_args = {**(params.extra_args or {}), REQUEST_KEY: sampler.request_args(cap)}
            out.append(params)
        return out

    def nan_forced(result: tuple) -> tuple:
        prompt_ids, completion_ids, logprobs, logprob_token_ids = result
        if logprobs is not None:
            logprobs = nan_forced_logprobs(logprobs, sampler.masks(prompt_ids, completion_ids))
        return prompt_ids, completion_ids, logprobs, logprob_token_ids

    wrap_colocated_llm_generate(generation, per_prompt)
    wrap_vllm_generate(generation, nan_forced)
