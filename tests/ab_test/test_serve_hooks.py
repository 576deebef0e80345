"""The server's A/B adapter (``livethink.serve.telemetry.ab_hooks``) over a real SQLite store: typed arm choices, and every A/B
error answered as the client's ``APIError`` by ``client_errors``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from livethink.ab_test.errors import SpoolFullError
from livethink.ab_test.experiment import parse_experiment
from livethink.ab_test.hooks import open_hooks
from livethink.ab_test.serving import ResponseRecord
from livethink.serve.errors import APIError
from livethink.serve.telemetry.ab_hooks import ABTestHooks, ArmChoice, NoExperiment, client_errors

EXP = parse_experiment(
    {
        "name": "x1",
        "arms": [
            {"name": "fast", "weight": 0.5, "variant": "drpo", "budget": {"deadline_ms": 800, "thinking_budget": 0}},
            {"name": "slow", "weight": 0.5, "variant": "rft"},
        ],
    }
)


def _error(exc: pytest.ExceptionInfo[APIError]) -> tuple[int, str, str | None, str | None]:
    e = exc.value
    return e.status, e.type, e.param, e.code


@pytest.fixture
def hooks(tmp_path: Path):
    errors: list[str] = []
    h = ABTestHooks(open_hooks([EXP], tmp_path / "ab.db"), on_error=errors.append)
    yield h
    h.close()
    assert errors == []


def test_assignment_is_a_typed_arm_choice(hooks: ABTestHooks) -> None:
    c = hooks.assign("viewer-7")
    assert c.experiment == "x1" and c.arm in ("fast", "slow") and not c.forced and c.assignment is not None
    forced = hooks.assign(None, "fast")
    assert forced == ArmChoice("x1", "fast", "drpo", deadline_ms=800, thinking_budget=0, forced=True)
    assert hooks.assign(None) == ArmChoice() and hooks.arms() == {"x1": ["fast", "slow"]}
    assert hooks.health() is not None and hooks.health()["degraded"] is False


def test_events_are_logged_and_summarised(hooks: ABTestHooks) -> None:
    c = hooks.assign("viewer-7")
    hooks.on_exposure("viewer-7", c, "r1")
    hooks.on_response("viewer-7", c, "r1", ResponseRecord(120.0, 40.0, 12, True, "ok"))
    body = {"event_id": "o1", "viewer_id": "viewer-7", "experiment": "x1", "type": "order", "gmv": 5.0}
    assert asyncio.run(hooks.on_outcome(body)) == {"event_id": "o1", "status": "stored"}
    hooks.experiments.writer.flush()
    store = hooks.experiments.store
    assert store.count("x1") == 3
    latency, ttft, status = store.fetch("x1", "response", ["latency_ms", "ttft_ms", "status"])[0]
    assert (latency, ttft, status) == (120.0, 40.0, "answered")  # "ok" is the old spelling of answered
    assert hooks.summary("x1")["experiment"] == "x1"


def test_ab_errors_become_api_errors(hooks: ABTestHooks) -> None:
    with pytest.raises(APIError) as exc:
        hooks.assign("v", "nope")
    assert _error(exc) == (404, "not_found_error", "arm", "arm_not_found")
    assert str(exc.value) == "arm: unknown arm 'nope' (arms: {'x1': ['fast', 'slow']})"
    with pytest.raises(APIError) as exc:
        hooks.summary("nope")
    assert _error(exc) == (404, "not_found_error", "name", None)
    ok = {"event_id": "o1", "viewer_id": "v", "experiment": "x1", "type": "order", "gmv": 5.0}
    asyncio.run(hooks.on_outcome(ok))
    for body, expected in (
        ({**ok, "gmv": 6.0}, (409, "conflict_error", "event_id", None)),
        ({**ok, "event_id": "o2", "experiment": "zz"}, (404, "not_found_error", "experiment", None)),
        ({**ok, "event_id": "o3", "type": "refund"}, (400, "invalid_request_error", "type", None)),
    ):
        with pytest.raises(APIError) as exc:
            asyncio.run(hooks.on_outcome(body))
        assert _error(exc) == expected
    with pytest.raises(APIError) as exc, client_errors():
        raise SpoolFullError("spool: full (256 MiB); the event was not accepted")  # fault injection
    assert _error(exc) == (503, "unavailable_error", None, None)


def test_no_experiment() -> None:
    none = NoExperiment()
    assert none.assign("v") == ArmChoice() and none.arms() == {} and none.health() is None
    with pytest.raises(APIError) as exc:
        none.assign("v", "fast")
    assert _error(exc) == (404, "not_found_error", "arm", "arm_not_found")
    with pytest.raises(APIError) as exc:
        asyncio.run(none.on_outcome({}))
    assert _error(exc) == (404, "not_found_error", "experiment", None)
    with pytest.raises(APIError) as exc:
        none.summary("x1")
    assert _error(exc) == (404, "not_found_error", "name", None)
