"""The teacher interface: k samples per task, streamed task by task.

Backends (scripted here; OpenAI-compatible endpoint, local vLLM and transformers in stage 1) implement
``Teacher.generate(tasks, k, sampling)``, which yields one ``list[Sample]`` (the k samples of a task) per task
in input order, so callers can write each task's samples to disk as soon as they exist. A sample that could not
be produced is still yielded, with ``error`` set and ``finish_reason="error"``: nothing is silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from livethink.config_sections import from_options
from livethink.data.schema import Task
from livethink.rewards.parse import parse_completion

FinishReason = Literal["stop", "length", "error"]


class SamplingConfig(BaseModel):
    """Sampling options every backend understands (OpenAI names)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(2048, ge=1)
    seed: int | None = 0


class Sample(BaseModel):
    """One teacher completion for one task (one JSONL line in the sample shards)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    sample_index: int = Field(ge=0)
    completion: str  # the full text, ``<think>\n{reasoning}\n</think>\n\n{reply}``
    reasoning: str
    reply: str
    finish_reason: FinishReason = "stop"
    error: str | None = None
    latency_s: float = Field(0.0, ge=0.0)
    teacher: str
    meta: dict[str, Any] = Field(default_factory=dict)  # backend extras (token usage, injected faults, ...)

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def from_completion(
        cls,
        *,
        task_id: str,
        sample_index: int,
        completion: str,
        teacher: str,
        finish_reason: FinishReason = "stop",
        latency_s: float = 0.0,
        meta: dict[str, Any] | None = None,
    ) -> Sample:
        """A sample whose reasoning and reply are parsed from the completion text."""
        parsed = parse_completion(completion)
        return cls(
            task_id=task_id, sample_index=sample_index, completion=completion, reasoning=parsed.reasoning,
            reply=parsed.reply, finish_reason=finish_reason, latency_s=latency_s, teacher=teacher, meta=meta or {},
        )

    @classmethod
    def failed(cls, *, task_id: str, sample_index: int, teacher: str, error: str, latency_s: float = 0.0) -> Sample:
        """A sample that could not be produced, kept with its reason."""
        return cls(
            task_id=task_id, sample_index=sample_index, completion="", reasoning="", reply="", finish_reason="error",
            error=error, latency_s=latency_s, teacher=teacher,
        )


@runtime_checkable
class Teacher(Protocol):
    name: str

    def generate(self, tasks: Sequence[Task], k: int, sampling: SamplingConfig) -> Iterator[list[Sample]]:
        """Yield the k samples of each task (``sample_index`` 0..k-1), one list per task, in input order."""
        ...


def check_k(k: int) -> int:
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k (samples per task) must be a positive integer, got {k!r}")
    return k


class BackendOptions:
    """Base of a backend's options dataclass: ``from_dict`` refuses an unknown key by name."""

    label: ClassVar[str] = "teacher"

    @classmethod
    def from_dict(cls, options: dict[str, Any]) -> Any:
        return from_options(cls, options, cls.label)


class BackendTeacher:
    """Base of a backend built from its options (``options_class``, a ``BackendOptions``): an instance, or the keys."""

    options_class: ClassVar[type[BackendOptions]]

    def __init__(self, config: Any = None, **options: Any):
        self.config = config or self.options_class.from_dict(options)
        self.name: str = self.config.name


def local_checkpoint(model: str) -> str:
    """``model`` as a local HF checkpoint directory (``~`` expanded); ``ValueError`` naming ``model`` otherwise."""
    from pathlib import Path

    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise ValueError(f"model: {model!r} is not a local HF checkpoint directory (no config.json)")
    return str(path)
