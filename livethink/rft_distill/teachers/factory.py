"""``make_teacher(config)``: a teacher backend from a config dict, chosen by ``type``.

    {"type": "scripted", "error_rate": 0.15}
    {"type": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "smollm2", "concurrency": 8}
    {"type": "vllm", "model": "~/.cache/livethink/smollm2-135m-instruct"}
    {"type": "transformers", "model": "artifacts/tiny/student/final"}

The other keys are the backend's options (``OpenAITeacherConfig``, ``VLLMTeacherConfig``,
``TransformersTeacherConfig``, ``ScriptedTeacher``); an unknown key is an error naming it. ``seed`` is accepted
and ignored (the seed belongs to ``SamplingConfig``). Backends import their heavy dependencies lazily.
"""

from __future__ import annotations

from typing import Any

from livethink.rft_distill.teachers.base import Teacher

TEACHER_TYPES = ("scripted", "openai", "vllm", "transformers")


def teacher_options(config: dict[str, Any]) -> tuple[str, Any]:
    """``(type, options)``: the backend's checked options object (``ScriptedTeacher`` for scripted), nothing loaded."""
    options = dict(config)
    kind = str(options.pop("type", "scripted")).lower()
    options.pop("seed", None)
    if kind == "scripted":
        from livethink.rft_distill.teachers.scripted import ScriptedTeacher

        allowed = {"error_rate", "verbosity", "name", "opener_rate"}
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(f"unknown scripted teacher option(s) {unknown}; known: {sorted(allowed)}")
        return kind, ScriptedTeacher(**options)
    if kind == "openai":
        from livethink.rft_distill.teachers.openai_compat import OpenAITeacherConfig

        return kind, OpenAITeacherConfig.from_dict(options)
    if kind == "vllm":
        from livethink.rft_distill.teachers.vllm_local import VLLMTeacherConfig

        return kind, VLLMTeacherConfig.from_dict(options)
    if kind == "transformers":
        from livethink.rft_distill.teachers.transformers_local import TransformersTeacherConfig

        return kind, TransformersTeacherConfig.from_dict(options)
    raise ValueError(f"type: unknown teacher {kind!r}; choose one of {', '.join(TEACHER_TYPES)}")


def make_teacher(config: dict[str, Any] | Teacher) -> Teacher:
    """A teacher from ``config`` (see module docstring); a teacher instance is returned as is."""
    if not isinstance(config, dict):
        if isinstance(config, Teacher):
            return config
        raise TypeError(f"teacher config must be a dict or a Teacher, got {type(config).__name__}")
    kind, options = teacher_options(config)
    if kind == "openai":
        from livethink.rft_distill.teachers.openai_compat import OpenAITeacher

        return OpenAITeacher(options)
    if kind == "vllm":
        from livethink.rft_distill.teachers.vllm_local import VLLMTeacher

        return VLLMTeacher(options)
    if kind == "transformers":
        from livethink.rft_distill.teachers.transformers_local import TransformersTeacher

        return TransformersTeacher(options)
    return options
