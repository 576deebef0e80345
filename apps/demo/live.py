"""The Live reply tab: ask a viewer question, watch arm A, arm B or both answer, with their latency numbers.

The reply is spoken as the avatar would speak it (``POST /v1/livestream/reply`` with ``stream: true``: each
sentence synthesised by ``espeak-ng`` as soon as it arrives and played in the page, ``apps.demo.speech``), or
streams in as text (``POST /v1/chat/completions``, SSE), or comes in one piece (``POST /v1/livestream/reply``);
the reasoning sits in a collapsible "Thinking…" message (Gradio ``ChatMessage`` metadata). Beside each reply:
tokens, time to first token, first sentence and first sound, end-to-end latency, whether the deadline was met,
the arm and the model. With both arms the requests run one after the other, so each gets the server to itself.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gradio as gr

from apps.demo.client import Delta, LivethinkClient, ReplyRequest, ReplyResult, Sentence, ServerError
from apps.demo.inputs import CatalogEntry, InputError, docs_for, parse_docs, parse_history, parse_question
from apps.demo.speech import (
    SpeechChannel,
    SpeechError,
    SpokenSentence,
    ask_js,
    espeak_path,
    page_clock,
    speech_html,
    synthesize,
)
from livethink.data.schema import Turn

log = logging.getLogger(__name__)

MODES = ("Arm A", "Arm B", "A and B side by side")
AUTO_LABEL = "viewer's A/B arm (assigned by viewer id)"
EXAMPLE_QUESTIONS = (
    "How much is it right now with the livestream discount?",
    "Is it in stock in size M?",
    "How long does shipping take?",
    "Can I return it if it doesn't fit?",
)
UPDATE_EVERY_S = 0.05  # at most ~20 UI updates per second while streaming


@dataclass(frozen=True)
class Target:
    """Who answers: a forced A/B arm, a served model, or (neither) the viewer's assigned arm."""

    label: str
    arm: str | None = None
    model: str | None = None


def discover_targets(client: LivethinkClient, experiment: str | None) -> tuple[list[Target], str]:
    """The experiment's arms, the served models and the A/B assignment, plus a status line for the UI."""
    try:
        health = client.health()
        models = client.models()
    except ServerError as exc:
        return [Target(AUTO_LABEL)], f"⚠ {exc.user_message()}"
    experiments = client.experiments()
    name = experiment if experiment in experiments else next(iter(experiments), None)
    arms = experiments.get(name, []) if name else []
    if not arms and experiment:
        try:
            arms = list((client.experiment_summary(experiment).get("arms") or {}).keys())
            name = experiment
        except ServerError:
            arms = []
    targets = [Target(f"arm {a}", arm=a) for a in arms]
    targets += [Target(f"model {m}", model=m) for m in models]
    targets.append(Target(AUTO_LABEL))
    engines = ", ".join(f"{k}: {v}" for k, v in (health.get("engines") or {}).items())
    exp = f"; experiment `{name}` (arms {', '.join(arms)})" if arms else "; no A/B experiment on the server"
    return targets, f"✓ Connected to `{client.base_url}`: models {', '.join(models) or '–'} ({engines}){exp}."


def _stamp() -> str:
    """Wall-clock time ending a final status line (so a browser can tell one answer from the next)."""
    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"


def _ms(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f} ms"


@dataclass
class Panel:
    """One arm's side of the comparison: the chat messages and the numbers beside them."""

    target: Target
    question: str
    history: tuple[Turn, ...]
    reasoning: str = ""
    reply: str = ""
    state: str = "waiting"  # waiting | thinking | replying | done | error
    error: str | None = None
    result: ReplyResult | None = None
    t_start: float = field(default_factory=time.monotonic)
    t_reply: float | None = None
    streamed: bool = False
    t_ask: float = field(default_factory=time.monotonic)  # when Ask was pressed (first sound is timed from it)
    side: str = "a"
    ask_id: str | None = None  # the ask's speech channel, when the reply is spoken
    lead_ms: float | None = None  # the app's speech lead taken off the deadline, when spoken
    spoken: list[SpokenSentence] = field(default_factory=list)
    speech_error: str | None = None

    def messages(self) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = [
            {"role": "user" if t.role == "viewer" else "assistant", "content": t.content}
            for t in self.history
        ]
        msgs.append({"role": "user", "content": self.question})
        if self.state == "waiting":
            return msgs
        if self.reasoning or self.state == "thinking":
            done = self.state != "thinking"
            meta: dict[str, Any] = {"title": "Thinking…", "status": "done" if done else "pending"}
            if done:
                meta["duration"] = round(self._thinking_s(), 3)
            msgs.append({"role": "assistant", "content": self.reasoning or "…", "metadata": meta})
        if self.reply:
            msgs.append({"role": "assistant", "content": self.reply})
            if self.streamed and self.result is not None and self.result.fallback:
                msgs.append({"role": "assistant", "content": "_(server flag `fallback`: this text was not usable "
                                                              "in time; the livestream endpoint speaks its fallback "
                                                              "reply instead)_"})  # fmt: skip
        elif self.state == "done":
            msgs.append({"role": "assistant", "content": "_(empty reply)_"})
        if self.error:
            msgs.append({"role": "assistant", "content": f"⚠ {self.error}"})
        return msgs

    def _thinking_s(self) -> float:
        r = self.result
        if r is not None and r.first_reply_token_ms is not None and r.first_token_ms is not None:
            return max(0.0, (r.first_reply_token_ms - r.first_token_ms) / 1000)
        end = self.t_reply or time.monotonic()
        return end - self.t_start

    def stats(self) -> str:
        head = f"**{self.target.label}**"
        if self.state == "waiting":
            return f"{head}\n\nwaiting for the other arm to finish…"
        if self.state == "error":
            return f"{head}\n\n⚠ {self.error}"
        r = self.result
        if r is None:
            return f"{head}\n\n{self.state}… {(time.monotonic() - self.t_start) * 1000:,.0f} ms"
        if r.deadline_met is None:
            deadline = "–"
        elif r.deadline_met:
            deadline = f"✓ met ({_ms(r.e2e_ms)} ≤ {_ms(r.deadline_ms)})"
        else:
            deadline = f"✗ **missed** ({_ms(r.e2e_ms)} > {_ms(r.deadline_ms)})"
        tokens = (
            "–"
            if r.total_tokens is None
            else f"{r.total_tokens} (thinking {r.reasoning_tokens or 0} · reply {r.reply_tokens or 0})"
        )
        who = f"arm `{r.arm}`" if r.arm else "no A/B arm"
        if r.experiment:
            who += f" of `{r.experiment}`"
        rows = [
            ("Tokens", tokens),
            ("Time to first token", _ms(r.first_token_ms)),
            ("First reply token", _ms(r.first_reply_token_ms)),
            *([("Speech lead (synthesis + page start)", _ms(self.lead_ms))] if self.lead_ms is not None else []),
            *([("First sentence (server)", _ms(r.first_sentence_ms)),
               ("First sound ready (after Ask)", _ms(self.spoken[0].ready_ms) if self.spoken else
                f"– ({self.speech_error})" if self.speech_error else "–")] if r.first_sentence_ms is not None else []),
            ("End-to-end latency", _ms(r.e2e_ms)),
            ("Deadline", deadline),
            ("Queue", _ms(r.queue_ms)),
            ("Forced end of thinking", "yes" if r.forced_end_of_thinking else "no"),
            ("Fallback reply", f"yes (refused: {r.refusal_reason or 'not admitted'}; the server spoke its filler line)"
             if r.refused else "yes (nothing usable by the deadline)" if r.fallback else "no"),
        ]
        table = "\n".join(f"| {k} | {v} |" for k, v in rows)
        return f"{head}\n\n| Served by | {who}, model `{r.model or '–'}` |\n|---|---|\n{table}"

    def notes(self) -> list[str]:
        r = self.result
        if r is None:
            return []
        out = []
        if r.deadline_met is False:
            out.append(
                f"{self.target.label} missed its {_ms(r.deadline_ms)} deadline ({_ms(r.e2e_ms)} end to end)"
            )
        if r.refused:
            out.append(f"{self.target.label} was refused ({r.refusal_reason or 'not admitted'}): the server spoke its "
                       "filler line, not an answer")
        elif r.fallback:
            out.append(f"{self.target.label} had no usable reply in time: the server sent its fallback reply")
        elif r.cut_at_deadline:
            out.append(f"{self.target.label}'s reply was cut at the deadline")
        return out


_SPOKEN = object()  # the end of a spoken reply, on its changes queue


def _start_speaking(client: LivethinkClient, panel: Panel, req: ReplyRequest,
                    channel: SpeechChannel) -> queue.Queue[object]:  # fmt: skip
    """The avatar's way, in a thread of its own: the streamed reply's sentence events, each synthesised and
    published on the speech channel (the page's player follows it) as soon as it arrives, whatever the UI is doing.
    Returns the changes queue that ``_run`` turns into UI updates: None per change, then an exception or the end."""
    changes: queue.Queue[object] = queue.Queue()
    panel.state, panel.t_start, panel.streamed = "thinking", time.monotonic(), True

    def speak() -> None:
        try:
            for item in client.speak_reply(req):
                if isinstance(item, ReplyResult):
                    panel.result, panel.reasoning = item, item.reasoning
                    break
                assert isinstance(item, Sentence)
                if panel.state == "thinking":
                    panel.state, panel.t_reply = "replying", time.monotonic()
                panel.reply += item.text
                if panel.speech_error is None:
                    t0 = time.monotonic()
                    try:
                        wav = synthesize(item.text.strip())
                    except SpeechError as exc:
                        panel.speech_error = str(exc)
                    else:
                        assert panel.ask_id is not None
                        done = time.monotonic()
                        panel.spoken.append(channel.publish(panel.ask_id, panel.side, item.text.strip(), wav,
                                                            (done - panel.t_ask) * 1000, (done - t0) * 1000))
                changes.put(None)
        except Exception as exc:  # handed to the UI's generator, which reports it
            changes.put(exc)
        changes.put(_SPOKEN)

    threading.Thread(target=speak, name=f"speak-{panel.side}", daemon=True).start()
    return changes


def _spoken(changes: queue.Queue[object]) -> Iterator[None]:
    """The UI side of ``_start_speaking``: one refresh per change; its exception, raised here."""
    while (item := changes.get()) is not _SPOKEN:
        if isinstance(item, BaseException):
            raise item
        yield


def _run(client: LivethinkClient, panel: Panel, req: ReplyRequest | None, stream: bool,
         speaking: queue.Queue[object] | None = None) -> Iterator[None]:
    """Drive one request, updating ``panel``; yields whenever the UI should refresh. ``speaking``: the request is
    already being spoken (``_start_speaking``; ``req`` unused); follow its changes."""
    if speaking is None:
        panel.state, panel.t_start, panel.streamed = "thinking", time.monotonic(), stream
    yield
    try:
        if speaking is not None:
            yield from _spoken(speaking)
        elif req is None:
            raise ValueError("_run: a request to send, or one being spoken")
        elif not stream:
            panel.result = client.reply(req)
            panel.reasoning, panel.reply = panel.result.reasoning, panel.result.reply
        else:
            last = 0.0
            for item in client.stream_reply(req):
                if isinstance(item, ReplyResult):
                    panel.result = item
                    break
                assert isinstance(item, Delta)
                if item.phase == "reasoning":
                    panel.reasoning += item.text
                else:
                    if panel.state == "thinking":
                        panel.state, panel.t_reply = "replying", time.monotonic()
                    panel.reply += item.text
                now = time.monotonic()
                if now - last >= UPDATE_EVERY_S:
                    last = now
                    yield
        panel.state = "done"
    except ServerError as exc:
        panel.state, panel.error = "error", exc.user_message()
    except Exception as exc:  # the UI shows a sentence, the log keeps the traceback
        log.exception("live reply failed")
        panel.state, panel.error = "error", f"Unexpected error in the demo: {type(exc).__name__}: {exc}"
    yield


def ask(client: LivethinkClient, targets: dict[str, Target], docs_text: str, question: str, history_text: str,
        viewer_id: str, mode: str, label_a: str, label_b: str, budget_ms: float,
        stream: bool, speak: bool = False, page: str | None = None, *,
        channel: SpeechChannel | None = None) -> Iterator[tuple[Any, ...]]:  # fmt: skip
    """The Ask button: yields (chat A, stats A, speech A, chat B, stats B, speech B, status) as the replies come
    in. ``speak``: the streamed livestream reply, each sentence spoken and published on ``channel`` (the app's;
    ``apps.demo.speech``), its first sentence due at the server the app's lead before the viewer's deadline (the
    budget from the click the page reports in ``page``, for the first arm asked; from its own start for the next)."""
    t_ask = time.monotonic()
    empty = ([], "", "", [], "", "")
    try:
        docs = parse_docs(docs_text)
        q = parse_question(question)
        history = parse_history(history_text)
    except InputError as exc:
        yield (*empty, f"⚠ {exc} · {_stamp()}")
        return
    chosen = {"Arm A": ["a"], "Arm B": ["b"]}.get(mode, ["a", "b"])
    panels: dict[str, Panel | None] = {"a": None, "b": None}
    for side, label in (("a", label_a), ("b", label_b)):
        if side in chosen:
            panels[side] = Panel(targets.get(label) or Target(AUTO_LABEL), q, history, t_ask=t_ask, side=side)
    viewer = (viewer_id or "").strip() or f"demo-{uuid.uuid4().hex[:8]}"
    clicked_at, page_lag = page_clock(page)
    if speak:
        channel = channel if channel is not None else SpeechChannel()
        ask_id = uuid.uuid4().hex
        channel.open(ask_id)
        for p in panels.values():
            if p is not None:
                p.ask_id = ask_id
    else:
        channel = None

    def view(status: str) -> tuple[Any, ...]:
        out: list[Any] = []
        for side in ("a", "b"):
            p = panels[side]
            if p is None:
                out += [gr.update(value=[], label=f"Arm {side.upper()}"), "", ""]
            else:
                out += [
                    gr.update(value=p.messages(), label=f"Arm {side.upper()}: {p.target.label}"),
                    p.stats(),
                    speech_html(side, p.ask_id, p.spoken),
                ]
        return (*out, status)

    def request(panel: Panel, first: bool) -> ReplyRequest:
        deadline_at = None
        if channel is not None:  # the first sentence is due the app's speech lead before the viewer's deadline
            now_ms, panel.lead_ms = time.time() * 1000, channel.lead_ms(page_lag)
            start = clicked_at if first and clicked_at is not None else now_ms
            deadline_at = int(start + budget_ms - panel.lead_ms)
        return ReplyRequest(docs, q, history, viewer, int(budget_ms), panel.target.arm, panel.target.model,
                            deadline_at)  # fmt: skip

    first = panels[chosen[0]]
    assert first is not None
    # a spoken reply's request leaves before the first UI update (which takes Gradio a round of its own)
    speaking = _start_speaking(client, first, request(first, True), channel) if channel is not None else None
    try:
        yield view("asking…")
        for side in chosen:
            panel = panels[side]
            assert panel is not None
            if channel is None:
                steps = _run(client, panel, request(panel, False), stream)
            else:
                if panel is not first:
                    speaking = _start_speaking(client, panel, request(panel, False), channel)
                steps = _run(client, panel, None, stream, speaking)
            for _ in steps:
                yield view(f"{panel.target.label} is answering…")
    finally:
        if channel is not None:
            channel.finish(ask_id)
    notes = [n for p in panels.values() if p is not None for n in p.notes()]
    notes += [f"{p.target.label} was not spoken: {p.speech_error}" for p in panels.values()
              if p is not None and p.speech_error]
    errors = [f"{p.target.label}: {p.error}" for p in panels.values() if p is not None and p.error]
    if errors:
        status = "⚠ " + " · ".join(errors)
    elif notes:
        status = "⚠ " + " · ".join(notes)
    else:
        status = "✓ done"
    yield view(f"{status} · {_stamp()}")


def build_live_tab(client: LivethinkClient, catalog: list[CatalogEntry], catalog_warning: str | None,
                   experiment: str | None, channel: SpeechChannel) -> dict[str, Any]:  # fmt: skip
    """Lay out the tab (inside an open ``gr.Tab``) and wire its events (spoken replies go out on ``channel``);
    returns the components."""
    targets, server_status = discover_targets(client, experiment)
    labels = [t.label for t in targets]
    default_a = labels[0]
    default_b = labels[1] if len(labels) > 2 else labels[0]
    targets_state = gr.State({t.label: t for t in targets})

    status = gr.Markdown(
        server_status + (f"\n\n⚠ {catalog_warning}" if catalog_warning else ""), elem_id="live-status"
    )
    with gr.Row():
        with gr.Column(scale=3):
            choices = [e.label for e in catalog]
            products = gr.Dropdown(choices, value=choices[:1], multiselect=True, max_choices=5,
                                   label="Products on stream (catalog)", elem_id="products")  # fmt: skip
            docs = gr.Textbox(docs_for(catalog, choices[:1]), lines=4, max_lines=12,
                              label="Product docs (edit or paste; one product per paragraph)", elem_id="docs")  # fmt: skip
            with gr.Row():
                question = gr.Textbox(
                    EXAMPLE_QUESTIONS[0], lines=2, label="Viewer question", elem_id="question"
                )
                history = gr.Textbox(lines=2, label="Chat history (optional: `viewer: …` / `host: …` lines)",
                                     elem_id="history")  # fmt: skip
            with gr.Accordion("Example questions", open=False):
                gr.Examples([[q] for q in EXAMPLE_QUESTIONS], inputs=[question], label=None)
        with gr.Column(scale=2):
            mode = gr.Radio(list(MODES), value=MODES[2], label="Who answers", elem_id="mode")
            with gr.Row():
                arm_a = gr.Dropdown(labels, value=default_a, label="Arm A", elem_id="arm-a")
                arm_b = gr.Dropdown(labels, value=default_b, label="Arm B", elem_id="arm-b")
            budget = gr.Slider(
                100, 5000, value=1000, step=50, label="Latency budget (deadline_ms)", elem_id="budget"
            )
            with gr.Row():
                viewer = gr.Textbox("demo-viewer", label="Viewer id", elem_id="viewer")
                stream = gr.Checkbox(True, label="Stream the reply", elem_id="stream")
                speak = gr.Checkbox(espeak_path() is not None, label="Speak it (espeak-ng), sentence by sentence",
                                    elem_id="speak")
            page = gr.Textbox(visible=False, elem_id="page-clock")  # the page's click time and start lag (ask_js)
            with gr.Row():
                ask_btn = gr.Button("Ask", variant="primary", scale=2, elem_id="ask")
                reconnect = gr.Button("Reconnect", scale=1, elem_id="reconnect")
    with gr.Row():
        with gr.Column(elem_id="panel-a") as col_a:
            chat_a = gr.Chatbot(label="Arm A", height=360, elem_id="chat-a")
            speech_a = gr.HTML(elem_id="speech-a")
            stats_a = gr.Markdown(elem_id="stats-a")
        with gr.Column(elem_id="panel-b") as col_b:
            chat_b = gr.Chatbot(label="Arm B", height=360, elem_id="chat-b")
            speech_b = gr.HTML(elem_id="speech-b")
            stats_b = gr.Markdown(elem_id="stats-b")

    def on_products(selected: list[str] | None) -> str:
        return docs_for(catalog, selected or [])

    def on_mode(m: str) -> tuple[Any, Any]:
        return gr.update(visible=m != MODES[1]), gr.update(visible=m != MODES[0])

    def on_reconnect() -> tuple[Any, ...]:
        ts, line = discover_targets(client, experiment)
        ls = [t.label for t in ts]
        b = ls[1] if len(ls) > 2 else ls[0]
        return (
            {t.label: t for t in ts},
            line,
            gr.update(choices=ls, value=ls[0]),
            gr.update(choices=ls, value=b),
        )

    def on_ask(tmap: dict[str, Target], *args: Any) -> Iterator[tuple[Any, ...]]:
        yield from ask(client, tmap, *args, channel=channel)

    products.change(on_products, [products], [docs])
    mode.change(on_mode, [mode], [col_a, col_b])
    reconnect.click(on_reconnect, None, [targets_state, status, arm_a, arm_b])
    inputs = [targets_state, docs, question, history, viewer, mode, arm_a, arm_b, budget, stream, speak, page]
    outputs = [chat_a, stats_a, speech_a, chat_b, stats_b, speech_b, status]
    ask_btn.click(on_ask, inputs, outputs, js=ask_js(len(inputs)))
    question.submit(on_ask, inputs, outputs, js=ask_js(len(inputs)))
    return {"status": status, "ask": ask_btn, "chat_a": chat_a, "chat_b": chat_b, "reconnect": on_reconnect,
            "reconnect_outputs": [targets_state, status, arm_a, arm_b]}  # fmt: skip
