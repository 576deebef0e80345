"""Request/response models of the HTTP API (pydantic), OpenAI-compatible where OpenAI defines the shape: one
module per route family (``chat``, ``livestream``, ``server``) over ``common``; every public name is here too.

Requests are validated strictly (no string→number coercion); a violation becomes a 400 naming the field
(see ``errors.py``). Both requests reject unknown fields. Chat requests take OpenAI's parameters that the server
honours; one it does not honour (``tools``, ``response_format``, ``logprobs``, penalties, ``n > 1``, ...) is
refused by name unless it is set to its neutral value (``OPENAI_UNSUPPORTED``), never ignored. Extensions on chat requests (as in vLLM): ``min_tokens``, ``ignore_eos``,
``thinking_token_budget``, ``chat_template_kwargs.enable_thinking``; ours: ``deadline_ms``, ``arm``,
``viewer_id``, ``include_reasoning``.
"""

from __future__ import annotations

from livethink.serve.protocol.chat import (
    FALLBACK_FINGERPRINT,
    OPENAI_UNSUPPORTED,
    SYSTEM_FINGERPRINT,
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    ChatTemplateKwargs,
    ChunkChoice,
    ChunkDelta,
    CompletionTokensDetails,
    StreamOptions,
    TextPart,
    Usage,
)
from livethink.serve.protocol.common import (
    BudgetOut,
    ErrorDetail,
    ErrorResponse,
    LivethinkFlags,
    Text,
    Timings,
    TokenCounts,
)
from livethink.serve.protocol.livestream import (
    LivestreamDoneEvent,
    LivestreamEvent,
    LivestreamPlanEvent,
    LivestreamReplyRequest,
    LivestreamReplyResponse,
    LivestreamSentenceEvent,
    StreamTimings,
)
from livethink.serve.protocol.server import (
    AdminStatus,
    BelowFloor,
    EngineState,
    ExperimentSummary,
    Health,
    Liveness,
    ModelCard,
    ModelList,
    OutcomeAck,
    VersionInfo,
    model_card,
)

__all__ = [
    "BudgetOut",
    "ErrorDetail",
    "ErrorResponse",
    "LivethinkFlags",
    "Text",
    "Timings",
    "TokenCounts",
    "AssistantMessage",
    "ChatChoice",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatCompletionRequest",
    "ChatMessage",
    "ChatTemplateKwargs",
    "ChunkChoice",
    "ChunkDelta",
    "CompletionTokensDetails",
    "FALLBACK_FINGERPRINT",
    "OPENAI_UNSUPPORTED",
    "SYSTEM_FINGERPRINT",
    "StreamOptions",
    "TextPart",
    "Usage",
    "LivestreamDoneEvent",
    "LivestreamEvent",
    "LivestreamPlanEvent",
    "LivestreamReplyRequest",
    "LivestreamReplyResponse",
    "LivestreamSentenceEvent",
    "StreamTimings",
    "AdminStatus",
    "BelowFloor",
    "EngineState",
    "ExperimentSummary",
    "Health",
    "Liveness",
    "ModelCard",
    "ModelList",
    "OutcomeAck",
    "VersionInfo",
    "model_card",
]
