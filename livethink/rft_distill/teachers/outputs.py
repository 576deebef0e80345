"""Turn one raw model output (content, optional separate reasoning, finish reason) into a ``Sample``.

Shared by the endpoint, vLLM and transformers backends so they agree on what counts as a failed sample:

- ``empty``: no content and no reasoning, or a finished output with reasoning but no reply;
- ``truncated``: stopped by ``max_tokens`` (``finish_reason="length"``) before any reply was written;
- any finish reason other than stop/length (``content_filter``, ``abort``, ...): failed with that reason.

Errors read ``"<reason>: <detail>"``; the sampling summary counts failures by ``<reason>``.
"""

from __future__ import annotations

from typing import Any

from livethink.data.prompt import format_completion
from livethink.rewards.parse import parse_completion
from livethink.rft_distill.teachers.base import Sample

OK_FINISH = {"stop": "stop", "length": "length", "eos": "stop", "tool_calls": "stop", "function_call": "stop"}


def failed_sample(task_id: str, sample_index: int, teacher: str, error: str, latency_s: float = 0.0,
                  meta: dict[str, Any] | None = None) -> Sample:
    """A failed sample (``Sample.failed``) that keeps backend details (tokens, attempts) in ``meta``."""
    sample = Sample.failed(task_id=task_id, sample_index=sample_index, teacher=teacher, error=error,
                           latency_s=max(0.0, latency_s))
    sample.meta.update(meta or {})
    return sample


def sample_from_output(
    *,
    task_id: str,
    sample_index: int,
    teacher: str,
    content: str | None,
    reasoning: str | None = None,
    finish_reason: str | None = "stop",
    latency_s: float = 0.0,
    meta: dict[str, Any] | None = None,
    opened: str = "",
) -> Sample:
    """A ``Sample`` from one output, or a failed one (see module docstring). ``opened``: the reasoning the prompt
    opened (``livethink.data.prompt.completion_prefix``), put before generated content to make the completion."""
    meta = dict(meta or {})
    content, reasoning = content or "", reasoning or ""
    if content.strip():
        content = opened + content
    raw_finish = (finish_reason or "stop").lower()
    if raw_finish not in OK_FINISH:
        meta["raw_finish_reason"] = raw_finish
        return failed_sample(task_id, sample_index, teacher, f"{raw_finish}: finish_reason={raw_finish!r}",
                             latency_s, meta)
    finish = OK_FINISH[raw_finish]
    if not content.strip() and not reasoning.strip():
        return failed_sample(task_id, sample_index, teacher, "empty: the model returned no text", latency_s, meta)
    if reasoning.strip():
        parsed = parse_completion({"role": "assistant", "content": content, "reasoning": reasoning})
        completion = format_completion(parsed.reasoning, parsed.reply)
    else:
        parsed = parse_completion(content)
        completion = content
    if finish == "length" and not parsed.reply:
        meta["raw_finish_reason"] = "length"
        tokens = meta.get("completion_tokens")
        detail = f" after {tokens} tokens" if tokens else ""
        return failed_sample(task_id, sample_index, teacher,
                             f"truncated: max_tokens reached{detail} before any reply", latency_s, meta)
    if not parsed.reply:
        return failed_sample(task_id, sample_index, teacher, "empty: reasoning but no reply", latency_s, meta)
    return Sample.from_completion(task_id=task_id, sample_index=sample_index, completion=completion,
                                  teacher=teacher, finish_reason=finish, latency_s=max(0.0, latency_s), meta=meta)
