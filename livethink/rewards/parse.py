"""Split a completion into its reasoning trace and its reply.

Layout (``livethink.data.prompt.format_completion``): ``<think>\\n{reasoning}\\n</think>\\n\\n{reply}``.
Rules, in order:

- a closing ``</think>`` exists: reasoning = everything before the *last* one (think tags removed), reply =
  everything after it (a chat template that pre-fills ``<think>`` yields completions with only the close tag);
- an opening ``<think>`` but no close: the trace was cut off (e.g. by ``max_tokens``), reasoning = the text
  after ``<think>``, reply = "" (an unfinished completion never gets credit for a reply);
- no tags at all: reasoning = "", reply = the whole text.

The delimiters are the model's ``ReasoningFormat`` (``fmt``, ``<think>``/``</think>`` by default); with the
``none`` format a completion is all reply.

Completions may also be chat message lists (TRL conversational data): the last assistant message is used, and a
``reasoning_content`` / ``reasoning`` field (vLLM/OpenAI reasoning parsers) counts as the reasoning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from livethink.data.reasoning_format import THINK, ReasoningFormat

Completion = str | list[dict[str, Any]] | dict[str, Any]


@dataclass(frozen=True)
class Parsed:
    reasoning: str
    reply: str
    has_think: bool  # an opening or closing tag was seen (or a separate reasoning field)
    closed: bool  # the reasoning block was closed (False for a cut-off trace)


def completion_text(completion: Completion) -> tuple[str, str | None]:
    """(content, separate reasoning or None) of a completion given as a string, a message or a message list."""
    if completion is None:
        return "", None
    if isinstance(completion, str):
        return completion, None
    if isinstance(completion, dict):
        messages: list[dict[str, Any]] = [completion]
    elif isinstance(completion, list | tuple):
        messages = [m for m in completion if isinstance(m, dict)]
    else:
        raise TypeError(f"completion must be a string or chat messages, got {type(completion).__name__}")
    assistant = [m for m in messages if m.get("role", "assistant") == "assistant"] or messages
    if not assistant:
        return "", None
    last = assistant[-1]
    content = last.get("content") or ""
    if isinstance(content, list):  # multimodal-style content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    reasoning = last.get("reasoning_content") or last.get("reasoning")
    return str(content), (str(reasoning) if reasoning else None)


def _tags(fmt: ReasoningFormat) -> re.Pattern[str]:
    return re.compile(re.escape(fmt.start) + "|" + re.escape(fmt.end))


def parse_completion(completion: Completion, fmt: ReasoningFormat = THINK) -> Parsed:
    """Reasoning and reply of a completion (see module docstring for the rules)."""
    text, separate_reasoning = completion_text(completion)
    if not fmt.thinks:
        if separate_reasoning is not None:
            return Parsed(separate_reasoning.strip(), text.strip(), True, True)
        return Parsed("", text.strip(), False, True)
    tags = _tags(fmt)
    if separate_reasoning is not None and fmt.end not in text:
        return Parsed(separate_reasoning.strip(), tags.sub("", text).strip(), True, True)
    close = text.rfind(fmt.end)
    if close >= 0:
        reasoning = tags.sub("", text[:close]).strip()
        if separate_reasoning:
            reasoning = (separate_reasoning.strip() + "\n" + reasoning).strip()
        reply = text[close + len(fmt.end) :].strip()
        return Parsed(reasoning, reply, True, True)
    open_ = text.find(fmt.start)
    if open_ >= 0:
        return Parsed(tags.sub("", text[open_ + len(fmt.start) :]).strip(), "", True, False)
    return Parsed("", text.strip(), False, True)


def split_completion(completion: Completion, fmt: ReasoningFormat = THINK) -> tuple[str, str]:
    """(reasoning, reply): the short form of ``parse_completion``."""
    parsed = parse_completion(completion, fmt)
    return parsed.reasoning, parsed.reply
