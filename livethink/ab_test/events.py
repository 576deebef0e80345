"""Event schemas (pydantic): exposures, responses, outcomes, and the ``POST /v1/ab/outcomes`` payload.

Times are Unix seconds (client event time). Events may arrive out of order; analysis orders them by ``ts``.
An event whose ``ts`` lies more than ``MAX_FUTURE_SKEW_S`` in the future, or before 2000-01-01, is rejected.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal, TypeVar

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

BUILTIN_OUTCOME_TYPES = ("click", "add_to_cart", "order", "correct")  # always accepted; others are declared
OUTCOME_TYPE_PATTERN = r"^[a-z][a-z0-9_]{0,15}$"
ResponseStatus = Literal["answered", "fallback", "refused", "error"]
LEGACY_STATUS = {"ok": "answered", "rejected": "refused"}  # the spelling of stores written before the statuses
Finite = Annotated[float, Field(allow_inf_nan=False)]
Ms = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


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
    unit_id: str | None = Field(default=None, min_length=1, max_length=256)  # the session or stream hashed


class ResponseEvent(_Event):
    """What one request's viewer got and how: ``status`` answered (the model's reply), fallback (the server's
    fallback reply), refused (429, no reply) or error (failed); latency (server clock, arrival to last byte),
    first token (``ttft_ms``, thinking included), first *reply* token and first sentence (streamed), tokens, the
    deadline met by the server's clock, forced end of thinking, cut at the deadline, judged correctness.

    The statuses of older stores (``ok``, ``rejected``) are read as answered and refused."""

    kind: Literal["response"] = "response"
    arm: str = Field(pattern=NAME_PATTERN)
    request_id: str | None = Field(default=None, max_length=128)
    latency_ms: Ms
    ttft_ms: Ms | None = None
    tokens: Annotated[int, Field(ge=0)] | None = None
    deadline_met: bool | None = None
    correct: bool | None = None
    helpful: bool | None = None
    status: ResponseStatus = "answered"
    first_reply_ms: Ms | None = None
    first_sentence_ms: Ms | None = None
    forced_end: bool | None = None
    cut: bool | None = None

    @field_validator("status", mode="before")
    @classmethod
    def _legacy_status(cls, v: object) -> object:
        return LEGACY_STATUS.get(v, v) if isinstance(v, str) else v


def _check_outcome(type_: str, gmv: float | None, value: float | None, request_id: str | None) -> None:
    """What every outcome obeys whatever the experiment declares: GMV only on orders; a ``correct`` label is
    0 or 1 and names the reply (``request_id``) it judges."""
    if gmv is not None and type_ in BUILTIN_OUTCOME_TYPES and type_ != "order" and gmv != 0:  # declared: below
        raise ValueError(f"gmv: only orders carry GMV (type is {type_!r})")
    if type_ == "correct":
        if value not in (0.0, 1.0):
            raise ValueError("value: a 'correct' label needs value 0 or 1")
        if not request_id:
            raise ValueError("request_id: a 'correct' label names the reply it judges (request_id)")


class OutcomeEvent(_Event):
    """An outcome of the viewer: a built-in one (click, add-to-cart, order with its GMV, a ``correct`` label of
    one reply, ``value`` 0/1) or one the experiment declares (``outcomes:`` in its config, with a ``value``)."""

    kind: Literal["outcome"] = "outcome"
    type: str = Field(pattern=OUTCOME_TYPE_PATTERN)
    gmv: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    value: Finite | None = None
    request_id: str | None = Field(default=None, max_length=128)

    @model_validator(mode="after")
    def _consistent(self) -> OutcomeEvent:
        _check_outcome(self.type, self.gmv, self.value, self.request_id)
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
    type: str = Field(pattern=OUTCOME_TYPE_PATTERN, description="click, add_to_cart, order, correct (a label of "
                      "the reply ``request_id``, value 0/1) or a type the experiment declares")  # fmt: skip
    gmv: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    value: Finite | None = Field(default=None, description="the outcome's value (label 0/1, score, count)")
    request_id: str | None = Field(default=None, max_length=128, description="the reply the outcome is about")
    ts: Finite | None = None
    simulated: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> OutcomeIn:
        _check_outcome(self.type, self.gmv, self.value, self.request_id)
        return self

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


def check_declared(ev: OutcomeEvent | OutcomeIn, declared: dict[str, dict[str, Any]], experiment: str) -> None:
    """``EventValidationError`` naming ``type`` or ``value`` unless ``ev`` is a built-in outcome or one that
    ``declared`` (the experiment's ``outcomes``, name → declaration) allows, with a value its kind accepts."""
    if ev.type in BUILTIN_OUTCOME_TYPES:
        return
    decl = declared.get(ev.type)
    if decl is None:
        known = ", ".join([*BUILTIN_OUTCOME_TYPES, *declared])
        raise EventValidationError(
            f"type: outcome type {ev.type!r} is not declared by experiment {experiment!r} (declared: {known}); "
            "declare it under 'outcomes:' in the experiment config"
        )
    if ev.gmv not in (None, 0.0):
        raise EventValidationError(f"gmv: only orders carry GMV (type is {ev.type!r})")
    v = ev.value
    kind = decl["kind"]
    if kind == "binary" and v not in (None, 0.0, 1.0):
        raise EventValidationError(f"value: {ev.type!r} is binary: value 0 or 1 (default 1), got {v}")
    if kind == "count" and v is not None and (v < 0 or v != int(v)):
        raise EventValidationError(f"value: {ev.type!r} is a count: a whole number ≥ 0, got {v}")
    if kind == "scale":
        lo, hi = decl["min"], decl["max"]
        if v is None or not lo <= v <= hi:
            raise EventValidationError(f"value: {ev.type!r} is a score in [{lo:g}, {hi:g}], got {v}")


def validate_outcome(payload: dict) -> OutcomeIn:
    """Validate a ``POST /v1/ab/outcomes`` body; ``EventValidationError`` names the field."""
    return _validated(_OUTCOME_ADAPTER, payload, "body: expected a JSON object")
