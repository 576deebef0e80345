"""Teacher on local transformers generation (``model.generate`` with ``num_return_sequences=k``, batched).

The fallback when vLLM is not available: slower, but it needs only torch + transformers. Prompts are the chat
messages of ``build_messages`` rendered as the server renders them (``livethink.data.prompt.render_prompt``: a
checkpoint that thinks starts inside its reasoning, and its completion is that opening plus the generated text),
left-padded into batches of ``batch_size`` tasks. Sampling is seeded per batch (``torch.manual_seed``), so
results depend on the batching. A prompt longer than ``max_prompt_tokens`` becomes k ``context_length`` failed
samples.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from livethink.data.prompt import build_messages, completion_prefix, render_prompt
from livethink.data.reasoning_format import ReasoningFormat, resolve
from livethink.data.schema import Task
from livethink.engines import load_generation_model
from livethink.rft_distill.teachers.base import (
    BackendOptions,
    BackendTeacher,
    Sample,
    SamplingConfig,
    check_k,
    local_checkpoint,
)
from livethink.rft_distill.teachers.openai_compat import task_seed
from livethink.rft_distill.teachers.outputs import failed_sample, sample_from_output


@dataclass
class TransformersTeacherConfig(BackendOptions):
    """Options of :class:`TransformersTeacher` (YAML keys of ``teacher:`` with ``type: transformers``)."""

    label: ClassVar[str] = "transformers teacher"
    model: str  # local HF checkpoint directory
    dtype: str = "float32"  # float32 | bfloat16 | float16
    device: str = "cpu"
    batch_size: int = 8  # tasks per generate call (each k sequences)
    max_prompt_tokens: int = 4096
    name: str = "transformers"

    def __post_init__(self) -> None:
        self.model = local_checkpoint(self.model)
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype: must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {self.batch_size!r}")


class TransformersTeacher(BackendTeacher):
    """k samples per task from ``AutoModelForCausalLM.generate`` (see module docstring)."""

    options_class = TransformersTeacherConfig
    config: TransformersTeacherConfig

    def __init__(self, config: TransformersTeacherConfig | None = None, **options: Any):
        super().__init__(config, **options)
        self._model = None
        self._tokenizer = None
        self._format: ReasoningFormat | None = None

    def _load(self):
        if self._model is None:
            cfg = self.config
            self._model, self._tokenizer, _ = load_generation_model(cfg.model, dtype=cfg.dtype, device=cfg.device)
            self._format, _ = resolve("auto", self._tokenizer, cfg.model)
        return self._model, self._tokenizer

    def generate(self, tasks: Sequence[Task], k: int, sampling: SamplingConfig | None = None) -> Iterator[list[Sample]]:
        """The k samples of each task, one list per task, in input order (``batch_size`` tasks per call)."""
        check_k(k)
        sampling = sampling or SamplingConfig()
        tasks = list(tasks)
        for start in range(0, len(tasks), self.config.batch_size):
            yield from self._batch(tasks[start:start + self.config.batch_size], k, sampling)

    def _batch(self, tasks: list[Task], k: int, sampling: SamplingConfig) -> Iterator[list[Sample]]:
        import torch

        model, tok = self._load()
        texts = [render_prompt(tok, build_messages(t), self._format, thinking=True) for t in tasks]
        prefix = completion_prefix(self._format, thinking=True)
        lengths = [len(tok(text, add_special_tokens=False)["input_ids"]) for text in texts]
        runnable = [i for i, n in enumerate(lengths) if n <= self.config.max_prompt_tokens]
        results: dict[int, list[Sample]] = {}
        for i, n in enumerate(lengths):
            if i not in runnable:
                error = f"context_length: prompt has {n} tokens, max_prompt_tokens is {self.config.max_prompt_tokens}"
                results[i] = [failed_sample(tasks[i].id, j, self.name, error, meta={"prompt_tokens": n})
                              for j in range(k)]
        if runnable:
            enc = tok([texts[i] for i in runnable], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {name: t.to(self.config.device) for name, t in enc.items()}
            seed = task_seed(sampling.seed, tasks[runnable[0]].id)
            if seed is not None:
                torch.manual_seed(seed)
            do_sample = sampling.temperature > 0
            start = time.perf_counter()
            with torch.inference_mode():
                out = model.generate(**enc, do_sample=do_sample, temperature=sampling.temperature if do_sample else None,
                                     top_p=sampling.top_p if do_sample else None, max_new_tokens=sampling.max_tokens,
                                     num_return_sequences=k, pad_token_id=tok.pad_token_id)
            latency = (time.perf_counter() - start) / len(runnable)
            new = out[:, enc["input_ids"].shape[1]:]
            eos = _eos_ids(model, tok)
            for row, i in enumerate(runnable):
                samples = []
                for j in range(k):
                    ids = new[row * k + j].tolist()
                    stop = next((p for p, t in enumerate(ids) if t in eos), None)
                    used = ids if stop is None else ids[:stop]
                    samples.append(sample_from_output(
                        task_id=tasks[i].id, sample_index=j, teacher=self.name,
                        content=tok.decode(used, skip_special_tokens=True), opened=prefix,
                        finish_reason="stop" if stop is not None else "length", latency_s=latency,
                        meta={"prompt_tokens": lengths[i], "completion_tokens": len(used) + (stop is not None)}))
                results[i] = samples
        for i in range(len(tasks)):
            yield results[i]


def _eos_ids(model, tok) -> set[int]:
    ids = model.generation_config.eos_token_id
    eos = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tok.eos_token_id is not None:
        eos.add(tok.eos_token_id)
    return eos
