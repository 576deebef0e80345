"""What both endpoints share: the strict request base, the reply's flags, timings and token counts, and the one
error shape."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Text = Annotated[str, Field(max_length=200_000)]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


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


