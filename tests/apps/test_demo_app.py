"""The demo without a browser: form parsing, the HTTP client against a real loopback server (deterministic
fault-injection engine) including error mapping, the Live reply handler, the Experiment tab's rendering of
compact and full A/B summaries, the Compression tab's files, and building the app with the server down."""

from __future__ import annotations

import asyncio
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from apps.demo import compression, experiment, inputs, live, speech
from apps.demo.client import (
    Delta,
    LivethinkClient,
    ReplyRequest,
    ReplyResult,
    ServerError,
    _error_from_response,
)
from apps.demo.speech import espeak_path
from livethink.data.schema import ProductDoc
from livethink.serve.api.app import create_app
from tests.support.serve import (
    LIVE_BODY,
    ServerThread,
    SlowEngine,
    engine_set,
    free_port,
    load_tokenizer,
    make_config,
    tiny_student_dir,
)

pytestmark = pytest.mark.timeout(120)
REPLY = "The hoodie costs $39. It ships in 2 days."
DOCS = (
    ProductDoc(product_id="p1", title="Hoodie", text="[p1] Hoodie (hoodie)\nPrice: $39. Ships in 2 days."),
)
EXPERIMENT = """
name: demo_ab
control: rft
arms:
  - {name: rft, weight: 0.5, variant: rft}
  - {name: fast, weight: 0.5, variant: rft, budget: {thinking_budget: 4}}
min_viewers_per_arm: 50
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo_app")
    (tmp / "exp.yaml").write_text(EXPERIMENT)
    tokenizer = load_tokenizer(tiny_student_dir())
    config = make_config(
        tiny_student_dir(), experiment={"file": str(tmp / "exp.yaml"), "store": str(tmp / "ab.db")}
    )
    engine = SlowEngine(tokenizer, token_s=0.001)
    srv = ServerThread(create_app(config, engine_set(engine, capacity=2)))
    srv.engine = engine
    yield srv
    srv.close()


def closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


# -- form parsing ------------------------------------------------------------------------------------------
def test_parse_docs_catalog_and_pasted():
    docs = inputs.parse_docs("[P0001] Nova Jacket (jacket)\nPrice: $10.\n\nSome pasted product\nIt is blue.")
    assert [(d.product_id, d.title) for d in docs] == [
        ("P0001", "Nova Jacket"),
        ("pasted-2", "Some pasted product"),
    ]
    assert docs[1].text == "Some pasted product\nIt is blue."
    with pytest.raises(inputs.InputError, match="Product docs"):
        inputs.parse_docs("  \n\n ")


def test_parse_history_and_question():
    turns = inputs.parse_history("viewer: is it blue?\nHost: yes!\n\njust a line")
    assert [(t.role, t.content) for t in turns] == [
        ("viewer", "is it blue?"),
        ("host", "yes!"),
        ("viewer", "just a line"),
    ]
    with pytest.raises(inputs.InputError, match="History line 1"):
        inputs.parse_history("host:   ")
    with pytest.raises(inputs.InputError, match="Question"):
        inputs.parse_question("   ")


def test_catalog_loading(tmp_path):
    path = tmp_path / "catalog.jsonl"
    path.write_text(json.dumps({"split": "test", "product_id": "T1", "title": "Hat", "text": "[T1] Hat\nPrice: $5."})
                    + "\nnot json\n")  # fmt: skip
    entries, warning = inputs.load_catalog(path)
    assert [e.label for e in entries] == ["T1 · Hat (test)"] and "1 malformed" in warning
    assert inputs.docs_for(entries, ["T1 · Hat (test)"]) == "[T1] Hat\nPrice: $5."
    assert inputs.load_catalog(tmp_path / "missing.jsonl")[0] == []


# -- the client against a real server ----------------------------------------------------------------------
def test_client_reply_and_stream_agree(server):
    client = LivethinkClient(server.url)
    assert client.models() == ["rft"] and client.experiments() == {"demo_ab": ["rft", "fast"]}
    req = ReplyRequest(DOCS, "How much is the hoodie?", (), "viewer-1", 2000, arm="rft")
    one = client.reply(req)
    assert (
        one.reply == REPLY
        and one.reasoning.startswith("step0")
        and one.arm == "rft"
        and one.experiment == "demo_ab"
    )
    assert one.deadline_met and one.e2e_ms > 0 and one.first_token_ms is not None and one.reply_tokens > 0
    items = list(client.stream_reply(req))
    final = items[-1]
    assert isinstance(final, ReplyResult) and all(isinstance(x, Delta) for x in items[:-1])
    assert "".join(x.text for x in items[:-1] if x.phase == "reply") == final.reply == REPLY
    assert final.reasoning == one.reasoning and final.arm == "rft" and final.deadline_ms == 2000
    assert final.reasoning_tokens == one.reasoning_tokens and final.reply_tokens == one.reply_tokens


def test_client_errors_are_sentences(server):
    client = LivethinkClient(server.url)
    req = ReplyRequest(DOCS, "How much?", (), "viewer-1", 2000)
    cases = {
        "not_found": ReplyRequest(DOCS, "How much?", (), "v", 2000, arm="nope"),
        "bad_request": ReplyRequest(DOCS, "How much?", (), "v", 10_000_000),
    }
    for kind, bad in cases.items():
        for call in (client.reply, lambda r: list(client.stream_reply(r))):
            with pytest.raises(ServerError) as err:
                call(bad)
            assert err.value.kind == kind, (kind, err.value.message)
            assert "Traceback" not in err.value.user_message()
    with pytest.raises(ServerError) as err:
        client.reply(cases["bad_request"])
    assert "deadline_ms" in err.value.user_message() and "HTTP 400" in err.value.user_message()
    # An idle server admits even impossible deadlines (with a flagged fallback), so the 429 mapping is checked
    # on the response the server sends when it sheds load.
    shed = httpx.Response(429, headers={"Retry-After": "2"},
                          json={"error": {"message": "deadline cannot be met", "type": "overloaded", "param": "deadline_ms"}})
    overloaded = _error_from_response(shed)
    assert overloaded.kind == "overloaded" and overloaded.retry_after_s == 2
    assert overloaded.user_message().startswith("Server busy (429)")
    with pytest.raises(ServerError) as err:
        LivethinkClient(closed_url()).reply(req)
    assert err.value.kind == "unreachable" and err.value.user_message().startswith("Server down")
    with pytest.raises(ServerError) as err:
        client.experiment_summary("nope")
    assert err.value.kind == "not_found" and "nope" in err.value.user_message()


# -- the Live reply handler --------------------------------------------------------------------------------
def _final(gen):
    *_, last = list(gen)
    return last


def test_ask_side_by_side_and_single_arm(server):
    client = LivethinkClient(server.url)
    targets, status = live.discover_targets(client, "demo_ab")
    assert [t.label for t in targets] == [
        "arm rft",
        "arm fast",
        "model rft",
        live.AUTO_LABEL,
    ] and "demo_ab" in status
    tmap = {t.label: t for t in targets}
    chat_a, stats_a, _, chat_b, stats_b, _, status = _final(live.ask(client, tmap, DOCS[0].text, "How much?", "viewer: hi",
                                                               "v1", live.MODES[2], "arm rft", "arm fast", 2000, True))  # fmt: skip
    assert re.fullmatch(r"✓ done · \d\d:\d\d:\d\d\.\d{3}", status)
    msgs = chat_a["value"]
    assert msgs[0] == {"role": "user", "content": "hi"} and msgs[1] == {
        "role": "user",
        "content": "How much?",
    }
    assert msgs[-1]["content"] == REPLY and any(
        (m.get("metadata") or {}).get("title") == "Thinking…" for m in msgs
    )
    assert "End-to-end latency" in stats_a and "arm `rft` of `demo_ab`" in stats_a and "✓ met" in stats_a
    assert "arm `fast`" in stats_b and chat_b["label"] == "Arm B: arm fast"
    # one arm, not streamed (the livestream endpoint)
    chat_a, stats_a, _, chat_b, stats_b, _, status = _final(live.ask(client, tmap, DOCS[0].text, "How much?", "", "v1",
                                                               live.MODES[1], "arm rft", "model rft", 2000, False))  # fmt: skip
    assert chat_a["value"] == [] and stats_a == "" and chat_b["value"][-1]["content"] == REPLY
    assert "model `rft`" in stats_b  # (the livestream endpoint still A/B-assigns the viewer)


@pytest.mark.skipif(espeak_path() is None, reason="espeak-ng not installed (make test installs it)")
def test_ask_speaks_each_sentence_as_it_arrives(server):
    """Speak: the streamed livestream reply, each sentence synthesised by espeak-ng and published on the speech
    channel; the panel carries the marker the page's player follows, not the audio."""
    client = LivethinkClient(server.url)
    channel = speech.SpeechChannel()
    chat_a, stats_a, speech_a, _, _, speech_b, status = _final(live.ask(
        client, {}, DOCS[0].text, "How much?", "", "v-speak", live.MODES[0], "x", "y", 2000, True, True,
        json.dumps({"clicked_at": time.time() * 1000 - 100, "lag_ms": 50}), channel=channel))
    assert status.startswith("✓ done"), status
    ask_id = re.search(r'<span hidden data-lt-speech="([0-9a-f]+)" data-arm="a"></span>', speech_a).group(1)
    assert "base64" not in speech_a and speech_b == ""

    async def followed() -> list:
        return [s async for s in channel.follow(ask_id)]

    sentences = asyncio.run(followed())
    assert [s.index for s in sentences] == list(range(len(sentences))) and sentences, speech_a
    assert {s.side for s in sentences} == {"a"}
    assert " ".join(s.text for s in sentences) == " ".join(REPLY.split())
    for s in sentences:
        assert channel.audio(ask_id, s.index) == s.wav and speech.wav_seconds(s.wav) > 0.2
    assert chat_a["value"][-1]["content"].strip() == REPLY.strip()
    assert "First sentence (server)" in stats_a and "First sound ready (after Ask)" in stats_a
    # the server's deadline is the 2,000 ms budget from the click (100 ms before) less the speech lead
    lead = float(re.search(r"Speech lead \(synthesis \+ page start\) \| ([\d,]+) ms", stats_a).group(1).replace(",", ""))
    served = float(re.search(r"≤ ([\d,]+) ms\)", stats_a).group(1).replace(",", ""))
    assert lead >= 50 and served <= 2000 - 100 - lead + 1, stats_a


def test_speech_channel_hands_each_sentence_to_its_follower_once_and_in_order():
    channel = speech.SpeechChannel(keep=2)
    channel.open("q1")
    channel.publish("q1", "a", "One.", b"RIFF-1", 10.0, synth_ms=160.0)

    async def scenario() -> list:
        got: list = []

        async def follower() -> None:
            async for s in channel.follow("q1", keepalive_s=5):
                got.append(s)

        task = asyncio.create_task(follower())
        await asyncio.sleep(0.05)
        assert [s.index for s in got] == [0]  # what was published before it followed
        await asyncio.to_thread(channel.publish, "q1", "b", "Two.", b"RIFF-2", 20.0)  # from the handler's thread
        await asyncio.sleep(0.05)
        assert [s.text for s in got] == ["One.", "Two."]
        channel.finish("q1")
        await asyncio.wait_for(task, 1)
        return got

    got = asyncio.run(scenario())
    assert [(s.side, s.index) for s in got] == [("a", 0), ("b", 1)]
    assert channel.audio("q1", 1) == b"RIFF-2" and channel.audio("q1", 2) is None
    with pytest.raises(KeyError, match="not open"):
        channel.publish("q1", "a", "Late.", b"RIFF-3", 30.0)
    # the lead: synthesis (60 ms prior, moved 0.3 of the way to the 160 ms measured) + the page's start lag
    assert channel.synth_ms == pytest.approx(90.0)
    assert channel.lead_ms(None) == pytest.approx(90.0 + speech.PAGE_LAG_MS_PRIOR)
    assert channel.lead_ms(40.0) == pytest.approx(130.0)
    channel.open("q2")
    channel.open("q3")  # it keeps the latest 2 asks
    assert not channel.known("q1") and channel.known("q2") and channel.known("q3")


def _silence(seconds: float, rate: int = 8000) -> bytes:
    import io
    import wave

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * int(seconds * rate))
    return buf.getvalue()


def test_speech_routes_stream_the_events_and_serve_the_audio():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    channel = speech.SpeechChannel()
    app = FastAPI()
    app.include_router(speech.speech_router(channel))
    channel.open("q1")
    wav = _silence(0.5)
    channel.publish("q1", "a", "One.", wav, 10.0)
    channel.finish("q1")
    with TestClient(app) as http:
        r = http.get("/livethink/speech/q1/events")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        event = json.loads(events[0])
        assert event["url"] == "/livethink/speech/q1/0.wav" and event["arm"] == "a" and event["seconds"] == 0.5
        assert "event: end" in r.text
        audio = http.get("/livethink/speech/q1/0.wav")
        assert audio.status_code == 200 and audio.content == wav and audio.headers["content-type"] == "audio/wav"
        missing = http.get("/livethink/speech/nope/events")
        assert missing.status_code == 404 and missing.json()["error"]["param"] == "ask_id"
        assert http.get("/livethink/speech/q1/7.wav").json()["error"]["param"] == "index"


def test_page_clock_takes_the_click_only_from_a_clock_that_agrees():
    now = time.time() * 1000
    clicked, lag = speech.page_clock(json.dumps({"clicked_at": now - 100, "lag_ms": 80}))
    assert clicked == pytest.approx(now - 100) and lag == 80.0
    assert speech.page_clock(json.dumps({"clicked_at": now + 5000, "lag_ms": None})) == (None, None)  # ahead
    assert speech.page_clock(json.dumps({"clicked_at": now - 60_000})) == (None, None)  # far behind
    assert speech.page_clock("not json") == (None, None) and speech.page_clock(None) == (None, None)


@pytest.mark.skipif(espeak_path() is None, reason="espeak-ng not installed (make test installs it)")
def test_synthesize_speaks_at_the_speech_rate():
    text = "The hoodie is in stock in size M and ships in two days."  # 12 words
    slow, fast = speech.synthesize(text, 2.0), speech.synthesize(text, 4.0)
    assert slow.startswith(b"RIFF") and speech.wav_seconds(slow) > 1.5 * speech.wav_seconds(fast)


def test_ask_reports_bad_input_and_server_down():
    client = LivethinkClient(closed_url())
    targets, status = live.discover_targets(client, None)
    assert status.startswith("⚠ Server down") and [t.label for t in targets] == [live.AUTO_LABEL]
    out = _final(live.ask(client, {}, "", "q?", "", "v", live.MODES[2], "x", "y", 1000, True))
    assert out[-1].startswith("⚠ Product docs: pick a product from the catalog or paste its docs · ")
    out = _final(live.ask(client, {}, DOCS[0].text, "q?", "", "v", live.MODES[0], "x", "y", 1000, True))
    assert "Server down" in out[1] and "Server down" in out[-1] and "Traceback" not in str(out)


def test_ask_budget_too_small_is_a_429_message(server):
    """A busy engine refuses a deadline it cannot meet (an idle one always admits a probe, see controller.plan)."""
    engine, client = server.engine, LivethinkClient(server.url)
    engine.token_s = 0.05  # a slow request keeps the engine busy while the 1 ms one arrives
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(httpx.post, f"{server.url}/v1/livestream/reply", json={**LIVE_BODY, "deadline_ms": 5000},
                           timeout=30)
        try:
            deadline = time.monotonic() + 10
            while not engine.active and time.monotonic() < deadline:
                time.sleep(0.01)
            assert engine.active, "the slow request never started"
            out = _final(live.ask(client, {}, DOCS[0].text, "q?", "", "v", live.MODES[0], "x", "y", 1, True))
        finally:
            engine.token_s = 0.001
        assert busy.result().status_code == 200
    assert "Server busy (429)" in out[1] and "raise the latency budget" in out[1]


# -- Experiment tab ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    from livethink.ab_test.analysis import analyze
    from livethink.ab_test.experiment import load_experiments
    from livethink.ab_test.hooks import compact_summary
    from livethink.ab_test.simulate import SimulationConfig, simulate_offline
    from livethink.ab_test.store import EventStore

    tmp = tmp_path_factory.mktemp("summaries")
    (tmp / "exp.yaml").write_text(EXPERIMENT)
    exp = load_experiments(tmp / "exp.yaml", known_variants={"rft"})["demo_ab"]
    store = EventStore(str(tmp / "ab.db"))
    try:
        simulate_offline(exp, store, viewers=600, seed=3, config=SimulationConfig())
        full = analyze(store, "demo_ab").summary
    finally:
        store.close()
    return {"full": json.loads(json.dumps(full)), "compact": json.loads(json.dumps(compact_summary(full)))}


@pytest.mark.parametrize("view", ["compact", "full"])
def test_experiment_rendering(summaries, view):
    s = summaries[view]
    assert experiment.is_full(s) == (view == "full")
    arms = experiment.arm_views(s)
    assert [a.name for a in arms] == ["rft", "fast"] and all(a.viewers > 0 for a in arms)
    assert (arms[0].primary_ci is not None) == (view == "full")
    lifts = experiment.lift_views(s)
    assert lifts and lifts[0].arm == "fast" and lifts[0].ci is not None
    fig = experiment.summary_figure(s)
    assert len(fig.axes) == 4
    verdict = experiment.verdict_markdown(s)
    assert s["verdict"]["line"] in verdict and "Simulated traffic" in verdict
    assert "What the viewers got" in verdict and "on answered replies" in verdict
    for name, a in s["arms"].items():  # the server's own numbers, as it computed them
        assert f"**{name}**: goodput {100 * a['goodput']:.2f}%" in verdict
        assert f"refused {100 * a['refusal_rate']:.2f}%, fallback {100 * a['fallback_rate']:.2f}%" in verdict
    tables = experiment.tables_markdown(s)
    assert "| rft |" in tables and "| fast |" in tables
    assert (experiment.over_time_image(s) is not None) == (view == "full")


def test_experiment_tab_against_server(server):
    client = LivethinkClient(server.url)
    verdict, fig, _, tables = experiment.load_experiment(client, "demo_ab")
    assert verdict.startswith("### Verdict:") and fig is not None
    verdict, fig, img, tables = experiment.load_experiment(client, "nope")
    assert verdict.startswith("⚠ Not found") and fig is None and img is None
    assert experiment.load_experiment(LivethinkClient(closed_url()), "demo_ab")[0].startswith("⚠ Server down")


# -- Compression tab ---------------------------------------------------------------------------------------
def test_compression_files(tmp_path):
    table, png, ev = compression.load_compression(tmp_path, tmp_path / "eval.md")
    assert (
        "not run yet" in table
        and compression.COMMAND in table
        and png is None
        and "No evaluation report" in ev
    )
    (tmp_path / "compression.json").write_text(
        json.dumps({"rows": [{"variant": "drpo", "tokens": 51.5, "extra": {}}]})
    )
    table, _, _ = compression.load_compression(tmp_path, None)
    assert "| variant | tokens |" in table and "| drpo | 51.5 |" in table
    (tmp_path / "compression.md").write_text("# Pareto\n| a |\n|---|\n| 1 |\n\n![plot](compression_pareto.png)\n")
    (tmp_path / "eval.md").write_text("# Eval\n")
    table, png, ev = compression.load_compression(tmp_path, tmp_path / "eval.md")
    assert table.startswith("# Pareto") and "| 1 |" in table and "![" not in table and ev == "# Eval\n"
    from PIL import Image

    Image.new("RGB", (40, 30), "white").save(tmp_path / "compression_pareto.png")  # as the benchmark names it
    assert compression.load_compression(tmp_path, None)[1] == str(tmp_path / "compression_pareto.png")
    Image.new("RGB", (40, 30), "white").save(tmp_path / "compression.png")
    assert compression.load_compression(tmp_path, None)[1] == str(tmp_path / "compression.png")


# -- the whole app -----------------------------------------------------------------------------------------
def test_build_app_with_the_server_down(tmp_path):
    import gradio as gr

    from apps.demo.app import build_app

    demo = build_app(closed_url(), tmp_path / "missing.jsonl", None, tmp_path, None)
    assert isinstance(demo, gr.Blocks)
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"ask", "chat-a", "stats-b", "compression-table", "experiment-refresh", "experiment-plot"} <= ids
    assert "quick-notice" not in ids


def test_quick_app_says_it_checks_the_plumbing_not_quality(tmp_path):
    from apps.demo.app import build_app

    demo = build_app(closed_url(), tmp_path / "missing.jsonl", None, tmp_path, None, quick=True)
    notice = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "quick-notice"]
    assert len(notice) == 1 and "plumbing" in notice[0].value and "not quality" in notice[0].value


def test_main_help(capsys):
    from apps.demo.app import main

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "--server-url" in capsys.readouterr().out


def test_goodput_per_arm_from_the_viewer_stream_report(tmp_path):
    import json

    from apps.demo.experiment import goodput_markdown

    report = tmp_path / "stream.json"
    assert "No simulated viewer stream yet" in goodput_markdown(report)
    report.write_text(json.dumps({"per_arm": {"rft": {"sent": 10, "answered": 8, "fallback": 1, "refused": 2,
                                                      "good": 4, "goodput": 0.4}}}))
    text = goodput_markdown(report)
    assert "| rft | 10 | 8 | 1 | 2 | 4 | **40.0%** |" in text
    report.write_text("{not json")
    assert goodput_markdown(report).startswith("⚠ Could not read")
    assert goodput_markdown(None) == ""


def test_a_spoken_reply_asks_for_the_filler_line_and_a_refusal_says_so():
    """The avatar is never silent: a spoken request asks the server for its filler line on refusal, and the panel
    says the line was a refusal, not an answer."""
    req = ReplyRequest(DOCS, "How much?", deadline_ms=1000, deadline_at=1_800_000_000_000)
    body = req.livestream_body(stream=True, on_refusal="filler")
    assert body.items() >= {"stream": True, "on_refusal": "filler", "deadline_at": 1_800_000_000_000}.items()
    assert "on_refusal" not in req.livestream_body()
    panel = live.Panel(live.Target("arm rft", arm="rft"), "How much?", ())
    panel.state, panel.result = "done", ReplyResult(reply="One moment, let me check.", fallback=True, refused=True,
                                                    refusal_reason="deadline_unmeetable")
    assert "yes (refused: deadline_unmeetable; the server spoke its filler line)" in panel.stats()
    assert panel.notes() == ["arm rft was refused (deadline_unmeetable): the server spoke its filler line, not an answer"]
