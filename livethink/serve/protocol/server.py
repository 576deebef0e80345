"""The server's own routes: models, health, version, A/B outcomes and summaries, admin status."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


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


def model_card(name: str, created: int, owned_by: str = "livethink", **extra: Any) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": owned_by, **extra}
