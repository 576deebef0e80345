"""``POST /v1/chat/completions`` (OpenAI-compatible): the request, whose OpenAI parameters the server does not
honour are refused by name unless neutral (``OPENAI_UNSUPPORTED``), and the ``chat.completion`` answer and its
stream chunks."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from livethink.serve.protocol.common import LivethinkFlags, Text, _Request


class TextPart(_Request):
    type: Literal["text"]
    text: Text


class ChatMessage(BaseModel):
    """A message of the conversation. `content` is required, as OpenAI requires it of system, developer and user
    messages (an assistant message may leave it out only beside `tool_calls`, which this server does not take)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: Text | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class StreamOptions(_Request):
    include_usage: bool = False


class ChatTemplateKwargs(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    enable_thinking: bool = True


# OpenAI chat parameters this server does not honour, each with the values that ask nothing of it (None always
# does): any other value is a 400 naming the parameter (https://platform.openai.com/docs/api-reference/chat/create).
OPENAI_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "tools": ([],),
    "tool_choice": ("none",),
    "parallel_tool_calls": (True, False),  # only means something beside tools
    "functions": ([],),
    "function_call": ("none",),
    "response_format": ({"type": "text"},),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "audio": (),
    "modalities": (["text"],),
    "prediction": (),
    "web_search_options": (),
    "reasoning_effort": (),
    "verbosity": (),
    "store": (False,),
    "metadata": ({},),
    "service_tier": ("auto", "default"),
    "prompt_cache_key": (),
    "safety_identifier": (),
}


def _neutral(name: str, value: Any) -> Any:
    """``value`` if it asks nothing of the server for OpenAI parameter ``name``, else a ValueError naming it."""
    if value is None or any(value == v and type(value) is type(v) for v in OPENAI_UNSUPPORTED[name]):
        return value
    neutral = ", ".join(repr(v) for v in OPENAI_UNSUPPORTED[name])
    raise ValueError(
        f"this server does not support {name} (send it unset{' or ' + neutral if neutral else ''})"
    )


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` (OpenAI schema). An OpenAI parameter the server does not honour is refused
    by name unless neutral (``OPENAI_UNSUPPORTED``); an unknown field is refused."""

    model_config = ConfigDict(strict=True, extra="forbid")

    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatMessage] = Field(min_length=1, max_length=256)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int = Field(default=1, ge=1, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = Field(default=None, max_length=256)
    # extensions (vLLM)
    min_tokens: int = Field(default=0, ge=0)
    ignore_eos: bool = False
    thinking_token_budget: int | None = Field(default=None, ge=0)
    chat_template_kwargs: ChatTemplateKwargs | None = None
    # extensions (livethink)
    deadline_ms: int | None = Field(default=None, gt=0)
    deadline_at: int | None = Field(
        default=None, gt=0, description="absolute deadline, epoch milliseconds (or the X-Request-Deadline header): "
        "a retry keeps the time already spent; the earlier of it and deadline_ms governs"
    )
    arm: str | None = Field(default=None, min_length=1, max_length=64)
    viewer_id: str | None = Field(default=None, min_length=1, max_length=256)
    include_reasoning: bool = True
    # OpenAI parameters refused unless neutral (OPENAI_UNSUPPORTED)
    tools: Any = None
    tool_choice: Any = None
    parallel_tool_calls: Any = None
    functions: Any = None
    function_call: Any = None
    response_format: Any = None
    logprobs: Any = None
    top_logprobs: Any = None
    logit_bias: Any = None
    frequency_penalty: Any = None
    presence_penalty: Any = None
    audio: Any = None
    modalities: Any = None
    prediction: Any = None
    web_search_options: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    store: Any = None
    metadata: Any = None
    service_tier: Any = None
    prompt_cache_key: Any = None
    safety_identifier: Any = None

    @field_validator(*OPENAI_UNSUPPORTED, mode="before")
    @classmethod
    def _unsupported(cls, v: Any, info: ValidationInfo) -> Any:
        return _neutral(info.field_name, v)

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else (v or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty")
        return v

    def stop_list(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: CompletionTokensDetails


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str
    reasoning: str | None = Field(default=None, description="with include_reasoning (default) only")
    reasoning_content: str | None = Field(default=None, description="the same text as reasoning (vLLM's name)")


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str
    logprobs: None


SYSTEM_FINGERPRINT = "livethink"
# A canned fallback reply (the deadline left no usable answer) is marked where every OpenAI client keeps it
FALLBACK_FINGERPRINT = "livethink-fallback"
_FINGERPRINT = f"`{SYSTEM_FINGERPRINT}`, or `{FALLBACK_FINGERPRINT}` when the reply is the fallback (`livethink.fallback`)"


class ChatCompletion(BaseModel):
    """``POST /v1/chat/completions`` answer without ``stream`` (OpenAI ``chat.completion``)."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    system_fingerprint: str = Field(description=_FINGERPRINT)
    usage: Usage
    livethink: LivethinkFlags


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    finish_reason: str | None
    logprobs: None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a streamed chat answer (OpenAI ``chat.completion.chunk``). The finish chunk carries
    ``livethink``; the usage chunk (``stream_options.include_usage``) has ``choices: []`` and ``usage``."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    system_fingerprint: str = Field(description=_FINGERPRINT)
    livethink: LivethinkFlags | None = None
    usage: Usage | None = None


