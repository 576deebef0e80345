"""Request/response models of the HTTP API (pydantic), OpenAI-compatible where OpenAI defines the shape.

Requests are validated strictly (no string→number coercion); a violation becomes a 400 naming the field
(see ``errors.py``). Chat requests accept, and ignore, other OpenAI parameters; the livestream request is ours
and rejects unknown fields. Extensions on chat requests (as in vLLM): ``min_tokens``, ``ignore_eos``,
``thinking_token_budget``, ``chat_template_kwargs.enable_thinking``; ours: ``deadline_ms``, ``arm``,
``viewer_id``, ``include_reasoning``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from livethink.data.schema import ProductDoc, Turn

Text = Annotated[str, Field(max_length=200_000)]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class TextPart(_Request):
    type: Literal["text"]
    text: Text


class ChatMessage(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: Text | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class StreamOptions(_Request):
    include_usage: bool = False


class ChatTemplateKwargs(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    enable_thinking: bool = True


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions`` (OpenAI schema; unknown OpenAI parameters are accepted and ignored)."""

    model_config = ConfigDict(strict=True, extra="ignore")

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
    arm: str | None = Field(default=None, min_length=1, max_length=64)
    viewer_id: str | None = Field(default=None, min_length=1, max_length=256)
    include_reasoning: bool = True

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


class LivestreamReplyRequest(_Request):
    """``POST /v1/livestream/reply``: a viewer's question about the products on stream."""

    viewer_id: str = Field(min_length=1, max_length=256)
    question: str = Field(min_length=1, max_length=4000)
    product_docs: list[ProductDoc] = Field(min_length=1, max_length=50)
    history: list[Turn] = Field(default_factory=list, max_length=100)
    deadline_ms: int | None = Field(default=None, gt=0)
    include_reasoning: bool = False
    arm: str | None = Field(default=None, min_length=1, max_length=64)
    model: str | None = Field(default=None, min_length=1, max_length=256)
    session_id: str | None = Field(default=None, max_length=256)
    seed: int | None = None

    @field_validator("question")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v


class Timings(BaseModel):
    queue_ms: float
    first_token_ms: float | None
    first_reply_token_ms: float | None
    e2e_ms: float


class TokenCounts(BaseModel):
    prompt: int
    reasoning: int
    reply: int
    total: int


class BudgetOut(BaseModel):
    thinking_cap: int
    reply_reserve: int


class LivestreamReplyResponse(BaseModel):
    request_id: str
    viewer_id: str
    experiment: str | None
    arm: str | None
    model: str
    reply: str
    reasoning: str | None = None
    timings: Timings
    tokens: TokenCounts
    deadline_ms: int
    deadline_met: bool
    forced_end_of_thinking: bool
    fallback: bool
    finish_reason: str
    budget: BudgetOut | None


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


def model_card(name: str, created: int, owned_by: str = "livethink", **extra: Any) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": owned_by, **extra}
