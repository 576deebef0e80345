"""A model's reasoning format: the strings that open and close its reasoning, or none for a model that does not
think. It is the one place that knows the delimiters; serving, eval and both training stages read it.

The delimiters are strings of any number of tokens, as vLLM's ``ReasoningConfig`` allows
(``reasoning_start_str`` / ``reasoning_end_str``): Qwen3 and the DeepSeek-R1 distills use ``<think>`` /
``</think>`` (one token each), a chat model taught to think by stage 1 uses them as plain text (several tokens).

Where a model's format comes from, first match wins (``resolve``):

1. the config says so (``think``, ``none`` or ``{start, end}``);
2. the checkpoint carries ``reasoning_format.json`` (written by ``livethink rft`` / ``livethink grpo``);
3. the tokenizer has the ``</think>`` token, or its chat template mentions ``<think>`` (Qwen3, DeepSeek-R1);
4. otherwise the model does not think (``none``): the server turns the deadline into a reply token cap.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FORMAT_FILE = "reasoning_format.json"


@dataclass(frozen=True)
class ReasoningFormat:
    """Reasoning delimiters; ``start == end == ""`` is a model that does not think."""

    start: str = "<think>"
    end: str = "</think>"

    def __post_init__(self) -> None:
        if bool(self.start) != bool(self.end):
            raise ValueError("reasoning: set both start and end, or neither (a model that does not think)")
        if self.start and self.start == self.end:
            raise ValueError(f"reasoning: start and end must differ, both are {self.start!r}")

    @property
    def thinks(self) -> bool:
        return bool(self.end)

    @property
    def prefill(self) -> str:
        """What the server appends to the generation prompt so that generation starts inside the reasoning."""
        return f"{self.start}\n" if self.thinks else ""

    @property
    def forced_end(self) -> str:
        """What budget forcing inserts when thinking must stop: closes the block, the reply starts a paragraph."""
        return f"\n{self.end}\n\n" if self.thinks else ""

    def format_completion(self, reasoning: str, reply: str) -> str:
        """Lay out a reasoning trace and a reply as one completion string (the SFT target, the teacher's output)."""
        if not self.thinks:
            return reply.strip()
        return f"{self.start}\n{reasoning.strip()}\n{self.end}\n\n{reply.strip()}"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def save(self, directory: str | Path) -> Path:
        """Write ``reasoning_format.json`` into a checkpoint directory."""
        path = Path(directory) / FORMAT_FILE
        path.write_text(json.dumps(self.to_dict()) + "\n")
        return path

    def describe(self) -> str:
        return f"{self.start} ... {self.end}" if self.thinks else "none (the model does not think)"


THINK = ReasoningFormat()
NONE = ReasoningFormat("", "")
PRESETS: dict[str, ReasoningFormat] = {"think": THINK, "none": NONE}


def parse_setting(value: Any, field: str = "reasoning") -> ReasoningFormat | None:
    """A config value → a format, or ``None`` for ``auto`` (detect from the checkpoint).

    Accepts ``auto`` / ``None``, a preset name (``think``, ``none``) or a mapping ``{start, end}``; anything else is
    a ``ValueError`` naming ``field``.
    """
    if value is None or value == "auto":
        return None
    if isinstance(value, ReasoningFormat):
        return value
    if isinstance(value, str):
        if value not in PRESETS:
            raise ValueError(f"{field}: {value!r} is not one of auto, {', '.join(PRESETS)} or {{start, end}}")
        return PRESETS[value]
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"start", "end"})
        if unknown:
            raise ValueError(f"{field}: unknown key(s) {', '.join(unknown)} (expected start and end)")
        if not all(isinstance(value.get(k, ""), str) for k in ("start", "end")):
            raise ValueError(f"{field}: start and end must be strings")
        try:
            return ReasoningFormat(value.get("start", ""), value.get("end", ""))
        except ValueError as exc:
            raise ValueError(f"{field}: {exc}") from None
    raise ValueError(f"{field}: expected auto, a preset name or {{start, end}}, got {type(value).__name__}")


def saved_format(directory: str | Path | None) -> ReasoningFormat | None:
    """The format a checkpoint carries (``reasoning_format.json``), if any."""
    if directory is None:
        return None
    path = Path(directory) / FORMAT_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    return parse_setting(data, field=str(path))


def detect(tokenizer: Any) -> tuple[ReasoningFormat, str]:
    """Guess the format from a tokenizer: ``<think>`` delimiters if it has the ``</think>`` token or its chat
    template mentions ``<think>``, else none. Returns the format and why."""
    if tokenizer is not None:
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        if THINK.end in vocab:
            return THINK, f"the tokenizer has the {THINK.end} token"
        template = getattr(tokenizer, "chat_template", None) or ""
        if isinstance(template, dict):  # several named templates
            template = " ".join(template.values())
        if THINK.start in template:
            return THINK, f"the chat template uses {THINK.start}"
    return NONE, "no reasoning delimiters in the tokenizer or its chat template"


def resolve(setting: Any, tokenizer: Any = None, *checkpoints: str | Path | None) -> tuple[ReasoningFormat, str]:
    """The format of a model (see the module docstring for the order) and where it came from.

    ``checkpoints`` are searched in order for ``reasoning_format.json``: pass a LoRA adapter before its base, since a
    trained adapter over a released base carries the format the base lacks."""
    configured = parse_setting(setting)
    if configured is not None:
        return configured, "set in the config"
    for checkpoint in checkpoints:
        saved = saved_format(checkpoint)
        if saved is not None:
            return saved, f"{FORMAT_FILE} in {checkpoint}"
    return detect(tokenizer)
