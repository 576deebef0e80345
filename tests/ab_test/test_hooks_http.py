"""Server integration: a minimal FastAPI app wired like livethink's server, driven by the HTTP simulator."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, HTTPException, Request

from livethink.ab_test.assignment import Assigner
from livethink.ab_test.errors import (
    EventConflictError,
    EventValidationError,
    UnknownArmError,
    UnknownExperimentError,
)
from livethink.ab_test.events import OutcomeIn
from livethink.ab_test.experiment import parse_experiment
from livethink.ab_test.hooks import (
    ExperimentHooks,
    HookSet,
    arecord_outcome,
    experiment_summary,
    open_hooks,
    record_outcome,
)
from livethink.ab_test.serving import SIMULATED_HEADER, ArmSettings, ExperimentHooksProtocol, ResponseRecord
from livethink.ab_test.simulate import BUILTIN_TASKS, check_loopback, judge_reply, load_tasks, simulate_http
from livethink.ab_test.store import EventStore

EXP = parse_experiment(
    {
        "name": "live1",
        "arms": [
            {"name": "rft", "weight": 0.5, "variant": "rft"},
            {"name": "drpo", "weight": 0.5, "variant": "drpo", "budget": {"thinking_budget": 64}},
        ],
        "min_viewers_per_arm": 5,
    }  # fmt: skip
)


def make_app(hooks: HookSet, store: EventStore) -> FastAPI:
    """What livethink.serve does with the hooks (a fake engine replies instantly)."""
    app = FastAPI()
    h = hooks["live1"]

    @app.post("/v1/livestream/reply")
    async def reply(body: dict, request: Request) -> dict:
        sim = request.headers.get(SIMULATED_HEADER) == "1"
        a = h.assign(body["viewer_id"])
        rid = uuid.uuid4().hex
        h.on_exposure(body["viewer_id"], a, request_id=rid, simulated=sim)
        fast = a.arm is not None and h.arm_settings(a.arm).variant == "drpo"
        latency = 250.0 if fast else 950.0
        text = "It ships in 2 days. Free returns within 30 days." if fast else "Shipping takes 3 days."
        record = ResponseRecord(latency_ms=latency, tokens=40, deadline_met=True)
        fut = h.on_response(body["viewer_id"], a.arm, record, request_id=rid, simulated=sim)
        if fut is not None:
            await asyncio.wrap_future(fut)
        return {"request_id": rid, "arm": a.arm, "reply": text, "timings": {"e2e_ms": latency},
                "deadline_met": True, "tokens": {"total": 40}}  # fmt: skip

    @app.post("/v1/ab/outcomes")
    async def outcomes(body: OutcomeIn) -> dict:
        try:
            ack = await arecord_outcome(hooks, body)
        except UnknownExperimentError as exc:
            raise HTTPException(404, str(exc)) from None
        except EventConflictError as exc:
            raise HTTPException(409, str(exc)) from None
        except EventValidationError as exc:  # the server's client_errors: 400 naming the field
            raise HTTPException(400, str(exc)) from None
        return {"event_id": ack.event_id, "status": ack.status}

    @app.get("/v1/ab/experiments/{name}")
    def summary(name: str) -> dict:
        try:
            return experiment_summary(store, name, max_age_s=0)
        except UnknownExperimentError as exc:
            raise HTTPException(404, str(exc)) from None

    return app


@pytest.fixture
def served(tmp_path: Path):
    store = EventStore(tmp_path / "live.db")
    hooks = open_hooks([EXP], store)
    yield make_app(hooks, store), store, hooks
    hooks.close()


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


def test_hooks_satisfy_protocol(served) -> None:
    _, _, hooks = served
    h = hooks["live1"]
    assert isinstance(h, ExperimentHooksProtocol)
    a = h.assign("viewer-1")
    assert a == Assigner(EXP)("viewer-1") and a.in_experiment
    assert h.arm_names() == ("rft", "drpo")
    assert h.arm_settings("drpo") == ArmSettings("live1", "drpo", "drpo", thinking_budget=64)
    assert h.arm_settings("rft") == ArmSettings("live1", "rft", "rft")
    with pytest.raises(UnknownArmError, match="arm: unknown arm 'zzz'") as err:
        h.arm_settings("zzz")
    assert isinstance(err.value, KeyError)  # what a lookup by name raises


def test_schedule_gates_assignment(tmp_path: Path) -> None:
    future = parse_experiment({**EXP.to_dict(), "name": "later", "start": "2099-01-01T00:00:00Z"})
    with EventStore(tmp_path / "s.db") as store:
        h = ExperimentHooks(future, store)
        a = h.assign("v1")
        assert not a.in_experiment and a.arm is None
        assert h.on_exposure("v1", a, request_id="r1") is None
        h.close()


def test_simulator_against_server(served) -> None:
    app, store, _ = served

    async def run() -> dict:
        async with _client(app) as client:
            result = await simulate_http("http://127.0.0.1", "live1", requests=300, seed=1, concurrency=8,
                                         client=client, run_id="t")  # fmt: skip
            summary = (await client.get("/v1/ab/experiments/live1")).json()
            missing = await client.get("/v1/ab/experiments/nope")
            assert missing.status_code == 404
            return {"result": result, "summary": summary}

    out = asyncio.run(run())
    result, summary = out["result"], out["summary"]
    assert result["replies_ok"] == 300 and result["errors"] == 0 and result["malformed"] == 0
    assert result["outcomes_posted"] > 30 and result["outcomes_acked"] == result["outcomes_posted"]
    assert set(result["arms"]) == {"rft", "drpo"}
    per_arm = result["per_arm"]  # what each arm's viewers saw, the goodput accounting of the demo's summary
    assert set(per_arm) == {"rft", "drpo"} and sum(a["sent"] for a in per_arm.values()) == 300
    assert all(a["answered"] == a["sent"] and a["refused"] == a["errors"] == 0 for a in per_arm.values())
    assert all(0 <= a["goodput"] <= a["answered_share"] == 1.0 for a in per_arm.values())
    assert result["labels_posted"] == result["labels_acked"] == 300  # the judge's verdicts, as labels
    assert store.count("live1") == 600 + result["outcomes_acked"] + result["labels_acked"]
    rows = store.fetch("live1", "exposure", ["viewer_id", "simulated"])
    assert all(v.startswith("sim-t-") and sim for v, sim in rows)
    outcomes = store.fetch("live1", "outcome", ["simulated"])
    assert outcomes and all(sim for (sim,) in outcomes)
    assert summary["experiment"] == "live1" and summary["simulated"] and summary["viewers"] == 300
    assert summary["arms"]["drpo"]["latency_p50_ms"] == 250.0
    assert summary["verdict"]["line"]


def test_simulator_leaves_the_deadline_to_the_server(served) -> None:
    """Without --deadline-ms the simulator sends none, so the experiment arm's (or endpoint's) deadline applies."""
    app, _, _ = served
    sent: list[dict] = []

    async def capture(request: httpx.Request) -> None:
        if request.url.path == "/v1/livestream/reply":
            sent.append(json.loads(request.content))

    async def run(**kwargs) -> dict:
        async with _client(app) as client:
            client.event_hooks["request"] = [capture]
            return await simulate_http("http://127.0.0.1", "live1", requests=4, seed=2, client=client, **kwargs)

    assert asyncio.run(run())["replies_ok"] == 4
    assert len(sent) == 4 and all("deadline_ms" not in body for body in sent)
    sent.clear()
    assert asyncio.run(run(deadline_ms=700, run_id="d"))["replies_ok"] == 4
    assert [body["deadline_ms"] for body in sent] == [700] * 4


def test_outcome_endpoint_errors(served) -> None:
    app, store, _ = served

    async def run() -> list[httpx.Response]:
        async with _client(app) as client:
            ok = {"event_id": "e1", "viewer_id": "v1", "experiment": "live1", "type": "order", "gmv": 9.5}
            return [
                await client.post("/v1/ab/outcomes", json=ok),
                await client.post("/v1/ab/outcomes", json=ok),  # duplicate: idempotent
                await client.post("/v1/ab/outcomes", json={**ok, "gmv": 10.0}),  # same id, new content
                await client.post("/v1/ab/outcomes", json={**ok, "event_id": "e2", "gmv": -1}),
                await client.post("/v1/ab/outcomes", json={**ok, "event_id": "e3", "type": "refund"}),
                await client.post("/v1/ab/outcomes", json={**ok, "event_id": "e4", "experiment": "nope"}),
            ]

    r = asyncio.run(run())
    assert [x.status_code for x in r] == [200, 200, 409, 422, 400, 404]
    assert r[0].json()["status"] == "stored" and r[1].json()["status"] == "duplicate"
    assert r[3].json()["detail"][0]["loc"] == ["body", "gmv"]
    assert r[4].json()["detail"].startswith("type: outcome type 'refund' is not declared by experiment 'live1'")
    assert store.count("live1") == 1
    assert time.time() - store.fetch("live1", "outcome", ["ts"])[0][0] < 60


def test_sync_record_outcome(served) -> None:
    _, store, hooks = served
    ack = record_outcome(
        hooks, {"event_id": "s1", "viewer_id": "v", "experiment": "live1", "type": "click"}
    ).result(30)
    assert ack.status == "stored" and store.present_ids(["s1"]) == {"s1"}
    with pytest.raises(UnknownExperimentError, match="experiment"):
        record_outcome(hooks, {"event_id": "s2", "viewer_id": "v", "experiment": "zzz", "type": "click"})


def test_loopback_only_and_bounds() -> None:
    for url in ("http://127.0.0.1:8000", "http://localhost:9", "http://[::1]:8000"):
        check_loopback(url)
    for url in ("http://10.0.0.1:8000", "https://example.com", "http://0.0.0.0:80"):
        with pytest.raises(ValueError, match="loopback"):
            check_loopback(url)
    with pytest.raises(ValueError, match="requests"):
        asyncio.run(simulate_http("http://127.0.0.1:1", "live1", requests=0))


def test_judge_reply_is_the_rubric_judge() -> None:
    ships, shoes, mug, lamp = BUILTIN_TASKS
    assert judge_reply(ships, "Ships in 2 days, and returns are free within 30 days.") == (True, True)
    assert judge_reply(ships, "Ships in 2 days.") == (True, False)  # correct, adds no doc fact
    assert judge_reply(ships, "Ships in 3 days.") == (False, False)
    # the rubric's rule: a right answer beside a number the docs do not support is not correct
    assert judge_reply(ships, "Ships in 2 days, only $35 today, free returns.") == (False, False)
    assert judge_reply(shoes, "Yes, they are waterproof, and 20% off today.") == (True, True)
    assert judge_reply(shoes, "No.") == (False, False)
    assert judge_reply(mug, "The colour is not stated in the docs.") == (True, False)
    assert judge_reply(lamp, "It is made by Lumo.") == (True, False)
    no_facts = {k: v for k, v in lamp.items() if k != "helpful_facts"}
    assert judge_reply(no_facts, "It is made by Lumo.") == (True, None)  # helpfulness not judged
    no_reference = {k: v for k, v in lamp.items() if k != "reference"}
    assert judge_reply(no_reference, "It is made by Lumo.") == (None, None)


def test_simulator_rejects_a_task_the_judge_cannot_read(tmp_path: Path) -> None:
    bad = {**BUILTIN_TASKS[0], "reference": {"kind": "number", "value": "two"}}
    with pytest.raises(ValueError, match=r"tasks\[1\]: reference: .*'two' does not fit kind 'number'"):
        asyncio.run(simulate_http("http://127.0.0.1:1", "live1", requests=1, tasks=[BUILTIN_TASKS[0], bad]))
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({**BUILTIN_TASKS[0], "history": [{"role": "bot", "content": "hi"}]}) + "\n")
    with pytest.raises(ValueError, match=r"tasks.jsonl:1: history.0.role"):
        load_tasks(path)
