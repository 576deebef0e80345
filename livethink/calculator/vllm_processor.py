"""vLLM v1 logits processor for calculator-assisted decoding (imported only where vLLM runs)."""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from livethink.calculator.processors import (
    REQUEST_FLAG,
    TAIL_TOKENS,
    force,
    forced_token,
    result_char_token_ids,
)


class VLLMCalculatorLogitsProcessor(AdapterLogitsProcessor):
    """Calculator results for requests with ``SamplingParams(extra_args={"calculator": True})``."""

    def __init__(self, vllm_config, device, is_pin_memory: bool):
        super().__init__(vllm_config, device, is_pin_memory)
        from transformers import AutoTokenizer

        model_config = vllm_config.model_config
        self.tokenizer = AutoTokenizer.from_pretrained(model_config.tokenizer, trust_remote_code=model_config.trust_remote_code)
        self.char_ids = result_char_token_ids(self.tokenizer)

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params):
        if not (params.extra_args or {}).get(REQUEST_FLAG):
            return None

        def apply(prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            tail = output_ids[-TAIL_TOKENS:]
            if len(tail) < TAIL_TOKENS:  # early in the reply the sum may have started in the prompt
                tail = prompt_ids[len(tail) - TAIL_TOKENS:] + tail
            token = forced_token(self.tokenizer, self.char_ids, tail)
            return logits if token is None else force(logits, token)

        return apply
