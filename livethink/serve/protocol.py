"""Request/response models of the HTTP API (pydantic), OpenAI-compatible where OpenAI defines the shape.

Requests are validated strictly (no string→number coercion); a violation becomes a 400 naming the field
(see ``errors.py``). Both requests reject unknown fields. Chat requests take OpenAI's parameters that the server
honours; one it does not honour (``tools``, ``response_format``, ``logprobs``, penalties, ``n > 1``, ...) is
refused by name unless it is set to its neutral value (``OPENAI_UNSUPPORTED``), never ignored. Extensions on chat requests (as in vLLM): ``min_tokens``, ``ignore_eos``,
``thinking_token_budget``, ``chat_template_kwargs.enable_thinking``; ours: ``deadline_ms``, ``arm``,
``viewer_id``, ``include_reasoning``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from livethink.data.schema import ProductDoc, Turn

Text = Annotated[str, Field(max_length=200_000)]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


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


class LivestreamReplyRequest(_Request):
    """``POST /v1/livestream/reply``: a viewer's question about the products on stream."""

    viewer_id: str = Field(min_length=1, max_length=256)
    question: str = Field(min_length=1, max_length=4000)
    product_docs: list[ProductDoc] = Field(min_length=1, max_length=50)
    history: list[Turn] = Field(default_factory=list, max_length=100)
    deadline_ms: int | None = Field(default=None, gt=0)
    deadline_at: int | None = Field(
        default=None, gt=0, description="absolute deadline, epoch milliseconds (or the X-Request-Deadline header): "
        "a retry keeps the time already spent; the earlier of it and deadline_ms governs"
    )
    include_reasoning: bool = False
    arm: str | None = Field(default=None, min_length=1, max_length=64)
    model: str | None = Field(default=None, min_length=1, max_length=256)
    session_id: str | None = Field(default=None, max_length=256)
    seed: int | None = None
    temperature: float | None = Field(default=None, ge=0, le=2, description="the server's sampling.temperature if unset")

    @field_validator("question")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v


class Timings(BaseModel):
    """Milliseconds from the request's first byte (the client's clock)."""

    queue_ms: float
    first_token_ms: float | None
    first_reply_token_ms: float | None
    e2e_ms: float
    planned_ms: float | None = Field(
        description="when the budget planned the reply complete (null: no plan, e.g. a fallback)"
    )


class TokenCounts(BaseModel):
    prompt: int
    reasoning: int
    reply: int
    total: int


class BudgetOut(BaseModel):
    """The token budget the deadline allowed: thinking cap and the reserve kept for the reply."""

    thinking_cap: int
    reply_reserve: int


class LivethinkFlags(BaseModel):
    """The ``livethink`` object of chat answers: A/B arm, deadline, budget forcing, fallback, timings."""

    experiment: str | None
    arm: str | None
    deadline_ms: int
    deadline_met: bool
    forced_end_of_thinking: bool
    fallback: bool
    fallback_reason: str | None
    cut_at_deadline: bool
    timings: Timings
    budget: BudgetOut | None


class LivestreamReplyResponse(LivethinkFlags):
    """``POST /v1/livestream/reply`` answer: the reply, with the same flags as a chat answer's ``livethink`` object."""

    request_id: str
    viewer_id: str
    model: str
    reply: str
    reasoning: str | None = Field(description="the thinking text, with include_reasoning only")
    tokens: TokenCounts
    finish_reason: str


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


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``; served variants add their engine and thinking floor."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    engine: str | None = None
    root: str | None = None
    description: str | None = None


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class EngineState(BaseModel):
    """An engine's supervision state: ``ok``, ``stalled`` (no output for ``engine.stall_s``), ``dead``,
    ``restarting`` or ``failed`` (restart budget spent: the process exits)."""

    state: Literal["ok", "stalled", "dead", "restarting", "failed"]
    reason: str | None
    for_s: float = Field(description="seconds in this state")
    restarts: int = Field(description="restart attempts within engine.restart_window_s")


class BelowFloor(BaseModel):
    """What a request below a model's thinking floor gets on an endpoint (``endpoints.<name>.below_min_thinking``)."""

    setting: Literal["auto", "shed", "fallback", "answer"] = Field(description="the configured setting")
    action: Literal["shed", "fallback", "answer", "answer_or_fallback"] = Field(
        description="what it does below the floor (auto: from the model's calibration curve, per thinking cap)"
    )
    why: str = Field(description="the reason, with the calibration curve's numbers where auto used them")


class Health(BaseModel):
    """``GET /health``: ``degraded`` (with the ``reason``) when the server refuses most requests while its engines
    are idle, or when the A/B write path is failing or its spool is full."""

    status: Literal["ok", "degraded"]
    reason: str | None = Field(default=None, description="why the status is degraded")
    models: list[str]
    engines: dict[str, str]
    engine_fallback: str | None = Field(description="why engine.kind auto is not serving on vLLM, else null")
    reasoning: dict[str, dict[str, Any]]
    min_thinking_tokens: dict[str, int]
    below_min_thinking: dict[str, dict[str, BelowFloor]] = Field(
        description="per endpoint (livestream, chat) and model: what a request below the thinking floor gets"
    )
    ab: dict[str, Any] | None = Field(default=None, description="the A/B write path, when an experiment runs")
    engine_state: dict[str, EngineState] | None = Field(
        default=None, description="each engine's supervision state (null when engine.supervise is off)"
    )


class Liveness(BaseModel):
    """``GET /health/live``: the process is up (200 whatever the engines' state; readiness is ``/health``)."""

    status: Literal["alive"]
    engine_state: dict[str, EngineState] | None = None


class VersionInfo(BaseModel):
    version: str


class OutcomeAck(BaseModel):
    """``POST /v1/ab/outcomes`` answer: ``duplicate`` when the same event was already stored (idempotent)."""

    event_id: str
    status: Literal["stored", "duplicate", "spooled"]


class ExperimentSummary(BaseModel):
    """``GET /v1/ab/experiments/{name}``: per-arm metrics, tests and the verdict (see docs/ab_test.md)."""

    model_config = ConfigDict(extra="allow")

    experiment: str
    arms: dict[str, Any]
    verdict: dict[str, Any]


class AdminStatus(BaseModel):
    controller: dict[str, Any]
    engines: dict[str, Any]
    experiments: dict[str, list[str]]
    config: dict[str, Any] = Field(description="the server's config without auth")


class ErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, permission_error, ...")
    param: str | None = Field(default=None, description="the offending field, e.g. messages.0.content")
    code: str | None = None


class ErrorResponse(BaseModel):
    """Every error of the server (OpenAI's shape). A 429 adds ``retry_after_ms`` and why it refused."""

    model_config = ConfigDict(extra="allow")

    error: ErrorDetail
    retry_after_ms: int | None = Field(default=None, description="429 only: the Retry-After header in ms")
    experiment: str | None = Field(default=None, description="429 only: the viewer's A/B experiment")
    arm: str | None = Field(default=None, description="429 only: the viewer's A/B arm")
    reason: str | None = Field(default=None, description="429 and 503: why the request was refused")


def model_card(name: str, created: int, owned_by: str = "livethink", **extra: Any) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": owned_by, **extra}
