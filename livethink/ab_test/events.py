"""Event schemas (pydantic): exposures, responses, outcomes, and the ``POST /v1/ab/outcomes`` payload.

Times are Unix seconds (client event time). Events may arrive out of order; analysis orders them by ``ts``.
An event whose ``ts`` lies more than ``MAX_FUTURE_SKEW_S`` in the future, or before 2000-01-01, is rejected.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from livethink.ab_test.errors import EventValidationError
from livethink.ab_test.experiment import NAME_PATTERN

MAX_FUTURE_SKEW_S = 300.0
MIN_TS = 946_684_800.0  # 2000-01-01T00:00:00Z
ID_PATTERN = r"^[\x21-\x7e]{1,128}$"  # printable ASCII, no spaces

OutcomeType = Literal["click", "add_to_cart", "order"]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    event_id: str = Field(pattern=ID_PATTERN)
    experiment: str = Field(pattern=NAME_PATTERN)
    viewer_id: str = Field(min_length=1, max_length=256)
    ts: Finite
    simulated: bool = False

    @field_validator("ts")
    @classmethod
    def _plausible_time(cls, v: float) -> float:
        if v < MIN_TS:
            raise ValueError(f"{v} is before 2000-01-01 (expected Unix seconds)")
        if v > time.time() + MAX_FUTURE_SKEW_S:
            raise ValueError(f"{v} is more than {MAX_FUTURE_SKEW_S:.0f} s in the future")
        return v


class ExposureEvent(_Event):
    """The viewer was served by ``arm`` (logged when the arm is chosen, before the reply)."""

    kind: Literal["exposure"] = "exposure"
    arm: str = Field(pattern=NAME_PATTERN)
    request_id: str | None = Field(default=None, max_length=128)
    bucket: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None
    hash_version: int | None = None


class ResponseEvent(_Event):
    """Measurements of one reply: latency, tokens, deadline, judged correctness/helpfulness, status."""

    kind: Literal["response"] = "response"
    arm: str = Field(pattern=NAME_PATTERN)
    request_id: str | None = Field(default=None, max_length=128)
    latency_ms: Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
    ttft_ms: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    tokens: Annotated[int, Field(ge=0)] | None = None
    deadline_met: bool | None = None
    correct: bool | None = None
    helpful: bool | None = None
    status: Literal["ok", "rejected", "error"] = "ok"


class OutcomeEvent(_Event):
    """A business outcome of the viewer: click, add-to-cart or order (with its GMV)."""

    kind: Literal["outcome"] = "outcome"
    type: OutcomeType
    gmv: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _gmv_only_on_orders(self) -> OutcomeEvent:
        if self.gmv is not None and self.type != "order" and self.gmv != 0:
            raise ValueError(f"gmv: only orders carry GMV (type is {self.type!r})")
        return self


Event = Annotated[ExposureEvent | ResponseEvent | OutcomeEvent, Field(discriminator="kind")]
_EVENT_ADAPTER: TypeAdapter[ExposureEvent | ResponseEvent | OutcomeEvent] = TypeAdapter(Event)
T = TypeVar("T")


class OutcomeIn(BaseModel):
    """Body of ``POST /v1/ab/outcomes``. Use it as the FastAPI body model to get 422s that name the field."""

    model_config = ConfigDict(extra="forbid", strict=True)

    event_id: str = Field(pattern=ID_PATTERN)
    viewer_id: str = Field(min_length=1, max_length=256)
    experiment: str = Field(pattern=NAME_PATTERN)
    type: OutcomeType
    gmv: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    ts: Finite | None = None
    simulated: bool = False

    def to_event(self, now: float | None = None) -> OutcomeEvent:
        """The stored event; ``ts`` defaults to the server's receive time."""
        data = self.model_dump()
        data["ts"] = self.ts if self.ts is not None else (now if now is not None else time.time())
        return parse_event({**data, "kind": "outcome"})


_OUTCOME_ADAPTER = TypeAdapter(OutcomeIn)


def _describe(exc: ValidationError, prefix: str = "") -> str:
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"] if p not in ("exposure", "response", "outcome")]
        msg = err["msg"].removeprefix("Value error, ")
        field = ".".join(loc)
        if not field and err["type"].startswith("union_tag"):
            field = "kind"
        if msg.startswith(f"{field}:"):
            parts.append(f"{prefix}{msg}")
        else:
            parts.append(f"{prefix}{field}: {msg}" if field else f"{prefix}{msg}")
    return "; ".join(parts)


def _validated(adapter: TypeAdapter[T], data: object, not_a_mapping: str) -> T:
    """``data`` validated by ``adapter``; ``EventValidationError`` naming the field (``not_a_mapping``: what to
    say when ``data`` is not a mapping)."""
    if not isinstance(data, dict):
        raise EventValidationError(f"{not_a_mapping}, got {type(data).__name__}")
    try:
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise EventValidationError(_describe(exc)) from None


def parse_event(data: dict | BaseModel) -> ExposureEvent | ResponseEvent | OutcomeEvent:
    """Validate one event mapping (``kind`` picks the schema); raise ``EventValidationError`` naming the field."""
    if isinstance(data, ExposureEvent | ResponseEvent | OutcomeEvent):
        return data
    return _validated(_EVENT_ADAPTER, data, "event: expected a mapping")


def validate_outcome(payload: dict) -> OutcomeIn:
    """Validate a ``POST /v1/ab/outcomes`` body; ``EventValidationError`` names the field."""
    return _validated(_OUTCOME_ADAPTER, payload, "body: expected a JSON object")
