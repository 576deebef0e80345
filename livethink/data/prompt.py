"""How a task becomes a chat prompt, and how a completion is laid out.

A completion is ``<think>\n{reasoning}\n</think>\n\n{reply}``: the reasoning trace first, then the reply the
avatar speaks. The same layout is used by the teacher, the SFT targets, the rewards and the server; the delimiters
are the model's ``ReasoningFormat`` (``livethink.data.reasoning_format``), ``<think>``/``</think>`` by default.
"""

from __future__ import annotations

from livethink.data.reasoning_format import THINK, ReasoningFormat
from livethink.data.schema import Task

THINK_OPEN = THINK.start
THINK_CLOSE = THINK.end

SYSTEM_PROMPT = (
    "You are the shopping assistant of a livestream. Answer the viewer using only the product docs below. "
    "Think inside <think></think>, then reply in one or two short sentences. Give the exact answer first, "
    "then one useful fact from the docs. If the docs do not state something, say so."
)


def system_message(task: Task) -> str:
    """System prompt with the product docs of the task."""
    return f"{SYSTEM_PROMPT}\n\n# Product docs\n{task.docs_text}"


def build_messages(task: Task) -> list[dict[str, str]]:
    """Chat messages (OpenAI roles) for a task: system + docs, earlier turns, then the question."""
    messages = [{"role": "system", "content": system_message(task)}]
    for turn in task.history:
        messages.append({"role": "user" if turn.role == "viewer" else "assistant", "content": turn.content})
    messages.append({"role": "user", "content": task.question})
    return messages


def format_completion(reasoning: str, reply: str, fmt: ReasoningFormat = THINK) -> str:
    """Lay out a reasoning trace and a reply as one completion string, in the model's reasoning format."""
    return fmt.format_completion(reasoning, reply)
