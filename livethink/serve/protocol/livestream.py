"""``POST /v1/livestream/reply``: a viewer's question about the products on stream, its answer, and the events
of a streamed answer (``plan``, ``sentence``, ``done``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, RootModel, ValidationInfo, field_validator

from livethink.data.schema import ProductDoc, Turn
from livethink.serve.protocol.common import LivethinkFlags, Timings, TokenCounts, _Request


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
    session_id: str | None = Field(
        default=None, max_length=256, description="the viewer's session: experiments randomised by session hash it"
    )
    stream_id: str | None = Field(
        default=None, min_length=1, max_length=256,
        description="the livestream (room) the viewer watches: experiments randomised by stream hash it, since the "
        "avatar's spoken reply reaches the whole room",
    )
    seed: int | None = None
    temperature: float | None = Field(default=None, ge=0, le=2, description="the server's sampling.temperature if unset")
    stream: bool = Field(default=False, description="server-sent `plan`, `sentence` and `done` events, paced to speech")
    speech_rate_wps: float | None = Field(
        default=None, gt=0, le=20, description="with stream: the avatar's words per second (the server's "
        "endpoints.livestream.speech_rate_wps if unset)"
    )
    on_refusal: Literal["error", "filler"] | None = Field(
        default=None, description="a request the server cannot admit: `error` (429 + Retry-After) or `filler` "
        "(200 with a filler line, `fallback` and `refused` true); the server's endpoints.livestream.on_refusal if unset"
    )

    @field_validator("question")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v

    @field_validator("speech_rate_wps")
    @classmethod
    def _paced_stream_only(cls, v: float | None, info: ValidationInfo) -> float | None:
        if v is not None and not info.data.get("stream", False):
            raise ValueError("paces a streamed reply: send it with stream: true")
        return v


class LivestreamReplyResponse(LivethinkFlags):
    """``POST /v1/livestream/reply`` answer: the reply, with the same flags as a chat answer's ``livethink`` object."""

    request_id: str
    viewer_id: str
    model: str
    reply: str
    reasoning: str | None = Field(description="the thinking text, with include_reasoning only")
    tokens: TokenCounts
    finish_reason: str
    refused: bool = Field(
        default=False, description="admission refused the request and `on_refusal: filler` answered with a filler "
        "line (`fallback` is true too): not an answer"
    )
    refusal_reason: str | None = Field(default=None, description="why it was refused (as a 429's `reason`)")


class StreamTimings(Timings):
    """A streamed reply's timings: milliseconds from the request's first byte (the server's clock)."""

    first_sentence_ms: float | None = Field(description="when the first sentence event was sent")


class LivestreamPlanEvent(BaseModel):
    """``event: plan``, first, at admission: who answers and what the deadline allows."""

    event: Literal["plan"]
    request_id: str
    experiment: str | None
    arm: str | None
    model: str
    deadline_ms: int
    speech_rate_wps: float
    thinking_cap: int | None = Field(description="the thinking tokens admitted (null: a filler or fallback line)")
    reply_reserve: int | None
    planned_first_sentence_ms: float | None = Field(
        description="when the plan expects the first sentence (ms from the request's first byte)"
    )
    fallback: bool = Field(description="the reply will be the fallback or filler line (no generation)")
    refused: bool


class LivestreamSentenceEvent(BaseModel):
    """``event: sentence``: one complete sentence, never retracted. The `text` of every sentence event joined (as
    sent, with the whitespace it starts with) is the `reply` of the `done` event."""

    event: Literal["sentence"]
    index: int
    text: str
    words: int
    at_ms: float = Field(description="when it was sent (ms from the request's first byte)")
    speech_end_ms: float = Field(description="when the avatar will have spoken it at the speech rate")
    stall: bool = Field(description="it came after the avatar had finished speaking the sentences before it")
    fallback: bool = Field(description="the fallback or filler line")


class LivestreamDoneEvent(LivestreamReplyResponse):
    """``event: done``, last: the whole reply (the sentences joined) with the flags of a non-streamed answer."""

    event: Literal["done"]
    timings: StreamTimings
    speech_rate_wps: float
    sentences: int
    stalls: int = Field(description="sentences that came after the avatar had fallen silent")


class LivestreamEvent(RootModel[Annotated[
    LivestreamPlanEvent | LivestreamSentenceEvent | LivestreamDoneEvent, Field(discriminator="event")
]]):
    """One event of a streamed livestream reply: `event: <plan|sentence|done>` and `data: <JSON>` (whose `event`
    field names it too); an error after the first event is `event: error` with an `ErrorResponse`."""


