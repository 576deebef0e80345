"""How a task becomes a chat prompt, and how a completion is laid out.

A completion is ``<think>\n{reasoning}\n</think>\n\n{reply}``: the reasoning trace first, then the reply the
avatar speaks. The same layout is used by the teacher, the SFT targets, the rewards and the server; the delimiters
are the model's ``ReasoningFormat`` (``livethink.data.reasoning_format``), ``<think>``/``</think>`` by default.

``render_prompt`` / ``render_prompt_ids`` are the one way a chat becomes a generation prompt: the server, the eval,
the local teachers and the benchmarks all call them, so a model sees the same prompt everywhere. When the model
thinks, the prompt ends inside its reasoning (``ReasoningFormat.prefill``) and the text it generates continues
from there (``completion_prefix``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


def render_prompt(tokenizer: Any, messages: Sequence[dict[str, str]], fmt: ReasoningFormat, thinking: bool,
                  **template_kwargs: Any) -> str:
    """The generation prompt for ``messages``: the chat template with its generation prompt, then, when
    ``thinking``, the format's prefill so that generation starts inside the reasoning (left out when the template
    already opened the block itself, as DeepSeek-R1's does). A format that thinks, asked not to, renders with
    ``enable_thinking=False`` (templates such as Qwen3's then close an empty block). ``template_kwargs`` go to the
    template as they are (an explicit ``enable_thinking`` wins)."""
    thinking = thinking and fmt.thinks
    kwargs = dict(template_kwargs)
    if fmt.thinks and not thinking:
        kwargs.setdefault("enable_thinking", False)
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True, **kwargs)
    if thinking and not text.rstrip().endswith(fmt.start):
        text += fmt.prefill
    return text


def render_prompt_ids(tokenizer: Any, messages: Sequence[dict[str, str]], fmt: ReasoningFormat, thinking: bool,
                      **template_kwargs: Any) -> list[int]:
    """``render_prompt`` as token ids (the rendered text carries any special tokens itself)."""
    return list(tokenizer.encode(render_prompt(tokenizer, messages, fmt, thinking, **template_kwargs),
                                 add_special_tokens=False))


def completion_prefix(fmt: ReasoningFormat, thinking: bool) -> str:
    """What goes before generated text to make the whole completion (``<think>\n...``) when the prompt was
    rendered with ``thinking``: the reasoning the prompt opened. The rewards, the judges and the server's reply
    split read completions in that layout."""
    return fmt.prefill if thinking and fmt.thinks else ""
