"""Streamed livestream replies over real loopback HTTP (uvicorn in a thread, httpx streaming) with the
fault-injection engine: event order and framing, sentences joined = the final reply (at a hard cut too: nothing
retracted), the first sentence within the deadline, a later sentence paced to speech after it, speech stalls,
the filler line instead of a 429, and 400s naming bad fields. Timings here are the SlowEngine's, not a model's."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.serve import (
    LIVE_BODY,
    ServerThread,
    SlowEngine,
    load_tokenizer,
    serve_engine,
    tiny_student_dir,
)

pytestmark = [pytest.mark.timing, pytest.mark.timeout(120)]
HTTP = httpx.Client(timeout=15)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(tiny_student_dir())


@pytest.fixture
def serve(tokenizer):
    servers = []

    def start(engine: SlowEngine | None = None, **overrides):
        engine = engine or SlowEngine(tokenizer)
        server = serve_engine(engine, **overrides)
        servers.append(server)
        return server, engine

    yield start
    for server in servers:
        server.close()


@pytest.fixture(scope="module")
def shared(tokenizer):
    engine = SlowEngine(tokenizer)
    server = serve_engine(engine)
    yield server, engine
    server.close()


def stream(url: str, **fields) -> tuple[httpx.Response, str, list[tuple[str, dict, float]]]:
    """POST a streamed reply: the response, its raw text and its events as (name, data, client ms at receipt)."""
    body = {**LIVE_BODY, "stream": True, **fields}
    t0 = time.monotonic()
    events, raw = [], ""
    with HTTP.stream("POST", f"{url}/v1/livestream/reply", json=body) as r:
        if r.status_code != 200:
            r.read()
            return r, r.text, []
        buffer = ""
        for chunk in r.iter_text():
            raw += chunk
            buffer += chunk
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                name, data = block.split("\n")
                events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: ")),
                               (time.monotonic() - t0) * 1000))  # fmt: skip
    return r, raw, events


def metric(server: ServerThread, name: str, **labels: str) -> float:
    """A livestream sample of the server's /metrics (prometheus_client's parser)."""
    want = {"endpoint": "livestream", "arm": "none", "model": "rft", **labels}
    for family in text_string_to_metric_families(HTTP.get(f"{server.url}/metrics").text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in want.items()):
                return sample.value
    return 0.0


def sentences(events) -> list[dict]:
    return [data for name, data, _ in events if name == "sentence"]


def test_events_in_order_and_the_sentences_are_the_reply(serve):
    server, _ = serve()
    r, raw, events = stream(server.url, deadline_ms=1000)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert all(block.startswith("event: ") and block.count("\n") == 1 for block in raw.split("\n\n")[:-1])
    names = [name for name, _, _ in events]
    assert names == ["plan", "sentence", "sentence", "done"]
    assert all(data["event"] == name for name, data, _ in events)
    plan, done = events[0][1], events[-1][1]
    assert plan["model"] == "rft" and plan["thinking_cap"] >= 0 and not plan["refused"]
    assert 0 < plan["planned_first_sentence_ms"] <= 1000
    said = sentences(events)
    assert [s["text"] for s in said] == ["The hoodie costs $39.", " It ships in 2 days."]
    assert "".join(s["text"] for s in said) == done["reply"] == "The hoodie costs $39. It ships in 2 days."
    assert [s["index"] for s in said] == [0, 1] and [s["words"] for s in said] == [4, 5]
    first_client_ms = events[1][2]
    assert done["timings"]["first_sentence_ms"] == said[0]["at_ms"] <= 1000  # unloaded: within the deadline
    assert first_client_ms <= 1000
    assert done["deadline_met"] and not done["fallback"] and not done["refused"]
    assert (done["sentences"], done["stalls"], done["speech_rate_wps"]) == (2, 0, 2.5)
    assert done["finish_reason"] == "stop" and done["request_id"] == plan["request_id"]


def test_a_later_sentence_may_come_after_the_deadline_paced_to_speech(serve, tokenizer):
    reply = "Yes, the hoodie is in stock. " + " ".join(["It ships in two days from our warehouse in Lyon."] * 2)
    server, engine = serve(SlowEngine(tokenizer, think_words=0, token_s=0.05, reply=reply))
    _, _, events = stream(server.url, deadline_ms=1000)
    said, done = sentences(events), events[-1][1]
    assert said[0]["at_ms"] <= 1000 < said[-1]["at_ms"]  # the last one after the deadline: allowed
    assert "".join(s["text"] for s in said) == done["reply"] == reply
    assert done["deadline_met"] and not done["cut_at_deadline"] and done["finish_reason"] == "stop"
    assert done["stalls"] == 0  # each came while the avatar still spoke (6 words = 2.4 s at 2.5 words/s)
    assert said[0]["speech_end_ms"] == pytest.approx(said[0]["at_ms"] + 2400, abs=0.1)
    assert not engine.aborted


def test_a_hard_cut_keeps_exactly_the_sentences_sent_and_counts_stalls(serve, tokenizer):
    """Decoding slower than speech: each later sentence comes after the avatar fell silent (a stall), and the
    paced cut stops it mid-sentence; the reply is then what was sent, nothing retracted."""
    reply = "Yes. It is. The hoodie costs a lot of money today and it ships in two days from the warehouse."
    server, engine = serve(SlowEngine(tokenizer, think_words=0, token_s=0.08, reply=reply))
    _, _, events = stream(server.url, deadline_ms=1000, speech_rate_wps=20.0)
    said, done = sentences(events), events[-1][1]
    assert [s["text"] for s in said] == ["Yes.", " It is."]
    assert done["reply"] == "Yes. It is." and done["cut_at_deadline"] and done["finish_reason"] == "length"
    assert not done["fallback"] and engine.aborted
    assert said[1]["stall"] and done["stalls"] == 1  # 160 ms after "Yes." (50 ms of speech at 20 words/s)
    assert metric(server, "livethink_speech_stalls_total") == 1
    assert metric(server, "livethink_first_sentence_seconds_count") == 1


def test_no_sentence_by_the_deadline_speaks_the_fallback_line(serve, tokenizer):
    server, _ = serve(SlowEngine(tokenizer, think_words=0, token_s=0.05, reply="word " * 40))
    _, _, events = stream(server.url, deadline_ms=600)
    said, done = sentences(events), events[-1][1]
    assert len(said) == 1 and said[0]["fallback"] and said[0]["at_ms"] <= 600
    assert done["reply"] == said[0]["text"] and done["fallback"] and done["fallback_reason"] == "deadline"


def test_a_refusal_is_a_filler_line_when_asked(serve):
    server, _ = serve()
    r, _, _ = stream(server.url, deadline_ms=1)  # nothing fits in 1 ms: today's 429
    assert r.status_code == 429 and "Retry-After" in r.headers
    r, _, events = stream(server.url, deadline_ms=1, on_refusal="filler")
    assert r.status_code == 200
    assert [name for name, _, _ in events] == ["plan", "sentence", "done"]
    plan, said, done = events[0][1], events[1][1], events[2][1]
    assert plan["refused"] and plan["fallback"] and plan["thinking_cap"] is None
    assert said["fallback"] and said["text"] == done["reply"]
    assert done["refused"] and done["fallback"] and done["fallback_reason"] == "refused"
    assert done["refusal_reason"] == "deadline_unreachable"
    plain = HTTP.post(f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "deadline_ms": 1, "on_refusal": "filler"})
    assert plain.status_code == 200
    body = plain.json()
    assert body["refused"] and body["fallback"] and body["reply"] == done["reply"]
    assert metric(server, "livethink_rejections_total", reason="deadline_unreachable") == 3
    assert metric(server, "livethink_requests_total", status="rejected") == 3  # the fillers are refusals too


def test_the_server_default_filler_and_a_request_asking_for_the_error(serve):
    server, _ = serve(**{"endpoints.livestream.on_refusal": "filler", "endpoints.livestream.filler_reply": "One sec!"})
    r = HTTP.post(f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "deadline_ms": 1})
    assert r.status_code == 200 and r.json()["reply"] == "One sec!" and r.json()["refused"]
    r = HTTP.post(f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "deadline_ms": 1, "on_refusal": "error"})
    assert r.status_code == 429


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"stream": True, "speech_rate_wps": 0}, "speech_rate_wps"),
        ({"stream": True, "speech_rate_wps": -2.5}, "speech_rate_wps"),
        ({"stream": True, "speech_rate_wps": "fast"}, "speech_rate_wps"),
        ({"speech_rate_wps": 2.5}, "speech_rate_wps"),  # pacing asked of a reply that is not streamed
        ({"on_refusal": "sing"}, "on_refusal"),
        ({"stream": "yes"}, "stream"),
    ],
)
def test_bad_fields_are_400s_naming_them(shared, fields, param):
    server, engine = shared
    r = HTTP.post(f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, **fields})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert engine.started == 0


def test_a_viewer_leaving_mid_stream_stops_the_engine(serve, tokenizer):
    server, engine = serve(SlowEngine(tokenizer, think_words=0, token_s=0.05, reply="Yes. " * 30))
    with HTTP.stream("POST", f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "stream": True}) as r:
        lines = r.iter_lines()
        assert next(lines) == "event: plan"
        while next(lines) != "event: sentence":
            pass
    end = time.monotonic() + 3
    while engine.active and time.monotonic() < end:
        time.sleep(0.02)
    assert not engine.active and engine.cancelled
    assert metric(server, "livethink_requests_total", status="cancelled") == 1
