"""Speech for the Live reply tab: each sentence the server streams is spoken as it arrives, as the avatar would.

The server streams a livestream reply sentence by sentence (``POST /v1/livestream/reply`` with ``stream: true``);
each sentence is synthesised here with Debian's ``espeak-ng`` (https://github.com/espeak-ng/espeak-ng) at the
speech rate (words per second, the server's ``speech_rate_wps``) and published on the app's speech channel
(``SpeechChannel``), outside Gradio's update path: the page follows an Ask's sentences as Server-Sent Events
(``GET /livethink/speech/{ask}/events``) and fetches each sentence's WAV (``GET /livethink/speech/{ask}/{n}.wav``)
as soon as it is synthesised, while Gradio's updates carry only the text and the numbers. In the browser
``PLAYER_JS`` plays the sentences one after the other, each once, and records when each arm's first sentence
starts to sound, in ms after Ask (``window.livethinkSpeech``: per sentence also when its event reached the page,
``queued``, and when the player started it, ``started``).
"""

from __future__ import annotations

import asyncio
import html
import io
import json
import shutil
import subprocess
import threading
import time
import wave
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse

ESPEAK = "espeak-ng"
VOICE = "en-us"
DEFAULT_WPS = 2.5  # the server's default speech rate (speech.speech_rate_wps)
SYNTH_TIMEOUT_S = 20.0
ROUTE = "/livethink/speech"
KEEP_ASKS = 32  # the channel keeps the sentences of the latest asks (a page that reloads can still fetch them)
KEEPALIVE_S = 15.0  # an SSE comment this often keeps an idle stream open through proxies
# The app's lead: a spoken reply's first sentence must leave the server this much before the viewer's deadline, to
# be synthesised and start sounding in the page by it. Until measured: synthesis of one sentence, and the page's
# start (its SSE event to the sentence's `playing`), each its median on this 2-core CPU (benchmarks/demo_speech.py).
SYNTH_MS_PRIOR = 60.0
PAGE_LAG_MS_PRIOR = 120.0
LEAD_SMOOTHING = 0.3  # weight of the newest synthesis time in its running estimate


class SpeechError(RuntimeError):
    """``espeak-ng`` is missing or could not speak a sentence."""


def espeak_path() -> str | None:
    """Where ``espeak-ng`` is, or None when it is not installed (``make demo`` / ``make test`` install it)."""
    return shutil.which(ESPEAK)


def synthesize(text: str, words_per_s: float = DEFAULT_WPS, voice: str = VOICE) -> bytes:
    """``text`` spoken by ``espeak-ng`` at ``words_per_s`` (its ``-s`` is words per minute): WAV bytes."""
    exe = espeak_path()
    if exe is None:
        raise SpeechError(f"{ESPEAK} is not installed (Debian: apt-get install {ESPEAK}); the demo cannot speak")
    wpm = max(80, min(450, round(words_per_s * 60)))  # espeak-ng's accepted range
    try:
        done = subprocess.run([exe, "-v", voice, "-s", str(wpm), "--stdout", text], capture_output=True,
                              timeout=SYNTH_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SpeechError(f"{ESPEAK} took more than {SYNTH_TIMEOUT_S:g} s on one sentence") from None
    if done.returncode != 0 or not done.stdout.startswith(b"RIFF"):
        raise SpeechError(f"{ESPEAK} failed (exit {done.returncode}): {done.stderr.decode(errors='replace')[:200]}")
    return _sized(done.stdout)


def _sized(data: bytes) -> bytes:
    """A WAV written to a pipe carries placeholder sizes (the writer cannot seek back): set the RIFF and ``data``
    chunk sizes from the bytes there are."""
    at = data.find(b"data", 12)
    if at < 0:
        raise SpeechError(f"{ESPEAK} wrote a WAV without a data chunk")
    out = bytearray(data)
    out[4:8] = (len(data) - 8).to_bytes(4, "little")
    out[at + 4 : at + 8] = (len(data) - at - 8).to_bytes(4, "little")
    return bytes(out)


def wav_seconds(data: bytes) -> float:
    """How long a WAV plays."""
    with wave.open(io.BytesIO(data)) as w:
        return w.getnframes() / float(w.getframerate())


@dataclass(frozen=True)
class SpokenSentence:
    """One sentence as the page gets it: its arm, its place in the ask, its text, its audio and when it was
    ready (ms after Ask, the demo's clock)."""

    side: str
    index: int
    text: str
    wav: bytes
    ready_ms: float

    def event(self, ask_id: str) -> dict[str, object]:
        """The SSE event that tells the page about this sentence (its audio is fetched from ``url``)."""
        return {"arm": self.side, "key": f"{ask_id}-{self.index}", "index": self.index, "text": self.text,
                "url": f"{ROUTE}/{ask_id}/{self.index}.wav", "ready_ms": round(self.ready_ms, 1),
                "seconds": round(wav_seconds(self.wav), 3)}  # fmt: skip


@dataclass
class _Ask:
    sentences: list[SpokenSentence] = field(default_factory=list)
    done: bool = False
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)


class SpeechChannel:
    """The sentences of each Ask, from the Gradio handler (a worker thread) to the page's player (an SSE stream on
    the app's event loop). Thread-safe; keeps the latest ``keep`` asks."""

    def __init__(self, keep: int = KEEP_ASKS):
        self._keep = keep
        self._lock = threading.Lock()
        self._asks: OrderedDict[str, _Ask] = OrderedDict()
        self.synth_ms = SYNTH_MS_PRIOR  # running estimate of one sentence's synthesis

    def lead_ms(self, page_lag_ms: float | None) -> float:
        """How long before the viewer's deadline the first sentence must leave the server: synthesis here, then
        the page's start (``page_lag_ms``, as the page measured it; the prior until it has)."""
        page = PAGE_LAG_MS_PRIOR if page_lag_ms is None or not 0 <= page_lag_ms < 5000 else page_lag_ms
        return self.synth_ms + page

    def open(self, ask_id: str) -> None:
        """Start an ask (its events stream can be followed from now on)."""
        with self._lock:
            self._asks[ask_id] = _Ask()
            while len(self._asks) > self._keep:
                self._wake(self._asks.popitem(last=False)[1])

    def publish(self, ask_id: str, side: str, text: str, wav: bytes, ready_ms: float,
                synth_ms: float | None = None) -> SpokenSentence:
        """Add a sentence of arm ``side`` to an open ask (it takes the next index of the ask); ``synth_ms``, how
        long it took to synthesise, updates the lead's estimate."""
        with self._lock:
            if synth_ms is not None:
                self.synth_ms += LEAD_SMOOTHING * (synth_ms - self.synth_ms)
            ask = self._asks.get(ask_id)
            if ask is None or ask.done:
                raise KeyError(f"speech channel: ask {ask_id!r} is not open")
            sentence = SpokenSentence(side, len(ask.sentences), text, wav, ready_ms)
            ask.sentences.append(sentence)
            self._wake(ask)
            return sentence

    def finish(self, ask_id: str) -> None:
        """No more sentences for this ask (its followers' streams end)."""
        with self._lock:
            ask = self._asks.get(ask_id)
            if ask is not None:
                ask.done = True
                self._wake(ask)

    def audio(self, ask_id: str, index: int) -> bytes | None:
        """A published sentence's WAV, or None."""
        with self._lock:
            ask = self._asks.get(ask_id)
            return ask.sentences[index].wav if ask is not None and 0 <= index < len(ask.sentences) else None

    def known(self, ask_id: str) -> bool:
        with self._lock:
            return ask_id in self._asks

    async def follow(self, ask_id: str, keepalive_s: float = KEEPALIVE_S) -> AsyncIterator[SpokenSentence | None]:
        """The ask's sentences, those published so far first, then each as it is published, until the ask is
        finished (or dropped); None every ``keepalive_s`` of silence."""
        loop, seen = asyncio.get_running_loop(), 0
        while True:
            wake = asyncio.Event()
            with self._lock:
                ask = self._asks.get(ask_id)
                if ask is None:
                    return
                new, finished = ask.sentences[seen:], ask.done
                if not new and not finished:
                    ask.waiters.append((loop, wake))
            for s in new:
                yield s
            seen += len(new)
            if finished and not new:
                return
            if new:
                continue
            try:
                await asyncio.wait_for(wake.wait(), keepalive_s)
            except TimeoutError:
                yield None

    @staticmethod
    def _wake(ask: _Ask) -> None:
        for loop, event in ask.waiters:
            loop.call_soon_threadsafe(event.set)
        ask.waiters.clear()


def speech_router(channel: SpeechChannel) -> APIRouter:
    """The channel's HTTP side, on the demo app: ``GET {ROUTE}/{ask}/events`` (SSE: one ``sentence`` event per
    sentence, then ``end``) and ``GET {ROUTE}/{ask}/{n}.wav``."""
    router = APIRouter()

    @router.get(ROUTE + "/{ask_id}/events")
    async def events(ask_id: str) -> Response:
        if not channel.known(ask_id):
            return JSONResponse({"error": {"message": f"no ask {ask_id!r} on this demo (it may have expired)",
                                           "param": "ask_id"}}, status_code=404)  # fmt: skip

        async def stream() -> AsyncIterator[str]:
            async for s in channel.follow(ask_id):
                yield ": keep-alive\n\n" if s is None else f"event: sentence\ndata: {json.dumps(s.event(ask_id))}\n\n"
            yield "event: end\ndata: {}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})  # fmt: skip

    @router.get(ROUTE + "/{ask_id}/{index}.wav")
    def audio(ask_id: str, index: int) -> Response:
        wav = channel.audio(ask_id, index)
        if wav is None:
            return JSONResponse({"error": {"message": f"no sentence {index} in ask {ask_id!r}", "param": "index"}},
                                status_code=404)  # fmt: skip
        return Response(wav, media_type="audio/wav", headers={"Cache-Control": "no-store"})

    return router


def speech_html(side: str, ask_id: str | None, sentences: list[SpokenSentence]) -> str:
    """One arm's speech panel: the marker that tells the page's player which ask to follow (``data-lt-speech``)
    and a visible line of what was said."""
    parts = [] if ask_id is None else [f'<span hidden data-lt-speech="{html.escape(ask_id)}" data-arm="{side}"></span>']
    if sentences:
        spoken = sum(wav_seconds(s.wav) for s in sentences)
        parts.append(f"<p>🔊 {len(sentences)} sentence(s) spoken ({spoken:.1f} s of speech); the first was ready "
                     f"{sentences[0].ready_ms:,.0f} ms after Ask.</p>")
    return "\n".join(parts)


# The page's player: it follows each ask's speech channel (an EventSource on the marker's ask id), fetches and
# decodes each sentence's audio (Web Audio, in the context the Ask click opened) as soon as its event arrives, and
# plays the sentences one at a time, each key once; Ask stops what is being said and drops what was still to come.
# A sentence sounds when its source starts plus the context's output latency.
PLAYER_JS = """
() => {
  if (window.livethinkSpeech) return;
  const S = window.livethinkSpeech = {askAt: null, clickedAt: null, firstSound: {}, played: [], errors: [],
                                      lags: []};
  // what the Ask handler gets from the page: when the viewer clicked (epoch ms) and the page's own start lag
  S.meta = () => {
    const lags = S.lags.slice().sort((x, y) => x - y);
    return JSON.stringify({clicked_at: S.clickedAt, lag_ms: lags.length ? lags[lags.length >> 1] : null});
  };
  const followed = new Set(), queued = new Set(), queue = [], sources = [];
  const base = window.location.pathname.replace(/\\/$/, '');
  let playing = null, ctx = null;
  const now = () => S.askAt === null ? null : performance.now() - S.askAt;
  const context = () => {
    if (!ctx) ctx = new (window.AudioContext || window.webkitAudioContext)();
    if (ctx.state === 'suspended') ctx.resume();
    return ctx;
  };
  document.addEventListener('click', (e) => {
    if (!(e.target.closest && e.target.closest('#ask'))) return;
    context();  // opened (or resumed) by the click: a user gesture
    S.askAt = performance.now(); S.clickedAt = Date.now(); S.firstSound = {}; S.played = [];
    queue.length = 0;  // a new question interrupts the answer being spoken
    sources.splice(0).forEach((s) => s.close());
    if (playing) { const p = playing; playing = null; if (p.node) p.node.stop(); }
  }, true);
  function next() {
    if (playing || !queue.length) return;
    const item = playing = queue.shift();
    const started = now();
    const done = () => { if (playing === item) { playing = null; next(); } };
    item.buffer.then((buffer) => {
      if (playing !== item) return;  // interrupted while it decoded
      const node = item.node = ctx.createBufferSource();
      node.buffer = buffer;
      node.connect(ctx.destination);
      node.onended = done;
      node.start();
      const at = S.askAt === null ? null : now() + 1000 * (ctx.baseLatency + (ctx.outputLatency || 0));
      if (!(item.arm in S.firstSound)) {
        S.firstSound[item.arm] = at;
        if (at !== null && item.queued !== null && !item.waited) {
          S.lags.push(at - item.queued); S.lags.splice(0, S.lags.length - 5);  // the page's start, last 5 asks
        }
      }
      S.played.push({arm: item.arm, key: item.key, at: at, queued: item.queued, started: started});
    }).catch((err) => { S.errors.push(item.key + ': ' + err); done(); });
  }
  function follow(ask) {
    const source = new EventSource(base + '/livethink/speech/' + encodeURIComponent(ask) + '/events');
    sources.push(source);
    source.addEventListener('sentence', (e) => {
      const s = JSON.parse(e.data);
      if (queued.has(s.key)) return;
      queued.add(s.key);
      const buffer = fetch(base + s.url).then((r) => {
        if (!r.ok) throw new Error('HTTP ' + r.status);
        return r.arrayBuffer();
      }).then((data) => context().decodeAudioData(data));
      buffer.catch(() => {});  // reported when its turn comes
      queue.push({key: s.key, arm: s.arm, buffer: buffer, queued: now(), waited: playing !== null || queue.length > 0});
      next();
    });
    source.addEventListener('end', () => source.close());
    source.onerror = () => source.close();
  }
  new MutationObserver(() => {
    document.querySelectorAll('[data-lt-speech]').forEach((m) => {
      const ask = m.dataset.ltSpeech;
      if (followed.has(ask)) return;
      followed.add(ask);
      follow(ask);
    });
  }).observe(document.body, {childList: true, subtree: true});
}
"""


MAX_CLICK_AGE_MS = 2000.0  # a click older than this (or in the future) means the page's clock is not the app's


def page_clock(page: str | None) -> tuple[float | None, float | None]:
    """The page's report at Ask (``ask_js``): when the viewer clicked (epoch ms; None when absent or when the
    page's clock disagrees with this machine's) and the page's start lag (ms; None until it has one)."""
    try:
        meta = json.loads(page or "{}")
    except ValueError:
        return None, None
    clicked, lag = (meta.get("clicked_at"), meta.get("lag_ms")) if isinstance(meta, dict) else (None, None)
    age = time.time() * 1000 - clicked if isinstance(clicked, (int, float)) else None
    return (clicked if age is not None and 0 <= age <= MAX_CLICK_AGE_MS else None,
            float(lag) if isinstance(lag, (int, float)) else None)  # fmt: skip


def ask_js(n_inputs: int) -> str:
    """The Ask event's page-side step: the last of its ``n_inputs`` inputs becomes the page's ``meta()`` (when the
    viewer clicked, the page's start lag) for ``apps.demo.live.ask``'s ``page``."""
    return (f"(...args) => {{ const a = args.slice(0, {n_inputs}); const S = window.livethinkSpeech; "
            f"a[{n_inputs - 1}] = S ? S.meta() : ''; return a; }}")
